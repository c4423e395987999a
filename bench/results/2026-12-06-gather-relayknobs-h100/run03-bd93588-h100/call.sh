#!/usr/bin/env bash
# one device call at the commit in dist-g/COMMIT: the pulled GEMM writing A_gathered with 23 loads in
# flight (all-gather tests at 4, 2, 3, 8 virtual ranks and the real rank; ag-gemm llama P=4 and P=2 against the
# copies beside)
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-g.tar.xz
AGGATHER_P="4 0 2 3 8" AGGATHER_BENCH_P="4 2" ENGINE_STEPS="aggather" \
  DIST=$PWD/dist-g OUT=$OUT/r timeout 260 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/r/run.log | tail -30
grep -E '"label": "(ag )?tests' $OUT/r/bench_engine.jsonl
python3 scripts/accept_table.py $OUT/r/bench_engine.jsonl
python3 scripts/accept_table.py $OUT/r/bench_engine.jsonl --shapes | grep -v "^|" | sort -k6 | grep "P=4"
