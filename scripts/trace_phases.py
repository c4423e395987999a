#!/usr/bin/env python3
"""How a fused kernel's pace changes over its call, from one traced call (tilewire trace JSON, the
raw events under "tilewire"). Per rank, each CTA's tiles are ordered by mainloop start; a tile's
period is the time from its mainloop start to the next one on the same SM (the mainloop plus the
epilogue and the hook's waits before the next tile). The call is cut into `--windows` equal time
windows (default: the number of ranks, the relay's segments) and the script prints per window the
tiles started, the period and mainloop medians, and how many tiles the rank owned (a tile_landed
event: the relay's finals). Then the tail: from each CTA's last mainloop end to its kernel_end.

  scripts/trace_phases.py [--windows W] TRACE.json [TRACE.json ...]
"""
import json
import statistics
import sys
from collections import defaultdict


def med(v):
    return statistics.median(v) if v else float("nan")


def summarize(path, windows):
    d = json.load(open(path))["tilewire"]
    kinds = d["kinds"]
    ev = d["events"]
    nranks = d.get("nranks", 1)
    W = windows or nranks
    by_rank = defaultdict(list)
    for t, i, r, sm, k in ev:
        by_rank[r].append((t, i, sm, kinds[k]))
    print(f"{path}: {len(ev)} events, {nranks} ranks, {W} windows")
    for r in sorted(by_rank):
        tiles = defaultdict(dict)
        start = {}
        end = {}
        for t, i, sm, k in by_rank[r]:
            if k == "kernel_start":
                start[sm] = min(start.get(sm, t), t)
            elif k == "kernel_end":
                end[sm] = max(end.get(sm, t), t)
            elif k in ("mma_start", "mma_end", "tile_landed"):
                tiles[i][k] = t
                if k == "mma_start":
                    tiles[i]["sm"] = sm
        if not start or not end:
            continue
        t0, t1 = min(start.values()), max(end.values())
        span = t1 - t0
        per_sm = defaultdict(list)
        for i, x in tiles.items():
            if "mma_start" in x and "mma_end" in x:
                per_sm[x["sm"]].append((x["mma_start"], x["mma_end"], "tile_landed" in x))
        win = [dict(n=0, own=0, period=[], mma=[]) for _ in range(W)]
        tails = []
        for sm, v in per_sm.items():
            v.sort()
            for a, b in zip(v, v[1:] + [None]):
                w = min(W - 1, int((a[0] - t0) * W / span))
                win[w]["n"] += 1
                win[w]["own"] += a[2]
                win[w]["mma"].append(a[1] - a[0])
                if b is not None:
                    win[w]["period"].append(b[0] - a[0])
            if sm in end:
                tails.append(end[sm] - v[-1][1])
        print(f"  rank {r}: span {span / 1e3:.1f} us, {sum(len(v) for v in per_sm.values())} tiles on {len(per_sm)} SMs")
        for k, x in enumerate(win):
            print(f"    window {k}: {x['n']:5d} tiles ({x['own']:4d} owned)  period p50 {med(x['period']) / 1e3:7.2f} us"
                  f"  mainloop p50 {med(x['mma']) / 1e3:7.2f} us  gap p50 {(med(x['period']) - med(x['mma'])) / 1e3:6.2f} us")
        tails.sort()
        print(f"    tail (last mainloop end -> kernel_end): p50 {med(tails) / 1e3:.1f} us, max {tails[-1] / 1e3:.1f} us")


if __name__ == "__main__":
    args = sys.argv[1:]
    W = 0
    if args[:1] == ["--windows"]:
        W = int(args[1])
        args = args[2:]
    for p in args:
        summarize(p, W)
