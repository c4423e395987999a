#!/usr/bin/env python3
"""Read `tilewire bench gemm --plans ... --json FILE` output and say what a plan rule could reach.

  scripts/plan_table.py bench_gemm_plans_decode_bf16.json[.gz] [more.json ...] [--by m|n|k|mn]

Per shape: every plan's ratio (cuBLASLt time / tilewire time, from the same pair timing), the
best plan and the rule's own plan ("auto"). Then per group of shapes (--by, default m): how often
each plan is the best and its geometric mean, and the geometric mean of auto, of the best plan
per shape (what a perfect rule would reach) and of the best single plan per group (what a rule
keyed on that group alone reaches). Rows with #wrong > 0 are left out and counted. Each file is
read on its own (one dtype and sweep per file).
"""
import argparse
import collections
import gzip
import json
import math


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--by", default="m", choices=["m", "n", "k", "mn"])
    args = ap.parse_args()
    for f in args.files:
        with (gzip.open(f, "rt") if f.endswith(".gz") else open(f)) as fh:
            doc = json.load(fh)
        print(f"== {f}: {doc.get('dtype', '?')}, B {doc.get('layout', '?')}")
        table(doc, args)
        print()


def table(doc, args):
    shapes = collections.OrderedDict()  # (m, n, k) -> {plan_spec: ratio}
    wrong = 0
    for r in doc["rows"]:
        if r.get("wrong", 0):
            wrong += 1
            continue
        key = (r["m"], r["n"], r["k"])
        shapes.setdefault(key, {})[r.get("plan_spec", "auto")] = r["cublas_us"] / r["tw_us"]

    plans = sorted({p for v in shapes.values() for p in v})
    print(f"{len(shapes)} shapes, {len(plans)} plans" + (f", {wrong} rows left out (#wrong > 0)" if wrong else ""))
    print(f"{'M':>6} {'N':>6} {'K':>6}  {'auto':>6}  {'best':>6}  best plan")
    for (m, n, k), v in shapes.items():
        best = max(v, key=v.get)
        auto = v.get("auto", float("nan"))
        print(f"{m:6d} {n:6d} {k:6d}  {auto:6.3f}  {v[best]:6.3f}  {best}")

    def group(key):
        m, n, k = key
        return {"m": (m,), "n": (n,), "k": (k,), "mn": (m, n)}[args.by]

    groups = collections.OrderedDict()
    for key, v in shapes.items():
        groups.setdefault(group(key), []).append(v)
    print(f"\nper {args.by}: geometric means over the group's shapes (plans run on every shape of it)")
    all_auto, all_best, all_group = [], [], []
    for g, rows in groups.items():
        common = [p for p in plans if all(p in r for r in rows)]
        per_plan = {p: geomean([r[p] for r in rows]) for p in common}
        wins = collections.Counter(max(r, key=r.get) for r in rows)
        best_single = max(per_plan, key=per_plan.get) if per_plan else None
        auto = [r["auto"] for r in rows if "auto" in r]
        best = [max(r.values()) for r in rows]
        all_auto += auto
        all_best += best
        if best_single:
            all_group += [r[best_single] for r in rows]
        print(f"  {g}: auto {geomean(auto):.3f}, best per shape {geomean(best):.3f}, best single plan "
              f"{best_single} {per_plan.get(best_single, float('nan')):.3f}; wins: "
              + ", ".join(f"{p} x{c}" for p, c in wins.most_common()))
    print(f"\nall: auto {geomean(all_auto):.3f} (min {min(all_auto):.3f}), best per shape {geomean(all_best):.3f} "
          f"(min {min(all_best):.3f}), best single plan per {args.by} {geomean(all_group):.3f} "
          f"(min {min(all_group):.3f})")


if __name__ == "__main__":
    main()
