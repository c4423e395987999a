#!/usr/bin/env bash
# call B: bench moe at 8 and 4 virtual ranks, Qwen3-MoE 1024-8192 tokens, the fused forward without and
# with the direct dispatch (combine,swiglu / direct,combine,swiglu), each run printing its own GEMMs-alone
# and unfused rows.
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"; } | tee $OUT/head.log
for p in 8 4; do for f in direct,combine,swiglu combine,swiglu; do bm 140 $p qwen3 1024,2048,4096,8192 $f moe_b.jsonl; done; done 2>&1 | tee $OUT/bench_b.log
echo "=== end ($(date -u +%T))"
