#!/usr/bin/env bash
# one device call: the fused ops' acceptance sweeps, every virtual-team shape after --warm-s
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-a.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
ENGINE_STEPS=accept DIST=$PWD/dist-a OUT=$OUT/acc timeout 560 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/acc/run.log | tail -30
python3 scripts/accept_table.py $OUT/acc/bench_engine.jsonl
