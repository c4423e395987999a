#!/usr/bin/env bash
# call A: the MoE and grouped tests at the real rank and 2, 4, 8 virtual ranks (the direct dispatch's
# variants among them), the EP tests at the real rank and 4 virtual ranks (the dispatch kernel changed),
# then one bench row pair: Qwen3 at 8 virtual ranks, 4096 tokens, without and with the direct dispatch.
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head.log
MOE_STEPS="tests" MOE_P="2 4 8" timeout 280 bash scripts/gpu_run.sh moe > /dev/null 2>&1
mv $OUT/run.log $OUT/tests_run.log; grep -E "^\[  (PASSED|FAILED|  SKIPPED) |^===|rc=" $OUT/tests_run.log | tail -40
echo "=== EP tests, real rank ($(date -u +%T))"
timeout 90 $TESTS --gtest_filter='Ep.*:EpEpoch.*:EpHardening.*' --gtest_output=json:$OUT/gpu_tests_ep_p1.json > $OUT/ep_tests.log 2>&1; echo "rc=$?"
echo "=== EP tests, 4 virtual ranks ($(date -u +%T))"
TILEWIRE_TEST_VIRTUAL=4 timeout 90 $TESTS --gtest_filter='Ep.*:EpEpoch.*' --gtest_output=json:$OUT/gpu_tests_ep_p4.json >> $OUT/ep_tests.log 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/ep_tests.log | head -20
for f in combine,swiglu direct,combine,swiglu; do bm 90 8 qwen3 4096 $f moe_a.jsonl; done 2>&1 | tee $OUT/bench_a.log
echo "=== end ($(date -u +%T))"
