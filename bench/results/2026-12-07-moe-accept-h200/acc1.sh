#!/usr/bin/env bash
# MoE acceptance, part 1 of 2 (the device tool's 600 s per call): the MoE, placement and grouped tests at
# the real rank and 2, 4, 8 virtual ranks; memcheck of the Moe tests at 4; bench gemm --grouped against
# cuBLAS; bench moe (direct, slots, swiglu) Qwen3-MoE at 8 and 4 virtual ranks.
export DISTNAME=${DISTNAME:?}
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head1.log
{
MOE_STEPS="tests" MOE_P="2 4 8" timeout 150 bash scripts/gpu_run.sh moe > /dev/null 2>&1; echo "tests rc=$?"
mv $OUT/run.log $OUT/tests_run.log; grep -E "^\[  (PASSED|FAILED) |^===|FAILED" $OUT/tests_run.log | tail -16
echo "=== memcheck Moe* at 4 virtual ranks ($(date -u +%T))"
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=120000 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 9 $TESTS --gtest_filter='Moe*' > $OUT/memcheck_p4.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_p4.log | tail -3
echo "=== bench gemm --grouped, uniform, tile auto ($(date -u +%T))"
timeout 60 $TW bench gemm --grouped --routing uniform --tiles auto -R 3 --json $OUT/grouped.json | grep -vE "^#  "; echo "rc=$?"
bm 100 8 qwen3 1024,2048,4096,8192 direct,slots,swiglu moe_h.jsonl
bm 100 4 qwen3 1024,2048,4096,8192 direct,slots,swiglu moe_h.jsonl
echo "=== end ($(date -u +%T))"
} 2>&1 | tee $OUT/acc1.log
