#!/usr/bin/env bash
# call S1 (dist-s): the slot combine. The MoE and grouped tests at the real rank and 2, 4, 8 virtual ranks,
# memcheck of the Moe tests at 4; bench moe at 8 and 4 virtual ranks, Qwen3-MoE 1024-8192 tokens, the fused
# forward with the slot combine (direct,slots,swiglu) and with the fused combine (direct,combine,swiglu), each
# run printing its own GEMMs-alone and unfused rows; DeepSeek-V3 at 4 virtual ranks the same.
export DISTNAME=dist-s
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head.log
{
MOE_STEPS="tests" MOE_P="2 4 8" timeout 170 bash scripts/gpu_run.sh moe > /dev/null 2>&1; echo "tests rc=$?"
mv $OUT/run.log $OUT/tests_run.log; grep -E "^\[  (PASSED|FAILED) |^===|Failure|rank [0-9]+: " $OUT/tests_run.log | head -40
echo "=== memcheck Moe* at 4 virtual ranks ($(date -u +%T))"
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=120000 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 9 $TESTS --gtest_filter='Moe*' > $OUT/memcheck_p4.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_p4.log | tail -3
for p in 8 4; do for f in direct,slots,swiglu direct,combine,swiglu; do bm 100 $p qwen3 1024,2048,4096,8192 $f moe_s1.jsonl; done; done
for f in direct,slots,swiglu direct,combine,swiglu; do bm 90 4 dsv3 1024,2048,4096 $f moe_s1.jsonl; done
} 2>&1 | tee $OUT/bench_s1.log
echo "=== end ($(date -u +%T))"
