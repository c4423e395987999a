#!/usr/bin/env python3
"""Per-SM view of a tilewire trace (tilewire.trace JSON, plain or .gz), for the MoE overlap's
fused forward (`bench moe --trace FILE`) and any kernel that records mma_start per tile.

For each rank, on the first event's clock (us):
  placed q   first and last dispatch CTA done placing source q (chunk_recv, id kEpTracePlaced + q)
  GEMM SMs   per SM: its first and last tile past the gate (mma_start) and how many tiles it ran,
             summarized as the spread of first starts, of last starts, and of tile counts

    python3 scripts/trace_sms.py TRACE.json[.gz] [--all]   (--all: every SM's first/last/tiles)
"""
import gzip
import json
import sys
from collections import defaultdict

PLACED = 1 << 19  # include/tilewire/ops/ep.hpp kEpTracePlaced


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["tilewire"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    t = load(sys.argv[1])
    kinds = {k: i for i, k in enumerate(t["kinds"])}
    off = t["offset_ns"]
    ev = t["events"]  # [t_ns, id, rank, sm, kind]
    t0 = min(e[0] - off[e[2]] for e in ev)
    us = lambda e: (e[0] - off[e[2]] - t0) / 1e3
    for r in range(t["nranks"]):
        mine = [e for e in ev if e[2] == r]
        placed = defaultdict(list)
        sms = defaultdict(list)
        for e in mine:
            if e[4] == kinds["chunk_recv"] and e[1] >= PLACED:
                placed[e[1] - PLACED].append(us(e))
            elif e[4] == kinds["mma_start"]:
                sms[e[3]].append(us(e))
        print(f"rank {r}")
        for q in sorted(placed):
            print(f"  placed source {q}: {min(placed[q]):8.1f} .. {max(placed[q]):8.1f} us ({len(placed[q])} CTAs)")
        if not sms:
            continue
        rows = sorted((min(v), max(v), len(v), s) for s, v in sms.items())
        firsts = [a for a, _, _, _ in rows]
        lasts = [b for _, b, _, _ in rows]
        counts = [n for _, _, n, _ in rows]
        print(f"  GEMM on {len(rows)} SMs: first tile {min(firsts):.1f} .. {max(firsts):.1f} us, "
              f"last tile {min(lasts):.1f} .. {max(lasts):.1f} us, tiles per SM {min(counts)} .. {max(counts)}")
        if "--all" in sys.argv:
            print("   " + " ".join(f"{a:.0f}/{b:.0f}/{n}" for a, b, n, _ in rows))


if __name__ == "__main__":
    main()
