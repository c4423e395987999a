#!/usr/bin/env bash
# call C: memcheck of the MoE tests at 4 virtual ranks; the Python package, tests/python and the examples
# (torch.compile) under torchrun; DeepSeek-V3 at 4 virtual ranks with the direct dispatch.
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head.log
echo "=== memcheck Moe* at 4 virtual ranks ($(date -u +%T))"
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=120000 timeout 240 compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 9 $TESTS --gtest_filter='Moe*' > $OUT/memcheck_p4.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_p4.log | tail -5
PY_STEPS=checks timeout 230 bash scripts/gpu_run.sh python > /dev/null 2>&1; echo "python rc=$?"
mv $OUT/run.log $OUT/python_run.log; grep -E "passed|failed|error|^===|rc=" $OUT/python_run.log | tail -20
bm 100 4 dsv3 1024,2048,4096 direct,combine,swiglu moe_c.jsonl 2>&1 | tee $OUT/bench_c.log
echo "=== end ($(date -u +%T))"
