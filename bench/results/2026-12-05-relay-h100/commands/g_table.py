"""g.jsonl (probe/next_g.sh): per label and shape, fused / GEMM alone and fused / sequential for each
(dist, env) variant; medians over rounds where a label repeats (sweeps r1, r2)."""
import json, statistics, sys, collections
acc = collections.defaultdict(list)
for l in open(sys.argv[1]):
    if not l.strip():
        continue
    d = json.loads(l)
    lab = d["label"].rsplit(" r", 1)[0] if d["label"].startswith("sweep") else d["label"]
    var = d["dist"] + " " + d["env"]
    if "shapes" in d:  # gemm-rs
        for sh in d["shapes"]:
            rows = {x["op"][:3]: x["us"] for x in sh["rows"] if x.get("ran")}
            acc[(lab, "%dx%dx%d" % (sh["M"], sh["N"], sh["K"]), var)].append((rows["(g)"] / rows["(a)"], rows["(g)"] / rows["(l)"], rows["(g)"]))
    else:  # gemm-allreduce: (e) against cuBLASLt alone and GEMM + tw::allreduce
        for r in d["rows"]:
            if r.get("t_fused_us"):
                acc[(lab, "%dx%dx%d" % (r["M"], r["N"], r["K_local"]), var)].append(
                    (r["t_fused_us"] / r["t_gemm_us"], r["t_fused_us"] / r["t_gemm_tw_us"], r["t_fused_us"]))
keys = sorted({(k[0], k[1]) for k in acc}, key=lambda k: (k[0], int(k[1].split("x")[0])))
vars_ = list(dict.fromkeys(k[2] for k in acc))
for v in vars_:
    print("variant:", v)
for lab, sh in keys:
    cells = []
    for v in vars_:
        x = acc.get((lab, sh, v))
        cells.append("%.3f/%.3f" % (statistics.median(a for a, _, _ in x), statistics.median(b for _, b, _ in x)) if x else "-")
    print("%-22s %-16s " % (lab, sh) + " ".join("%13s" % c for c in cells))
print("(fused / GEMM alone / fused / sequential; columns in the variants' order)")
