#!/usr/bin/env bash
# one device call at the commit in dist-d/COMMIT: the pulled GEMM writing A_gathered (tests at 4 virtual
# ranks and the real rank, ag-gemm llama P=4 against the copies beside), then the relay knobs at 4
# virtual ranks (padded-slot tests, gemm-rs llama + all-reduce acceptance per variant)
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-d.tar.xz
AGGATHER_P="4 0" AGGATHER_BENCH_P=4 RELAYKNOBS_TEST_P=4 RELAYKNOBS="16 60 0 0;16 60 1 0;0 0 1 0;16 60 0 1" ENGINE_STEPS="aggather relayknobs" DIST=$PWD/dist-d \
  OUT=$OUT/r timeout 500 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/r/run.log | tail -30
grep -E '"label": "(ag )?tests' $OUT/r/bench_engine.jsonl
python3 scripts/accept_table.py $OUT/r/bench_engine.jsonl
