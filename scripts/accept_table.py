#!/usr/bin/env python3
"""Acceptance table of the fused ops from a bench JSON-lines file (one labelled bench
run per line, as `scripts/gpu_run.sh engine`'s accept step writes bench_engine.jsonl).

Per label: the shapes, fused / GEMM alone (min-max; the M >= 2048 and M = 1024 ranges apart where
both occur), fused / sequential (min-max), on how many shapes fused is slower than sequential, and
on how many it meets the fused ops' acceptance bound on fused / GEMM alone: 1.05 at M >= 2048, 1.10 at M = 1024,
1.25 at M <= 256 (decode), 1.03 for a run at one rank (a label ending in "P=1").
gemm-rs and ag-gemm: (g) op fused over (a) tilewire's GEMM alone and (l) the op's sequential path.
gemm-allreduce: (e) fused over (g) tilewire's GEMM alone on a rank's SMs (runs without (g): (a)
cuBLASLt alone) and over (c) GEMM + tw::allreduce.

    python3 scripts/accept_table.py bench_engine.jsonl [--shapes]   (--shapes: every shape's row)
"""
import json
import sys


def ratios(d):
    """(M, N, K, fused/gemm, fused/seq or None) per shape of one bench run."""
    out = []
    if "shapes" in d:  # gemm-rs, ag-gemm
        for sh in d["shapes"]:
            us = {x["op"][:3]: x["us"] for x in sh["rows"] if x.get("ran")}
            if "(g)" in us and "(a)" in us:
                seq = us["(g)"] / us["(l)"] if "(l)" in us else None
                out.append((sh["M"], sh["N"], sh["K"], us["(g)"] / us["(a)"], seq))
    else:  # gemm-allreduce
        for r in d.get("rows", []):
            if r.get("t_fused_us") and r.get("t_gemm_us"):
                tw = r.get("t_gemm_tw_us")
                # The GEMM alone: tilewire's on the rank's SMs, (g), where the run has it; else (a).
                alone = r.get("t_tw_gemm_us") or r["t_gemm_us"]
                out.append((r["M"], r["N"], r["K_local"], r["t_fused_us"] / alone,
                            r["t_fused_us"] / tw if tw and tw > 0 else None))
    return out


def bound(label, M):
    """The acceptance bound on fused / GEMM alone for a shape of this run."""
    if label.rstrip().endswith("P=1"):
        return 1.03
    return 1.05 if M >= 2048 else 1.10 if M >= 1024 else 1.25 if M <= 256 else float("inf")


def span(xs):
    return "%.3f-%.3f" % (min(xs), max(xs)) if xs else "-"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("| label | shapes | fused / GEMM alone, M >= 2048 | M = 1024 | M <= 512 | fused / sequential "
          "| slower than sequential | within the bound |")
    print("|---|---:|---|---|---|---|---:|---:|")
    details = []
    for line in open(sys.argv[1]):
        if not line.strip():
            continue
        d = json.loads(line)
        rs = ratios(d)
        if not rs:
            continue
        big = [g for m, _, _, g, _ in rs if m >= 2048]
        k1 = [g for m, _, _, g, _ in rs if m == 1024]
        small = [g for m, _, _, g, _ in rs if m <= 512]
        seq = [s for *_, s in rs if s is not None]
        slower = sum(1 for s in seq if s > 1.0)
        label = d.get("label", d.get("bench"))
        ok = sum(1 for m, _, _, g, _ in rs if g <= bound(label, m))
        print("| %s | %d | %s | %s | %s | %s | %s | %d of %d |" % (label, len(rs), span(big), span(k1), span(small), span(seq),
                                                                 "%d of %d" % (slower, len(seq)) if seq else "-", ok, len(rs)))
        details += [(d.get("label", ""), r) for r in rs]
    if "--shapes" in sys.argv:
        print()
        for lab, (m, n, k, g, s) in details:
            print("%-36s %6dx%dx%d  %.3f  %s" % (lab, m, n, k, g, "%.3f" % s if s else "-"))


if __name__ == "__main__":
    main()
