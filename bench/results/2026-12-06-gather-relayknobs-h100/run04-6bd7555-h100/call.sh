#!/usr/bin/env bash
# one device call at the commit in dist-h/COMMIT (the GEMM's copy of A_gathered retired, every kernel
# rebuilt): the fused tests at 4, 2, 3, 8 virtual ranks and the real rank
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-h.tar.xz
VIRTUAL_P="4 2 3 8 0" ENGINE_STEPS="tests" DIST=$PWD/dist-h OUT=$OUT/r timeout 270 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/r/run.log | tail -30
grep -E '"label": "tests' $OUT/r/bench_engine.jsonl
grep -E "FAILED|PASSED|SKIPPED" $OUT/r/run.log | sort | uniq -c | head -20
