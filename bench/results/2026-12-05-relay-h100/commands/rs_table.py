"""bench_rs.jsonl (probe/next_cand.sh) as a table: per shape, fused / GEMM alone and fused / sequential
for each label (band) and round, and the medians over rounds."""
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def us(sh, prefix):
    for x in sh["rows"]:
        if x["op"].startswith(prefix) and x["ran"]:
            return x["us"]
    return float("nan")
acc = collections.defaultdict(list)  # (label, shape) -> [(fused/gemm, fused/seq)]
for r in rows:
    for sh in r["shapes"]:
        g, f, s = us(sh, "(a)"), us(sh, "(g)"), us(sh, "(l)")
        acc[(r["label"], "%s %dx%dx%d" % (sh["name"], sh["M"], sh["N"], sh["K"]))].append((f / g, f / s))
labels = sorted({k[0] for k in acc})
shapes = list(dict.fromkeys(k[1] for k in acc))
print("| shape | " + " | ".join(labels) + " |")
print("|---|" + "---|" * len(labels))
for s in shapes:
    cells = []
    for l in labels:
        v = acc.get((l, s), [])
        cells.append("%.3f / %.3f" % (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) if v else "-")
    print("| %s | %s |" % (s, " | ".join(cells)))
print("(each cell: median over rounds of fused / GEMM alone, fused / the op's sequential path)")
