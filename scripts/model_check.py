#!/usr/bin/env python3
"""The fused ops' cost model against a run on real GPUs: kAuto's picks and the model's error.

Reads bench JSON (one bench run per line, or one per file, as `--json` and
`scripts/gpu_run.sh engine|nvlink` write them) of `bench gemm-allreduce`, `bench gemm-rs` and
`bench ag-gemm`. Every shape of those benches carries the model's line ("model (H200 NVLink):
P=2 fused 810.6 us seq 1159.0 us ov 0.02 -> fused | P=4 ..."; src/ops/fused_gemm/cost_model.hpp,
predictions_line), computed from the GEMM time the run measured. Per shape, at the run's rank
count:

  fused     measured: gemm-allreduce (e) with its path fused; gemm-rs, ag-gemm (g) op fused
  seq       measured: gemm-allreduce (c) GEMM + tw::allreduce; gemm-rs, ag-gemm (l) op sequential
  model     the line's fused and seq at that P, and its pick (fused only where it predicts a win
            by more than kAuto's margin)
  err       measured / model - 1, fused and seq apart
  regret    what kAuto's pick costs over the faster of the two measured paths: t(pick) / min - 1

A run on a virtual team (ranks sharing one GPU) is skipped: its times are not NVLink figures and
its model line is for NVLink (--virtual-ok lists it anyway, marked). The summary gives the rows,
on how many the pick matched the faster path, and the largest regret; docs/fused_gemm.md ("The
cost model (kAuto)") says what the model assumes.

    python3 scripts/model_check.py FILE... [--virtual-ok] [--tsv OUT]
      --tsv OUT  one tab-separated row per shape, for tools and the CPU test
"""
import json
import re
import sys

MODEL_AT = re.compile(r"P=(\d+) fused ([0-9.]+) us seq ([0-9.]+) us ov (-?[0-9.]+) -> (fused|seq)")
COLUMNS = ["op", "M", "N", "K", "P", "virtual", "fused_us", "seq_us", "model_fused_us", "model_seq_us",
           "err_fused", "err_seq", "faster", "pick", "regret"]


def model_at(line, P):
    """(fused, seq, overhead, pick) of the model line at rank count P, or None."""
    for m in MODEL_AT.finditer(line or ""):
        if int(m.group(1)) == P:
            return float(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(5)
    return None


def records(paths):
    """Every bench run (a JSON object) in the files: one per line, or the whole file."""
    for path in paths:
        text = open(path).read()
        try:
            yield json.loads(text)
            continue
        except json.JSONDecodeError:
            pass
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"model_check: {path}:{n}: not JSON ({e})")


def measured(d):
    """(op, M, N, K, P, virtual, fused_us, seq_us, model line) per shape of one bench run."""
    if d.get("bench") == "gemm-allreduce":
        P = int(d.get("nranks", 0))
        virtual = d.get("backend") == "virtual"
        for r in d.get("rows", []):
            fused, seq = r.get("t_fused_us"), r.get("t_gemm_tw_us")
            if r.get("path") == "fused" and fused and seq and seq > 0:
                yield ("gemm_allreduce", r["M"], r["N"], r["K_local"], P, virtual, fused, seq, r.get("model"))
    elif d.get("bench") in ("gemm-rs", "ag-gemm"):
        P = int(d.get("ranks", 0))
        virtual = bool(d.get("virtual"))
        op = "gemm_reducescatter" if d["bench"] == "gemm-rs" else "allgather_gemm"
        for sh in d.get("shapes", []):
            us = {x["op"][:3]: x["us"] for x in sh.get("rows", []) if x.get("ran") and x.get("us", -1) > 0}
            if "(g)" in us and "(l)" in us:
                yield (op, sh["M"], sh["N"], sh["K"], P, virtual, us["(g)"], us["(l)"], sh.get("model"))


def check(paths, virtual_ok=False):
    """One dict per shape (COLUMNS), and the count of shapes skipped as virtual."""
    rows, skipped = [], 0
    for d in records(paths):
        for op, M, N, K, P, virtual, fused, seq, line in measured(d):
            if virtual and not virtual_ok:
                skipped += 1
                continue
            m = model_at(line, P)
            if m is None:  # P outside the model's 2..8, or a bench without the line
                continue
            mf, ms, _, pick = m
            faster = "fused" if fused < seq else "seq"
            regret = (fused if pick == "fused" else seq) / min(fused, seq) - 1.0
            rows.append(dict(op=op, M=M, N=N, K=K, P=P, virtual=virtual, fused_us=fused, seq_us=seq,
                             model_fused_us=mf, model_seq_us=ms, err_fused=fused / mf - 1.0,
                             err_seq=seq / ms - 1.0, faster=faster, pick=pick, regret=regret))
    return rows, skipped


def main(argv):
    args, tsv, virtual_ok = [], None, False
    it = iter(argv)
    for a in it:
        if a == "--tsv":
            tsv = next(it, None) or sys.exit("model_check: --tsv needs a file")
        elif a == "--virtual-ok":
            virtual_ok = True
        elif a.startswith("-"):
            sys.exit(f"model_check: unknown option {a} (see the docstring)")
        else:
            args.append(a)
    if not args:
        sys.exit(__doc__)
    rows, skipped = check(args, virtual_ok)
    if tsv:
        with open(tsv, "w") as f:
            f.write("\t".join(COLUMNS) + "\n")
            for r in rows:
                f.write("\t".join(f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS) + "\n")
    print("| op | M x N x K | P | fused us (model, err) | seq us (model, err) | faster | kAuto's pick | regret |")
    print("|---|---|---:|---|---|---|---|---:|")
    for r in rows:
        mark = " (virtual)" if r["virtual"] else ""
        print(f"| {r['op']}{mark} | {r['M']}x{r['N']}x{r['K']} | {r['P']} "
              f"| {r['fused_us']:.1f} ({r['model_fused_us']:.1f}, {r['err_fused']:+.1%}) "
              f"| {r['seq_us']:.1f} ({r['model_seq_us']:.1f}, {r['err_seq']:+.1%}) "
              f"| {r['faster']} | {r['pick']} | {r['regret']:.1%} |")
    if skipped:
        print(f"\n{skipped} shapes of virtual-team runs skipped (not NVLink figures; --virtual-ok lists them)")
    if rows:
        hits = sum(r["pick"] == r["faster"] for r in rows)
        worst = max(rows, key=lambda r: r["regret"])
        errs = sorted(abs(r["err_fused"]) for r in rows)
        print(f"\n{len(rows)} shapes: kAuto's pick was the faster path on {hits}; largest regret "
              f"{worst['regret']:.1%} ({worst['op']} {worst['M']}x{worst['N']}x{worst['K']}, P={worst['P']}); "
              f"median |fused error| {errs[len(errs) // 2]:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
