#!/usr/bin/env bash
# one device call at the commit in dist-f/COMMIT: the pulled GEMM writing A_gathered (all-gather tests
# at 4 virtual ranks, the real rank, 2, 3 and 8; ag-gemm llama P=4 and P=2 against the copies beside),
# then gemm-rs llama + the all-reduce acceptance P=4 with the relay's pacing off and no padded slots
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-f.tar.xz
AGGATHER_P="4 0 2 3 8" AGGATHER_BENCH_P="4 2" RELAYKNOBS_TEST_P=3 RELAYKNOBS="0 0 0 0" ENGINE_STEPS="aggather relayknobs" \
  DIST=$PWD/dist-f OUT=$OUT/r timeout 320 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/r/run.log | tail -30
grep -E '"label": "(ag )?tests' $OUT/r/bench_engine.jsonl
python3 scripts/accept_table.py $OUT/r/bench_engine.jsonl
