#!/usr/bin/env bash
# the H200 acceptance run of the MoE (DeepSeek-V3 at 8 virtual ranks x 4096 tokens needs more than 80 GB), at dist-t:
# the MoE and grouped tests at the real rank and 2, 4, 8 virtual ranks, memcheck of
# the Moe tests at 4; bench gemm --grouped against cuBLAS (uniform, tile auto); bench moe with the direct
# dispatch, the slot combine and the SwiGLU epilogue at 8 and 4 virtual ranks, Qwen3-MoE and DeepSeek-V3;
# then the Python package, its tests and the examples.
export DISTNAME=dist-t
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head.log
{
MOE_STEPS="tests" MOE_P="2 4 8" timeout 120 bash scripts/gpu_run.sh moe > /dev/null 2>&1; echo "tests rc=$?"
mv $OUT/run.log $OUT/tests_run.log; grep -E "^\[  (PASSED|FAILED) |^===" $OUT/tests_run.log | tail -12
echo "=== memcheck Moe* at 4 virtual ranks ($(date -u +%T))"
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=120000 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 9 $TESTS --gtest_filter='Moe*' > $OUT/memcheck_p4.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_p4.log | tail -3
echo "=== bench gemm --grouped, uniform, tile auto ($(date -u +%T))"
timeout 60 $TW bench gemm --grouped --routing uniform --tiles auto -R 3 --json $OUT/grouped.json | grep -vE "^#  "; echo "rc=$?"
bm 100 8 qwen3 1024,2048,4096,8192 direct,slots,swiglu moe_h.jsonl
bm 100 4 qwen3 1024,2048,4096,8192 direct,slots,swiglu moe_h.jsonl
bm 130 8 dsv3 1024,2048,4096 direct,slots,swiglu moe_h.jsonl
bm 100 4 dsv3 1024,2048,4096,8192 direct,slots,swiglu moe_h.jsonl
} 2>&1 | tee $OUT/bench_h.log
PY_STEPS=checks timeout 170 bash scripts/gpu_run.sh python > /dev/null 2>&1; echo "python rc=$?"
mv $OUT/run.log $OUT/python_run.log; grep -E "passed|failed|ok\)|^===" $OUT/python_run.log | tail -12
echo "=== end ($(date -u +%T))"
