#!/usr/bin/env python3
"""Copy one device run's files into bench/results/<name>/ and write its summary .md.

  scripts/collect_results.py <files_at> <name> --kind nvidia-h200-x2 --command "<what ran>"

The summary states the GPU kind, commit and command, and checks the all-reduce bench's targets
on its bf16 file: busbw >= 1.15x NCCL (plain buffers) for 32 MiB..1 GiB, time <= 0.5x NCCL for
8 KiB..256 KiB; then #wrong == 0 and bit-identical ranks in every bench file, and the GPU tests
and compute-sanitizer results where the run has them.
"""
import argparse
import glob
import json
import os
import re
import shutil

ap = argparse.ArgumentParser()
ap.add_argument("files_at")
ap.add_argument("name")
ap.add_argument("--kind", required=True)
ap.add_argument("--command", required=True)
args = ap.parse_args()

root = os.path.join(os.path.dirname(__file__), "..", "bench", "results", args.name)
os.makedirs(root, exist_ok=True)
for f in glob.glob(os.path.join(args.files_at, "*")):
    shutil.copy(f, root)


def load(name):
    p = os.path.join(root, name)
    return json.load(open(p)) if os.path.exists(p) else None


KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
out = [f"# {args.name}", "", f"- GPU kind: `{args.kind}`"]
bf16 = load("bench_allreduce_bf16.json")
meta = bf16 or {}
out += [f"- commit: `{meta.get('commit')}`", f"- NCCL runtime: {meta.get('nccl_version')}, GPUs: "
        f"{meta.get('nranks')} x {meta.get('gpu_name')}", f"- command: `{args.command}`", ""]

ok_all = True
if bf16:
    out += ["## All-reduce bf16, out-of-place, back-to-back (same run: tilewire vs NCCL)", "",
            "| size | algo | tilewire us | busbw GB/s | NCCL us | NCCL busbw | NCCL-symm busbw | target | ratio | ok |",
            "|---:|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in bf16["rows"]:
        b, t, n, s = r["bytes"], r["tilewire"], r["nccl"], r["nccl_symm"]
        target, ratio, ok = "", "", ""
        if n is None:  # a virtual team (--virtual P): no NCCL columns
            n = s = {"time_us": float("nan"), "busbw_gbps": float("nan")}
        elif 32 * MiB <= b <= GiB:
            ratio = t["busbw_gbps"] / n["busbw_gbps"]
            target, ok = "busbw >= 1.15x", ratio >= 1.15
        elif 8 * KiB <= b <= 256 * KiB:
            ratio = t["time_us"] / n["time_us"]
            target, ok = "time <= 0.5x", ratio <= 0.5
        if ok is False:
            ok_all = False
        size = f"{b // GiB} GiB" if b >= GiB else f"{b // MiB} MiB" if b >= MiB else f"{b // KiB} KiB"
        out.append(f"| {size} | {r['algo']} | {t['time_us']:.2f} | {t['busbw_gbps']:.1f} | {n['time_us']:.2f} | "
                   f"{n['busbw_gbps']:.1f} | {s['busbw_gbps']:.1f} | {target} | "
                   f"{ratio if ratio == '' else f'{ratio:.3f}'} | {'' if ok == '' else ('yes' if ok else '**no**')} |")
    out.append("")

out += ["## Correctness across every bench file", "", "| file | rows | #wrong (tilewire) | #wrong (NCCL) | ranks bit-identical |",
        "|---|---:|---:|---:|---|"]


def correctness(rows):
    """(#wrong of tilewire, #wrong of NCCL or 'n/a', ranks bit-identical) of one bench file's rows."""
    if rows and "tilewire" in rows[0]:  # bench allreduce; "nccl" is null on a virtual team
        nc = [r["nccl"]["wrong"] for r in rows if r.get("nccl")]
        return (sum(r["tilewire"]["wrong"] for r in rows), sum(nc) if nc else "n/a",
                all(r["tilewire"]["ranks_identical"] for r in rows))
    checked = [r for r in rows if r.get("wrong") is not None]  # bench gemm / gemm-allreduce
    return sum(r["wrong"] for r in checked), "n/a", all(r.get("identical", True) for r in checked)


for p in sorted(glob.glob(os.path.join(root, "bench_*.json"))):
    d = json.load(open(p))
    tw_wrong, nc_wrong, ident = correctness(d["rows"])
    ok_all &= tw_wrong == 0 and ident
    out.append(f"| {os.path.basename(p)} | {len(d['rows'])} | {tw_wrong} | {nc_wrong} | {'yes' if ident else '**no**'} |")
out.append("")

tests = load("gpu_tests.json")
if tests:
    out += ["## GPU tests", "", f"- {tests.get('tests')} tests, {tests.get('failures')} failures, "
            f"{tests.get('disabled', 0)} disabled"]
    skipped = [f"{s['name']}.{t['name']}" for s in tests.get("testsuites", []) for t in s.get("testsuite", [])
               if t.get("result") == "SKIPPED"]
    failed = [f"{s['name']}.{t['name']}" for s in tests.get("testsuites", []) for t in s.get("testsuite", [])
              if t.get("failures")]
    out.append(f"- skipped: {', '.join(skipped) if skipped else 'none'}")
    out.append(f"- failed: {', '.join(failed) if failed else 'none'}")
    ok_all &= not failed and tests.get("failures", 1) == 0
    out.append("")

san = os.path.join(root, "sanitizer.log")
if os.path.exists(san):
    lines = [l.strip() for l in open(san, errors="replace") if re.search(r"ERROR SUMMARY|RACECHECK SUMMARY|rc=", l)]
    out += ["## compute-sanitizer", "", "```"] + lines + ["```", ""]
    ok_all &= any("memcheck rc=0" in l for l in lines) and any("racecheck rc=0" in l for l in lines)

out += [f"**Acceptance checks above: {'all met' if ok_all else 'NOT all met (see rows marked no)'}**", ""]
open(os.path.join(root, "README.md"), "w").write("\n".join(out))
print("\n".join(out))
