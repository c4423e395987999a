#!/usr/bin/env bash
# The whole GPU test binary at dist-w: the real rank (the single-GPU suites in 4 shards, then the
# rest) and 4 virtual ranks; then memcheck on the GEMM tests at the real rank.
export DISTNAME=dist-w
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head_whole.log
WHOLE_P="4" WHOLE_MEMCHECK=0 WHOLE_EP_P="" timeout 400 bash scripts/gpu_run.sh whole > /dev/null 2>&1; echo "whole rc=$?"
mv $OUT/run.log $OUT/whole_run.log; grep -E "^\[  (PASSED|FAILED) |^===|!!!|FAILED" $OUT/whole_run.log | tail -30
echo "=== memcheck Gemm.* shard 0 of 4 ($(date -u +%T))"
GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=0 timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
  $TESTS --gtest_filter='Gemm.*:GroupedGemm.*' > $OUT/memcheck_gemm.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_gemm.log | tail -3
echo "=== end ($(date -u +%T))"
