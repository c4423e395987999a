#!/usr/bin/env python3
"""scripts/plot_trace.py -- draw a tilewire trace file as a PNG timeline.

  python3 scripts/plot_trace.py TRACE.json -o OUT.png [--title TEXT] [--max-sm-rows N] [--quiet]

TRACE.json is what tw::trace::save_trace_file writes (`tilewire trace summarize FILE --plot OUT`
runs this script); only its "tilewire" key is read: the raw events, the clock offsets, the metrics.

One panel per rank, time in microseconds from the earliest aligned event:
  top lanes   compute (union of the tiles' [mma_start, mma_end]), comm (union of [partial_leave or
              partials_seen or reduce_done, tile_landed] and [chunk_send, chunk_recv]), and their
              overlap (communication hidden under compute)
  SM bands    one per SM the rank used (when at most --max-sm-rows): compute bars below, comm above
  red line    the rank's first byte on the wire (first partial_leave / chunk_send)
Titles carry overlap %, time to first byte and exposed communication from the embedded metrics.
The pairing rules are those of include/tilewire/trace/trace.hpp (docs/tracing.md).
Needs matplotlib (Agg backend); scripts/setup.sh installs it into build-deps/python when python3
lacks it, and this script looks there.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PYLIB = os.path.join(ROOT, "build-deps", "python")
if os.path.isdir(_PYLIB):
    sys.path.insert(0, _PYLIB)

KINDS = ["kernel_start", "mma_start", "mma_end", "partial_leave", "partials_seen", "reduce_done",
         "tile_landed", "chunk_send", "chunk_recv", "kernel_end"]
K = {name: code for code, name in enumerate(KINDS)}
TILE_KINDS = range(K["mma_start"], K["tile_landed"] + 1)
CHUNK_KINDS = (K["chunk_send"], K["chunk_recv"])
COMPUTE_COLOR = "#4C72B0"
COMM_COLOR = "#DD8452"
HIDDEN_COLOR = "#55A868"


def load(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    tw = doc.get("tilewire") if isinstance(doc, dict) else None
    if not isinstance(tw, dict) or tw.get("format") != "tilewire.trace":
        raise SystemExit(f"plot_trace: {path} has no tilewire trace (top-level key 'tilewire' with "
                         "format 'tilewire.trace'); write it with tw::trace::save_trace_file")
    return tw


class IdEvents:
    """Per (rank, id): for each kind, earliest time (and its SM) and latest time."""

    def __init__(self):
        self.first = {}
        self.last = {}
        self.sm = {}

    def add(self, t, sm, kind):
        if kind not in self.first or t < self.first[kind]:
            self.first[kind] = t
            self.sm[kind] = sm
        if kind not in self.last or t > self.last[kind]:
            self.last[kind] = t


def spans(tw):
    """Aligned intervals per rank: {rank: {"compute": [(b, e, sm)], "comm": [...], "first_byte": t,
    "kernel_start": t}}, times in ns from the earliest aligned event."""
    nranks = int(tw["nranks"])
    offsets = tw.get("offset_ns") or [0] * nranks
    events = [(t - offsets[r], i, r, sm, k) for t, i, r, sm, k in tw["events"]]
    t0 = min((e[0] for e in events), default=0)
    out = {}
    for r in range(nranks):
        tiles, chunks = {}, {}
        kstart = None
        for t, i, rr, sm, k in events:
            if rr != r:
                continue
            t -= t0
            if k in TILE_KINDS:
                tiles.setdefault(i, IdEvents()).add(t, sm, k)
            elif k in CHUNK_KINDS:
                chunks.setdefault(i, IdEvents()).add(t, sm, k)
            elif k == K["kernel_start"]:
                kstart = t if kstart is None else min(kstart, t)
        compute, comm, first = [], [], []
        for ev in tiles.values():
            if K["mma_start"] in ev.first and K["mma_end"] in ev.last:
                b, e = ev.first[K["mma_start"]], ev.last[K["mma_end"]]
                if e >= b:
                    compute.append((b, e, ev.sm[K["mma_start"]]))
            start = next((k for k in (K["partial_leave"], K["partials_seen"], K["reduce_done"]) if k in ev.first), None)
            if start is not None and K["tile_landed"] in ev.last:
                b, e = ev.first[start], ev.last[K["tile_landed"]]
                if e >= b:
                    comm.append((b, e, ev.sm[start]))
            if K["partial_leave"] in ev.first:
                first.append(ev.first[K["partial_leave"]])
        for ev in chunks.values():
            if K["chunk_send"] in ev.first and K["chunk_recv"] in ev.last:
                b, e = ev.first[K["chunk_send"]], ev.last[K["chunk_recv"]]
                if e >= b:
                    comm.append((b, e, ev.sm[K["chunk_send"]]))
            if K["chunk_send"] in ev.first:
                first.append(ev.first[K["chunk_send"]])
        out[r] = {"compute": compute, "comm": comm, "first_byte": min(first) if first else None,
                  "kernel_start": kstart}
    return out


def union(iv):
    merged = []
    for b, e in sorted((b, e) for b, e, _ in iv):
        if merged and b <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([b, e])
    return merged


def intersect(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append([lo, hi])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def fmt_us(ns):
    return "n/a" if ns is None else f"{ns / 1000.0:.1f} us"


def fmt_pct(p):
    return "n/a" if p is None else f"{p:.1f}%"


def bars(iv):
    """[(b, e)] in ns -> broken_barh's [(x, width)] in us (a zero-length interval stays visible)."""
    return [(b / 1000.0, max((e - b) / 1000.0, 1e-3)) for b, e in iv]


def plot(tw, out, title=None, max_sm_rows=160):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_rank = spans(tw)
    metrics = tw.get("metrics") or {}
    overall = metrics.get("overall") or {}
    rank_metrics = {m.get("rank"): m for m in metrics.get("ranks") or []}
    nranks = max(1, int(tw["nranks"]))

    rows_of = {}
    for r in range(nranks):
        d = per_rank.get(r, {"compute": [], "comm": []})
        sms = sorted({sm for _, _, sm in d["compute"] + d["comm"]})
        rows_of[r] = sms if len(sms) <= max_sm_rows else []
    heights = [3 + 0.35 * len(rows_of[r]) for r in range(nranks)]
    fig, axes = plt.subplots(nranks, 1, figsize=(14, min(60, 1.2 + sum(heights) * 0.45)), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for r in range(nranks):
        ax = axes[r][0]
        d = per_rank.get(r, {"compute": [], "comm": [], "first_byte": None})
        uc, um = union(d["compute"]), union(d["comm"])
        lanes = [("compute", uc, COMPUTE_COLOR), ("comm", um, COMM_COLOR), ("hidden", intersect(uc, um), HIDDEN_COLOR)]
        labels, ticks = [], []
        y = 0.0
        for sm in reversed(rows_of[r]):  # SM bands, lowest SM at the top, under the summary lanes
            ax.broken_barh(bars([(b, e) for b, e, s in d["compute"] if s == sm]), (y, 0.45),
                           facecolors=COMPUTE_COLOR, edgecolor="none", alpha=0.85)
            ax.broken_barh(bars([(b, e) for b, e, s in d["comm"] if s == sm]), (y + 0.5, 0.45),
                           facecolors=COMM_COLOR, edgecolor="none", alpha=0.6)
            labels.append(f"SM {sm}")
            ticks.append(y + 0.5)
            y += 1.0
        y += 0.3
        for name, iv, color in reversed(lanes):
            ax.broken_barh(bars(iv), (y, 0.8), facecolors=color, edgecolor="none")
            labels.append(name)
            ticks.append(y + 0.4)
            y += 1.0
        if d.get("first_byte") is not None:
            x = d["first_byte"] / 1000.0
            ax.axvline(x, color="red", linestyle="--", linewidth=1.2)
            ax.annotate("first byte", (x, y - 0.2), color="red", fontsize=8, xytext=(3, 0),
                        textcoords="offset points", va="top")
        ax.set_ylim(-0.2, y + 0.1)
        ax.set_yticks(ticks)
        ax.set_yticklabels(labels, fontsize=7 if rows_of[r] else 9)
        rm = rank_metrics.get(r, {})
        ax.set_title(f"rank {r}: overlap {fmt_pct(rm.get('overlap_pct'))}, TTFB {fmt_us(rm.get('ttfb_ns'))}, "
                     f"link busy {fmt_pct(rm.get('link_busy_pct'))}, exposed comm {fmt_us(rm.get('exposed_comm_ns'))}",
                     fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1][0].set_xlabel("time (us, rank 0's clock, from the first event)")
    head = title or "tilewire trace"
    fig.suptitle(f"{head}: {nranks} rank{'s' if nranks != 1 else ''} - overlap {fmt_pct(overall.get('overlap_pct'))}, "
                 f"TTFB {fmt_us(overall.get('ttfb_ns'))}, exposed comm {fmt_us(overall.get('exposed_comm_ns'))}, "
                 f"clocks +-{fmt_us(tw.get('residual_ns'))}", fontsize=12)
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(color=COMPUTE_COLOR, label="compute (mma)"), Patch(color=COMM_COLOR, label="communication"),
                        Patch(color=HIDDEN_COLOR, label="comm hidden under compute")],
               loc="lower center", fontsize=8, ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.035, 1, 0.95))
    fig.savefig(out, dpi=110, format="png")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Draw a tilewire trace file (tw::trace::save_trace_file) as a PNG timeline.")
    ap.add_argument("trace", help="trace JSON written by tilewire")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    ap.add_argument("--title", default=None, help="title prefix (default 'tilewire trace')")
    ap.add_argument("--max-sm-rows", type=int, default=160,
                    help="draw per-SM bands for a rank that used at most this many SMs (default 160)")
    ap.add_argument("-q", "--quiet", action="store_true", help="do not print the output path")
    a = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.stderr.write("plot_trace: matplotlib is not installed (scripts/setup.sh installs it into build-deps/python)\n")
        return 3
    plot(load(a.trace), a.out, a.title, a.max_sm_rows)
    if not a.quiet:
        print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
