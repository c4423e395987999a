#!/usr/bin/env python3
"""Where a fused kernel's time goes, from one traced call (tilewire trace JSON, the raw events under
"tilewire"): per rank the kernel span, the CTAs' first start and end spread, and per tile the
mainloop (mma_start -> mma_end), the owner's wait for partials (mma_end -> partials_seen) and its
reduction and stores (partials_seen -> reduce_done), as medians, 90th percentiles and totals.

  scripts/trace_split.py TRACE.json [TRACE.json ...]
"""
import json
import statistics
import sys
from collections import defaultdict

KINDS = ["kernel_start", "mma_start", "mma_end", "partial_leave", "partials_seen", "reduce_done", "tile_landed",
         "chunk_send", "chunk_recv", "kernel_end"]


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def summarize(path):
    d = json.load(open(path))
    ev = d["tilewire"]["events"]
    by_rank = defaultdict(list)
    for t, i, r, sm, k in ev:
        by_rank[r].append((t, i, sm, KINDS[k]))
    t0 = min(e[0] for e in ev)
    print(f"{path}: {len(ev)} events, {len(by_rank)} ranks")
    for r in sorted(by_rank):
        tiles = defaultdict(dict)
        starts, ends = [], []
        for t, i, sm, k in by_rank[r]:
            if k == "kernel_start":
                starts.append(t)
            elif k == "kernel_end":
                ends.append(t)
            elif k in ("chunk_send", "chunk_recv"):
                continue
            else:
                tiles[i][k] = t
        mma = [x["mma_end"] - x["mma_start"] for x in tiles.values() if "mma_end" in x and "mma_start" in x]
        # Per CTA (its SM): the gaps between one tile's mma_end and its next tile's mma_start (the
        # epilogue, the hook's waits and stores: the time the CTA's tensor cores are not working).
        per_sm = defaultdict(list)
        for t, i, sm, k in by_rank[r]:
            if k == "mma_start":
                per_sm[sm].append((t, tiles[i].get("mma_end", t)))
        gaps, busy = [], []
        for v in per_sm.values():
            v.sort()
            gaps += [b[0] - a[1] for a, b in zip(v, v[1:])]
            busy.append(sum(e - s for s, e in v))
        wait = [x["partials_seen"] - x["mma_end"] for x in tiles.values() if "partials_seen" in x and "mma_end" in x
                and "reduce_done" in x and x["reduce_done"] - x["mma_end"] < 10**9]
        red = [x["reduce_done"] - x["partials_seen"] for x in tiles.values() if "reduce_done" in x and "partials_seen" in x]
        us = lambda ns: ns / 1000.0
        span = (max(ends) - min(starts)) if starts and ends else float("nan")
        print(f"  rank {r}: span {us(span):.1f} us from +{us(min(starts) - t0) if starts else float('nan'):.1f}; "
              f"CTA ends {us(min(ends) - min(starts)) if ends else float('nan'):.1f}..{us(max(ends) - min(starts)) if ends else float('nan'):.1f} us; "
              f"{len(tiles)} tiles")
        print(f"    mainloop  p50 {us(pct(mma, .5)):.1f} p90 {us(pct(mma, .9)):.1f} max {us(max(mma) if mma else 0):.1f} us, sum {us(sum(mma)):.0f} us")
        if gaps:
            print(f"    gap       p50 {us(pct(gaps, .5)):.1f} p90 {us(pct(gaps, .9)):.1f} max {us(max(gaps)):.1f} us between a CTA's tiles; "
                  f"mainloop busy {100 * statistics.mean(busy) / span:.1f}% of the span per CTA")
        if wait:
            print(f"    wait      p50 {us(pct(wait, .5)):.1f} p90 {us(pct(wait, .9)):.1f} max {us(max(wait)):.1f} us, sum {us(sum(wait)):.0f} us ({len(wait)} owned)")
            print(f"    reduce    p50 {us(pct(red, .5)):.1f} p90 {us(pct(red, .9)):.1f} max {us(max(red)):.1f} us, sum {us(sum(red)):.0f} us")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        summarize(p)
