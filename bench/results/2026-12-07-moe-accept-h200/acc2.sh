#!/usr/bin/env bash
# MoE acceptance, part 2 of 2, on the same warm machine right after acc1.sh: bench moe DeepSeek-V3 at 8
# virtual ranks (8 x 4096 needs more than 80 GB) and 4; Qwen3 4 x 1024 with the library before the
# placement and slot-reduce change (lib-before: the same build with the two kernel units of the parent
# commit) and after, alternately; ncu per kernel at the real rank; then the Python package, its tests
# and the examples.
export DISTNAME=${DISTNAME:?}
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head2.log
{
bm 130 8 dsv3 1024,2048,4096 direct,slots,swiglu moe_h.jsonl
bm 100 4 dsv3 1024,2048,4096,8192 direct,slots,swiglu moe_h.jsonl
LIBPATH=$LD_LIBRARY_PATH
for i in 1 2; do
  LD_LIBRARY_PATH=$DIST/lib-before:$LIBPATH bm 40 4 qwen3 1024 direct,slots,swiglu ab_before.jsonl
  LD_LIBRARY_PATH=$LIBPATH bm 40 4 qwen3 1024 direct,slots,swiglu ab_after.jsonl
done
echo "=== ncu, the real rank, qwen3 1024 ($(date -u +%T))"
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv $TW bench moe --mode ht --model qwen3 \
  --tokens 1024 -R 1 --iters 1 --fused direct,slots,swiglu > $OUT/ncu_p1.csv 2>&1; echo "ncu rc=$?"
} 2>&1 | tee $OUT/acc2.log
PY_STEPS=checks timeout 200 bash scripts/gpu_run.sh python > /dev/null 2>&1; echo "python rc=$?" | tee -a $OUT/acc2.log
mv $OUT/run.log $OUT/python_run.log; grep -E "passed|failed|ok\)|^===" $OUT/python_run.log | tail -12 | tee -a $OUT/acc2.log
echo "=== end ($(date -u +%T))" | tee -a $OUT/acc2.log
