#!/usr/bin/env bash
# call S2 (dist-s, the same machine as S1): the Python package, its tests and the examples (PY_STEPS=checks);
# then bench moe with the slot combine again at 4 and 8 virtual ranks, Qwen3-MoE (a second run of S1's rows).
export DISTNAME=dist-s
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head.log
PY_STEPS=checks timeout 200 bash scripts/gpu_run.sh python > /dev/null 2>&1; echo "python rc=$?"
mv $OUT/run.log $OUT/python_run.log; grep -E "passed|failed|ok\)|^===" $OUT/python_run.log | tail -14
{
for p in 4 8; do bm 100 $p qwen3 1024,2048,4096,8192 direct,slots,swiglu moe_s2.jsonl; done
} 2>&1 | tee $OUT/bench_s2.log
echo "=== end ($(date -u +%T))"
