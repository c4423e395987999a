#!/usr/bin/env bash
# one short device call at the commit in dist-X/COMMIT: the pulled GEMM writing A_gathered (all-gather tests
# at 4 virtual ranks and the real rank; ag-gemm llama P=4 against the copies beside), then gemm-rs llama P=4
# with the relay's pacing off and no padded slots
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-X.tar.xz
AGGATHER_P="4 0" AGGATHER_BENCH_P=4 RELAYKNOBS_TEST_P=3 RELAYKNOBS="0 0 0 0" ENGINE_STEPS="aggather relayknobs" \
  DIST=$PWD/dist-X OUT=$OUT/r timeout 265 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/r/run.log | tail -30
grep -E '"label": "(ag )?tests' $OUT/r/bench_engine.jsonl
python3 scripts/accept_table.py $OUT/r/bench_engine.jsonl
