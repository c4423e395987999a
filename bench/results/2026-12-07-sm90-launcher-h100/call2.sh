#!/usr/bin/env bash
# The second call, on the same warm machine right after whole.sh: Qwen3 at 4 virtual ranks x 1024 tokens,
# one traced forward, and ncu per kernel at the real rank (kernels serialized by ncu).
export DISTNAME=dist-w; . probe/common.sh
bm 60 4 qwen3 1024 direct,slots,swiglu moe_inv.jsonl
timeout 50 $TW bench moe --virtual 4 --mode ht --model qwen3 --tokens 1024 -R 1 --iters 3 --fused direct,slots,swiglu --trace $OUT/trace_p4_1024.json
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv $TW bench moe --mode ht --model qwen3 --tokens 1024 -R 1 --iters 1 --fused direct,slots,swiglu > $OUT/ncu_p1.csv
