#!/usr/bin/env bash
# The one script that runs tilewire's GPU work in a single device call: topology and `tilewire
# info`, the GPU test binary, the benches, and compute-sanitizer (memcheck + racecheck) on the
# tests. Everything lands in $OUT (at most 8 files: the device tool brings back no more).
#
# Build here first (scripts/pack_dist.sh puts the binaries and libtilewire into dist/), then on
# the GPU machine, from the repo root:   OUT=/some/dir scripts/gpu_run.sh MODE   (default: full)
#   full          info, GPU tests, all all-reduce benches (bf16 sweep, fp16, fp32, in-place, CUDA graph)
#   quick         info, GPU tests, the bf16 all-reduce bench
#   sanitize      compute-sanitizer memcheck + racecheck on the GPU tests (its own call: with the
#                 tests and benches it does not fit the device tool's 10-minute command limit)
#   gemm          (nvidia-h200) GEMM tests, memcheck on them, `tilewire bench gemm` acceptance + grid,
#                 decode, narrow and ragged shapes in bf16 and fp16, acceptance in fp16
#   gemmplans     (nvidia-h200) the ping-pong tiles' GPU test, then `bench gemm --plans`: the decode,
#                 narrow, ragged and acceptance sweeps under every candidate plan (tiles, splits,
#                 decompositions, the ping-pong tiles, the hook kernel) in one process per sweep, the
#                 best per shape (bench_gemm_plans_{decode,narrow,ragged,acceptance}_DTYPE.json;
#                 GEMMPLANS_DTYPES, default "bf16 fp16"; GEMMPLANS_SWEEPS, GEMMPLANS_DECODE and
#                 GEMMPLANS_RAGGED narrow it down): what the plan rule (src/ops/gemm/plan.hpp) is read
#                 off (scripts/plan_table.py)
#   gemmpick      (nvidia-h200) close plans on a few shapes: `bench gemm --plans` with each plan of
#                 GEMMPICK_PLANS listed twice in alternation (A;B;A;B), on each MxNxK of GEMMPICK_SHAPES,
#                 bf16 and fp16, one JSON per line in bench_gemm_pick.jsonl
#   fused         (nvidia-h200-x2) fused GEMM + all-reduce: tests, acceptance (4 processes) + trace,
#                 grid, the other GPU tests, the all-reduce bench, compute-sanitizer
#   acceptance    (nvidia-h200-x2) the fused op's acceptance shapes in PROCS (default 6) processes
#   trace         (nvidia-h200-x2) the traced headline shape: fused + sequential trace JSON, tracing cost
#   scale         (nvidia-h200-x4 / -x8) info, all-reduce bench, fused scale sweep, GPU tests, memcheck
#   nvlink        (nvidia-h100-x2 .. -x8, H200 kinds alike) the fused ops' acceptance sweeps on real
#                 NVLink at each rank count of NVLINK_P the machine holds (default "2 4 8", the
#                 first P GPUs): gemm-allreduce acceptance, grid and decode, gemm-rs and ag-gemm
#                 Llama and decode, forced fused beside the sequential path (bench_nvlink.jsonl);
#                 then accept_table.md and model_check.md (scripts/model_check.py: the cost model's
#                 predictions and kAuto's picks against what the run measured)
#   virtual       (nvidia-h200) the GPU tests at P = 1, 2, 3, 4, 8 virtual ranks on one GPU
#   whole         (nvidia-h200) the whole GPU test binary at the real rank (the single-GPU suites in 4
#                 shards) and at WHOLE_P virtual ranks (default "2 4 8"), one gtest JSON and log per
#                 process in gpu_tests_whole.tgz; then the EP tests at WHOLE_EP_P (default 3) and at
#                 the real GPU with TILEWIRE_EP_LL_EARLY=1, and memcheck on every EP test but the death
#                 test at 4 and at the real rank (gpu_run_ep.sh ep_memcheck; WHOLE_MEMCHECK=0: not)
#   virtualcheck  (nvidia-h200) memcheck on the multi-rank tests at 4 virtual ranks (MEMCHECK_P, MEMCHECK_FILTER); benches at 8 (VIRTUALCHECK_BENCH=0: none)
#   decode        (nvidia-h200) the fused ops on the decode tile (M <= 256); DECODE_STEPS picks among
#                 probe (coresidency_probe, plain and under memcheck), tests (the fused ops' tests at 2
#                 and 4 virtual ranks, VIRTUAL_P, and at the real rank with the GEMM tests,
#                 DECODE_P1_TESTS, default Gemm.*), memcheck
#                 (the decode tests at 4 virtual ranks), bench (one real rank: `bench gemm-allreduce
#                 --sweep decode` fused, kAuto's owner kernel on the decode tile and the exchange kernel
#                 on 128 x 256 tiles; `bench gemm-rs` / `ag-gemm` at M = 1..256); default all
#   ep            (nvidia-h200) the EP tests at real P = 1 and 2, 3, 4, 8 virtual ranks (one JSON each),
#                 memcheck on them at 4, `bench ep` in both modes and payloads at 1 real and 8 virtual
#                 ranks (EP_BENCH_RANKS, empty: none; bench_ep.jsonl: one JSON line per run), a traced
#                 low-latency run; EP_BEFORE_TARS: tar.xz files of dists before an EP fix, whose
#                 EP_BEFORE_FILTER tests (default EpHardening.*) must fail there (at P = 0, 2, 4)
#   tp            (nvidia-h200) GEMM + reduce-scatter and all-gather + GEMM: their tests at real P = 1
#                 and 2, 3, 4, 8 virtual ranks (one JSON each), memcheck on them at 4, `bench gemm-rs`
#                 and `bench ag-gemm` on the Llama sweep at 4 virtual ranks and on 4096 rows at 1 real, and
#                 one traced fused call of each at 4 virtual ranks (traces_tp.tgz)
#   python        the Python package built there against dist/ (pip --no-build-isolation: the box has
#                 nanobind, scikit-build-core and torch), then tests/python and examples/python under
#                 torchrun on every GPU, then gemm_allreduce at 8192 x 8192 x 4096 on one rank from the
#                 CLI (all rows, then its fused row alone: --only-fused) and from Python in
#                 alternation (python_vs_cli.jsonl: each Python line also times
#                 the extension's raw call, a side stream and the same calls from a C++ loop in the
#                 extension, the Python-vs-C++ figure; clocks.csv: SM clock and power every
#                 100 ms meanwhile), then tilewire.MoE against a torch reference MoE layer (py_moe.json);
#                 PY_NCU=1: also ncu on the GEMM kernels of the CLI and of the Python process (ncu_*.csv);
#                 PY_STEPS=checks: only the package, the tests and the examples
#   engine        (nvidia-h200) the fused ops against the GEMM alone on a virtual team; ENGINE_STEPS picks
#                 among owner (bench gemm-allreduce --algo owner at 2, 3, 4 virtual ranks on 8192 x 8192 x
#                 4096, and at 4 with the measurement knobs TILEWIRE_OWNER_PLAIN / _FINAL_POLL_ALL in
#                 turn; traced calls), relay (the relay at 3 and 4 virtual ranks on that shape;
#                 gemm-rs on the 70B shapes with the relay and the owner kernel, TILEWIRE_RS_OWNER),
#                 relay4 (the relay at 4, untraced and traced), gemmbudget (bench gemm --virtual 2, 4
#                 --plans: the plain GEMM on a virtual rank's SMs under each candidate plan,
#                 ENGINE_PLANS), ag (bench ag-gemm 8192 x 4096 x 7168 at 2 virtual ranks, twice,
#                 traced; 128 x 14336 x 8192 at 2, traced; the 70B FFN up shapes at 2 and 4, with TILEWIRE_AG_PUSH_CTAS 4 and 8 too), tests (the fused
#                 ops' tests at 1 real and VIRTUAL_P virtual ranks; FUSED_FILTER narrows them), agaccept (accept's all-gather rows), agswizzle (ag-gemm Llama sweeps at 2 and 4 with
#                 TILEWIRE_AG_SWIZZLE 1, 4, 8), agpush (accept's all-gather rows on the push design,
#                 TILEWIRE_AG_PUSH=1), gemmaccept (bench gemm acceptance bf16/fp16 and decode at the
#                 real rank), othertests (the GEMM tests at the real rank, every non-fused test at
#                 OTHER_P), split (bench_tp's rows (h)-(k): the lockstep basis, ag-gemm without
#                 A_gathered, the pull gather alone and before the GEMM; ag-gemm and gemm-rs Llama and
#                 decode at 2 and 4 virtual ranks, ag-gemm 4096^3 at the real rank), agsplit (the hook kernel alone at swizzle 1 and 4 on a
#                 virtual rank's SMs beside ag-gemm at 8192 x 8192/P x 7168, P = 2, 4), decodepick (the decode tiles' tests, then bench gemm
#                 --plans at M = 40..240 between the decode sweep's points: DECODEPICK_M, DECODEPICK_PLANS),
#                 decodem (bench gemm --sweep
#                 decode-m: every M from 1 to 256 at one real rank), memcheck (them at 4), accept
#                 (gemm-allreduce acceptance, grid and decode sweeps, gemm-rs and ag-gemm Llama and
#                 decode shapes, at 2 and 4 virtual ranks; the fused paths at one real rank; every
#                 shape after --warm-s, ACCEPT_WARM_S), relayknobs (gemm-rs Llama and the all-reduce
#                 acceptance at 4 virtual ranks with TILEWIRE_RELAY_CONSUMER_ROWS 16/0,
#                 TILEWIRE_RELAY_PACE_PCT 60/0 and TILEWIRE_RELAY_PADDED_SLOTS 0/1, RELAYKNOBS_ROUNDS (1), after
#                 the fused tests on the padded slots at 4 and 3); default all but relayknobs. One JSON line per bench run in bench_engine.jsonl, traces in traces_engine.tgz
#   gin           (nvidia-h200) virtual nodes and the emulated GIN, at nodes x ranks per node
#                 GIN_SHAPES (default 2x2 2x4 4x2 8x1): Gin.* (its chaos test loops GIN_SEEDS seeds,
#                 default 20, one gtest JSON per shape), then DeviceApi.*, Ep.* and EpGin.*
#                 (GIN_EP_FILTER) repeated GIN_EP_SEEDS times (default GIN_SEEDS; the EP test's two limit
#                 cases in the first GIN_EP_LIMITS_SEEDS repeats only, default 1; the other repeats' seeds
#                 from GIN_EP_SEED0 + 1000 on), each repeat's teams
#                 under their own chaos seed from GIN_EP_SEED0 on (TILEWIRE_TEST_GIN_CHAOS) unless GIN_EP=0; the GIN tests in one node of 4
#                 (GIN_ONE_NODE=0: skipped); memcheck at 2 x 2 (GIN_MEMCHECK_FILTER,
#                 GIN_MEMCHECK_SEEDS default 2; GIN_MEMCHECK=0: skipped). GIN_BEFORE_TAR: a tar.xz of a
#                 dist before the EP kernels' GIN flush, whose EpGin.* must fail. GIN_PARALLEL=1: the
#                 shapes in one process each at once (gin_shapes.tgz), then the memcheck; size
#                 GIN_LIMIT + 2 x GIN_EP_LIMIT to the call; GIN_SPLIT=N: N processes per shape, each
#                 a share of the EP repeats under seeds of its own (the first runs Gin.* and the
#                 limit cases)
#   ll            (nvidia-h200) the low-latency EP: the EP tests at real P = 1 and 2, 3, 4, 8 virtual
#                 ranks (one JSON each), memcheck on them at 4, the EP and device-API tests at virtual
#                 nodes LL_GIN_SHAPES (default none: the gin mode runs them; e.g. "2x2 8x1") under
#                 LL_GIN_SEEDS chaos seeds (default 2),
#                 `bench ep --mode ll` (bench_ll.jsonl, one JSON line per run, labelled) at 1 real rank
#                 (128 tokens bf16 and fp8, 256 tokens, skewed routing; the bf16 rows with
#                 --combine-probes) and 8 virtual (bf16, fp8), with this dist and the one in
#                 LL_BEFORE_TAR (tar.xz files of dists before a change, oldest first) in turn, LL_ROUNDS times
#                 (default 1); then this dist's 128- and 256-token rows with the warp send
#                 (TILEWIRE_EP_LL_TMA=0) and the copy-engine send in alternation, and its 128-token
#                 bf16 and fp8 and 256-token rows with each step's second kernel launched at the first
#                 one's end (TILEWIRE_EP_LL_EARLY=0) and early, in alternation; one traced call
#                 (trace_ll.json); before the benches, bench/ep_ll_ceiling at the
#                 spread of 1 and 8 ranks' receive blocks (ep_ll_ceiling.jsonl); last, one traced
#                 high-throughput call (4096 tokens) at 1 real and 8 virtual ranks, timelines in run.log
#   house         (nvidia-h200) a change that must not move performance: `bench allreduce` (real rank)
#                 and `bench gemm --sweep acceptance` for this dist and BEFORE_TAR's, alternated
#                 twice in one call (bench_house.jsonl), then the whole GPU test binary at the real rank
#                 and at HOUSE_P virtual ranks (default "2 4 8"; whole_binary below; gpu_tests_house.tgz).
#                 All of it takes about 11 minutes, over one device call's 10: run HOUSE_P="2 4" and then
#                 the 8 virtual ranks' step alone (bench/results/2026-12-05-merge-h200 README)
#   moe           (nvidia-h200) the grouped GEMM and the MoE FFN: their tests at the real rank and at
#                 MOE_P virtual ranks (default "2 3 4 8"; gpu_tests_moe.json, one gtest JSON per P
#                 merged by name), memcheck on them (real rank, and 4 virtual), `bench gemm --grouped`
#                 uniform and skewed, every tile, and `bench moe` at the real rank (uniform, skewed) and
#                 at 8 virtual ranks (bench_moe.jsonl: one JSON line per bench run, labelled);
#                 MOE_STEPS picks among tests memcheck grouped bench (default all)
#   hardening     (nvidia-h200) the hardening checks: the workspace-reuse and two-stream tests on the
#                 code before their fixes (DIST_BEFORE, DIST_BEFORE_STREAMS, built by
#                 scripts/pack_dist.sh in worktrees of those commits; they must fail there, which
#                 is not counted as a failure), the new tests at P = 1, 2, 3, 4, 8 virtual ranks,
#                 memcheck on them at P = 4, the small all-reduce without and with call ordering
# Results are committed under bench/results/ with scripts/collect_results.py.
set -uo pipefail
MODE=${1:-full}
case $MODE in
  full | quick | sanitize | gemm | gemmplans | gemmpick | fused | acceptance | trace | scale | virtual | whole | virtualcheck | decode | hardening | house | moe | ep | ll | python | tp | engine | gin | nvlink) ;;
  *) echo "gpu_run.sh: unknown mode '$MODE' (the modes are listed at the top of $0)" >&2; exit 2 ;;
esac
OUT=${OUT:-$PWD/gpu-out}
DIST=${DIST:-$PWD/dist}
mkdir -p "$OUT"
LOG=$OUT/run.log
: >"$LOG"

# Policy: never NVLink multicast. NCCL runtime must be 2.28.9 (the system one there is 2.28.3).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# A hardware queue per stream: virtual teams need it (Comm::run_virtual refuses otherwise).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
# Kernels loaded up front: a lazy first load waits for the device, where a virtual peer may spin.
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib${VENV_NCCL:+:$VENV_NCCL}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64  # cuBLASLt for bench gemm
export TILEWIRE_COMMIT=$(cat "$DIST/COMMIT" 2>/dev/null || echo unknown)
TW=$DIST/bin/tilewire
TESTS=$DIST/bin/tilewire_gpu_tests
FAIL=0

step() { echo "=== $* ($(date -u +%T))" | tee -a "$LOG"; }
header() {  # the fused-op modes: bounded waits of 3 s unless set, the GPUs and the commit in the log
  export TILEWIRE_TIMEOUT_MS=${TILEWIRE_TIMEOUT_MS:-3000}
  { nvidia-smi --query-gpu=index,name,clocks.sm,power.limit,memory.total --format=csv; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
}
run() {  # run <limit_s> cmd...: log output, remember failures
  local lim=$1; shift
  timeout "$lim" "$@" >>"$LOG" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && { echo "!!! rc=$rc: $*" | tee -a "$LOG"; FAIL=1; }
  return $rc
}
bench_json() {  # bench_json <jsonl> <limit_s> <label> args...: tilewire bench, its JSON one labelled line of <jsonl>
  local j=$1 lim=$2 label=$3; shift 3
  step "$label: tilewire bench $*"
  # the JSON line even where the bench failed (a wrong result: its #wrong says so)
  run "$lim" "$TW" bench "$@" --json "$OUT/one.json"
  [ -s "$OUT/one.json" ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' \
    "$OUT/one.json" "$label" >>"$j"
  rm -f "$OUT/one.json"
}

if [ "$MODE" = virtual ]; then
  # The virtual team (nvidia-h200): the whole GPU test binary once per P virtual ranks on GPU 0
  # (TILEWIRE_TEST_VIRTUAL=P), one gtest JSON per P. VIRTUAL_P picks the rank counts, VIRTUAL_FILTER
  # the tests (default all), VIRTUAL_LIMIT the seconds per P.
  header
  for p in ${VIRTUAL_P:-1 2 3 4 8}; do
    step "GPU tests, $p virtual ranks"
    TILEWIRE_TEST_VIRTUAL=$p run "${VIRTUAL_LIMIT:-300}" "$TESTS" --gtest_filter="${VIRTUAL_FILTER:-*}" \
      --gtest_output=json:"$OUT/gpu_tests_virtual_p$p.json"
  done
fi

if [ "$MODE" = gin ] || [ "$MODE" = ep ] || [ "$MODE" = ll ] || [ "$MODE" = whole ]; then
  # The EP and GIN modes live in their own file (this one stays readable); same shell, same helpers.
  . "$(dirname "${BASH_SOURCE[0]}")/gpu_run_ep.sh"
fi

if [ "$MODE" = hardening ]; then
  header
  NEW_TESTS='GemmAllReduceReuse.*:MultiStream.*:CallCheck.*:DeviceDebugDeathTest.*:VirtualTeam.*:TimeoutDeathTest.DestroyAfterTimeoutDoesNotHang:TimeoutDeathTest.FailedRankEndsPeersWaits'
  # A regression test on the code before its fix (a dist built by scripts/pack_dist.sh in a
  # worktree of that commit): it must fail there, which is not counted as a failure.
  before() {  # before <dist> <gtest filter>
    [ -x "$1/bin/tilewire_gpu_tests" ] || { step "no $1: the before-the-fix run of $2 is skipped"; return; }
    for p in 2 4; do
      step "$2 on the code before the fix ($(cat "$1/COMMIT" 2>/dev/null)), $p virtual ranks: expected to FAIL"
      LD_LIBRARY_PATH=$1/lib:$LD_LIBRARY_PATH TILEWIRE_TEST_VIRTUAL=$p timeout 120 \
        "$1/bin/tilewire_gpu_tests" --gtest_filter="$2" >>"$LOG" 2>&1
      echo "=== before the fix, P = $p: rc=$? (non-zero expected)" | tee -a "$LOG"
    done
  }
  before "${DIST_BEFORE:-/nonexistent}" 'GemmAllReduceReuse.*'
  before "${DIST_BEFORE_STREAMS:-/nonexistent}" 'MultiStream.*'
  for p in ${VIRTUAL_P:-1 2 3 4 8}; do
    step "the new tests, $p virtual ranks"
    TILEWIRE_TEST_VIRTUAL=$p run 240 "$TESTS" --gtest_filter="$NEW_TESTS" --gtest_output=json:"$OUT/gpu_tests_hardening_p$p.json"
  done
  step "memcheck on the new tests, 4 virtual ranks"
  TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 run 300 compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 9 "$TESTS" --gtest_filter="GemmAllReduceReuse.*:MultiStream.*:CallCheck.*:VirtualTeam.*"
  if [ -x "${DIST_BEFORE_STREAMS:-/nonexistent}/bin/tilewire" ]; then
    # What ordering calls across streams costs per call (an event record, two stream queries):
    # the small all-reduce on this GPU's one rank (PDL on), without and with it, alternating.
    for i in 1 2; do
      for d in "$DIST_BEFORE_STREAMS" "$DIST"; do
        step "bench allreduce 8K..256K, 1 rank, $(cat "$d/COMMIT")"
        LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH run 60 "$d/bin/tilewire" bench allreduce -b 8K -e 256K -f 4
      done
    done
  fi
fi


# whole_binary "P..." TGZ: the whole GPU test binary at each P (0: the real rank). The single-GPU
# suites, which make no team (TILEWIRE_TEST_VIRTUAL does not reach them) and spend most of the
# binary's time in host references, run at the real rank only, in 4 parallel processes (GTest
# shards); every other test runs in one process per P. One gtest JSON and log per process, in TGZ
# under $OUT (the device tool brings back 8 files at most).
whole_binary() {
  local single='Gemm.*:GemmScratch.*:GroupedGemm.*' d p
  d=$(mktemp -d)
  for p in $1; do
    if [ "$p" = 0 ]; then
      step "GPU tests, the real rank: the single-GPU suites in 4 shards"
      local pids=() i
      for i in 0 1 2 3; do
        GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 240 "$TESTS" --gtest_filter="$single" \
          --gtest_output=json:"$d/p1_single_shard$i.json" >"$d/p1_single_shard$i.log" 2>&1 &
        pids+=($!)
      done
      for i in 0 1 2 3; do
        wait "${pids[$i]}" || { echo "!!! shard $i of the single-GPU suites failed" | tee -a "$LOG"; FAIL=1; }
      done
      step "GPU tests, the real rank: every other test"
      timeout 320 "$TESTS" --gtest_filter="-$single" --gtest_output=json:"$d/p1_rest.json" >"$d/p1_rest.log" 2>&1 ||
        { echo "!!! GPU tests at the real rank failed" | tee -a "$LOG"; FAIL=1; }
    else
      step "GPU tests, $p virtual ranks: all but the single-GPU suites"
      TILEWIRE_TEST_VIRTUAL=$p timeout 200 "$TESTS" --gtest_filter="-$single" --gtest_output=json:"$d/v$p.json" \
        >"$d/v$p.log" 2>&1 || { echo "!!! GPU tests at $p virtual ranks failed" | tee -a "$LOG"; FAIL=1; }
    fi
    tar czf "$OUT/$2" -C "$d" . || { echo "!!! could not write $OUT/$2" | tee -a "$LOG"; FAIL=1; }
  done
  grep -h '^\[  FAILED  \]' "$d"/*.log 2>/dev/null | sort -u | tee -a "$LOG"  # the failed tests by name
  rm -rf "$d"
}

if [ "$MODE" = whole ]; then
  header
  whole_binary "0 ${WHOLE_P-2 4 8}" gpu_tests_whole.tgz
  for p in ${WHOLE_EP_P-3}; do
    step "EP tests, $p virtual ranks"
    TILEWIRE_TEST_VIRTUAL=$p run 200 "$TESTS" --gtest_filter='Ep*' --gtest_output=json:"$OUT/gpu_tests_ep_p$p.json"
  done
  step "EP tests, the real GPU, TILEWIRE_EP_LL_EARLY=1"
  TILEWIRE_EP_LL_EARLY=1 run 200 "$TESTS" --gtest_filter='Ep*' --gtest_output=json:"$OUT/gpu_tests_ep_p0_early.json"
  [ "${WHOLE_MEMCHECK:-1}" = 1 ] && ep_memcheck
fi

if [ "$MODE" = tp ]; then
  header
  TP_TESTS='GemmReduceScatter.*:AllGatherGemm.*:GemmScatterGather.*'
  for p in ${VIRTUAL_P:-0 2 3 4 8}; do
    step "GEMM + RS / AG + GEMM tests, ${p} virtual ranks (0: the real GPU)"
    TILEWIRE_TEST_VIRTUAL=$p run 200 "$TESTS" --gtest_filter="$TP_TESTS" --gtest_output=json:"$OUT/gpu_tests_tp_p$p.json"
  done
  step "memcheck on them, 4 virtual ranks"
  TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 run 300 compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 9 "$TESTS" --gtest_filter="$TP_TESTS"
  : >"$OUT/bench_tp.jsonl"  # one JSON line per bench run (the device tool returns at most 8 files)
  for op in gemm-rs ag-gemm; do
    step "bench $op --sweep llama --virtual 4, and -m 4096 on the real GPU"
    run 200 "$TW" bench $op --sweep llama --virtual 4 -R 3 --iters 5 --json "$OUT/tp.json" && cat "$OUT/tp.json" >>"$OUT/bench_tp.jsonl"
    run 120 "$TW" bench $op -m 4096 -n 4096 -k 4096 --json "$OUT/tp.json" && cat "$OUT/tp.json" >>"$OUT/bench_tp.jsonl"
  done
  rm -f "$OUT/tp.json"
  for op in gemm-rs ag-gemm; do  # one traced fused call each: where the time goes, per tile
    step "bench $op -m 4096 -n 4096 -k 4096 --virtual 4 --trace"
    run 120 "$TW" bench $op -m 4096 -n 4096 -k 4096 --virtual 4 -R 1 --iters 2 --trace "$OUT/trace_$op.json"
  done
  tar czf "$OUT/traces_tp.tgz" -C "$OUT" trace_gemm-rs.json trace_ag-gemm.json 2>/dev/null && rm -f "$OUT"/trace_*.json
fi

if [ "$MODE" = engine ]; then
  # The mode's steps live in their own file (this one stays readable); same shell, same helpers.
  . "$(dirname "${BASH_SOURCE[0]}")/gpu_run_engine.sh"
fi

if [ "$MODE" = python ]; then
  header
  PYLIB=$(mktemp -d)
  step "pip install . against $DIST (no registry there: the box's own build tools)"
  TILEWIRE_NCCL_ROOT=$(dirname "$VENV_NCCL") CMAKE_PREFIX_PATH=$DIST run 300 python3 -m pip install -q \
    --no-build-isolation --no-deps --target "$PYLIB" .
  ngpu=$(nvidia-smi -L | wc -l)
  step "pytest tests/python under torchrun, $ngpu processes"
  REPO=$PWD
  cd "$PYLIB"  # not the checkout: `import tilewire` must find the installed package
  PYTHONPATH=$PYLIB run 300 torchrun --nproc-per-node "$ngpu" -m pytest -q -p no:cacheprovider "$REPO/tests/python"
  for ex in tp_mlp moe_layer moe_block; do
    step "examples/python/$ex.py under torchrun, $ngpu processes"
    PYTHONPATH=$PYLIB run 120 torchrun --nproc-per-node "$ngpu" "$REPO/examples/python/$ex.py"
  done
  [ "${PY_STEPS:-all}" = checks ] && { step "done: $([ $FAIL = 0 ] && echo ALL PASSED || echo FAILURES, see run.log)"; exit $FAIL; }
  # What the Python layer adds to gemm_allreduce: the CLI's fused row (e) and the same call from
  # Python (view=True: no copy), 8192 x 8192 x 4096 at one rank, in alternation, three times each,
  # 9 repeats each; both first run the op 2 s untimed (the CLI's --warm-s 2, the script's default):
  # a GEMM of this size reaches the GPU's 700 W limit after about a second, and the CLI's rows
  # alone take about one (2026-12-05-ep-fp8-h200 run02: 1.043 with only the script warmed).
  : >"$OUT/python_vs_cli.jsonl"
  # The SM clock and power every 100 ms while both run (a GEMM of this size runs at its power
  # limit: a difference in clock between the two is not the Python layer's).
  nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
    >"$OUT/clocks.csv" 2>/dev/null &
  smi=$!
  for round in 1 2 3; do
    step "bench gemm-allreduce -m 8192 -n 8192 -k 4096 on GPU 0, round $round"
    CUDA_VISIBLE_DEVICES=0 run 120 "$TW" bench gemm-allreduce -m 8192 -n 8192 -k 4096 -R 9 --warm-s 2 --json "$OUT/cli.json" &&
      tr -d '\n' <"$OUT/cli.json" >>"$OUT/python_vs_cli.jsonl" && echo >>"$OUT/python_vs_cli.jsonl"
    # The same row timed alone (--only-fused): no cuBLASLt or NCCL row between its repeats, as in
    # the Python process, where only gemm_allreduce runs.
    step "bench gemm-allreduce -m 8192 -n 8192 -k 4096 --only-fused on GPU 0, round $round"
    CUDA_VISIBLE_DEVICES=0 run 120 "$TW" bench gemm-allreduce -m 8192 -n 8192 -k 4096 -R 9 --warm-s 2 --only-fused \
      --json "$OUT/cli.json" && tr -d '\n' <"$OUT/cli.json" >>"$OUT/python_vs_cli.jsonl" && echo >>"$OUT/python_vs_cli.jsonl"
    step "scripts/py_gemm_allreduce_time.py 8192 8192 4096, round $round"
    PYTHONPATH=$PYLIB CUDA_VISIBLE_DEVICES=0 run 120 torchrun --nproc-per-node 1 "$REPO/scripts/py_gemm_allreduce_time.py" \
      8192 8192 4096 -R 9 --json "$OUT/py.json" && cat "$OUT/py.json" >>"$OUT/python_vs_cli.jsonl"
  done
  kill "$smi" 2>/dev/null
  rm -f "$OUT/cli.json" "$OUT/py.json"
  if [ "${PY_NCU:-0}" = 1 ]; then
    # Whether the CLI's fused row and the Python process run the same GEMM kernel (name: the tile,
    # grid, block, shared memory) and for how long each. At one rank the fused path is the GEMM
    # alone on its plan: a CUTLASS device_kernel of tilewire's or cuBLASLt's (nvjet_*), so the CLI
    # times row (e) alone (--only-fused: no other row's GEMM in the profile). The clocks are left
    # as they are (--clock-control none: no clock changes on these machines).
    for who in cli python; do
      step "ncu: the GEMM kernels of the $who process (ncu_$who.csv)"
      if [ $who = cli ]; then cmd=("$TW" bench gemm-allreduce -m 8192 -n 8192 -k 4096 -R 1 --warm-s 0 --only-fused)
      else cmd=(torchrun --nproc-per-node 1 "$REPO/scripts/py_gemm_allreduce_time.py" 8192 8192 4096 -R 1 --warm-s 0); fi
      PYTHONPATH=$PYLIB CUDA_VISIBLE_DEVICES=0 run 200 ncu --clock-control none --target-processes all -k 'regex:device_kernel|nvjet' \
        --launch-skip 10 --launch-count 6 --csv --log-file "$OUT/ncu_$who.csv" \
        --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__shared_mem_per_block "${cmd[@]}"
    done
  fi
  step "scripts/py_moe_bench.py: tilewire.MoE against the torch reference layer, $ngpu processes"
  PYTHONPATH=$PYLIB run 240 torchrun --nproc-per-node "$ngpu" "$REPO/scripts/py_moe_bench.py" --json "$OUT/py_moe.json"
  python3 - "$OUT/python_vs_cli.jsonl" <<'PY' | tee -a "$LOG"
import json, sys
cli, alone, py, raw, side, cpp = [], [], [], [], [], []
for line in open(sys.argv[1]):
    if not line.strip(): continue
    j = json.loads(line)
    if j.get("bench") == "gemm-allreduce":
        (alone if j["config"].get("only_fused") else cli).append(j["rows"][0]["t_fused_us"])
    else:
        py.append(j["t_python_us"]); raw.append(j.get("t_raw_us")); side.append(j.get("t_side_stream_us"))
        cpp.append(j.get("t_cpp_loop_us"))
if cli and py:
    med = lambda v: sorted(v)[len(v) // 2]
    print("# python / cli gemm_allreduce 8192x8192x4096, 1 rank: cli %s us, python %s us, ratio of the medians %.4f"
          % (cli, py, med(py) / med(cli)))
    if None not in raw + side:
        print("# same process: raw extension call %s us (python / raw %.4f), side stream %s us (python / side %.4f)"
              % (raw, med(py) / med(raw), side, med(py) / med(side)))
    if None not in cpp:
        print("# same process: C++ loop %s us, python / C++ loop %.4f (the Python-vs-C++ figure: one GPU state)"
              % (cpp, med(py) / med(cpp)))
    if alone:
        print("# the CLI's (e) timed alone (--only-fused) %s us: python / it %.4f, C++ loop / it %.4f"
              % (alone, med(py) / med(alone), med(cpp) / med(alone) if None not in cpp else float("nan")))
PY
  cd "$REPO"
fi

if [ "$MODE" = virtualcheck ]; then
  # The virtual team's sanitizer and CLI checks (nvidia-h200): memcheck on the multi-rank tests
  # at P = 4 (MEMCHECK_P; MEMCHECK_FILTER picks the tests), then the correctness benches at 8
  # virtual ranks (VIRTUALCHECK_BENCH=0 leaves them out).
  header
  step "memcheck, ${MEMCHECK_P:-4} virtual ranks"
  TILEWIRE_TEST_VIRTUAL=${MEMCHECK_P:-4} TW_TEST_MAX_COUNT=1000003 TILEWIRE_TIMEOUT_MS=60000 run 400 compute-sanitizer --tool memcheck \
    --report-api-errors no --error-exitcode 9 "$TESTS" --gtest_filter="${MEMCHECK_FILTER:-DeviceApi.*:AllReduce*:ReduceScatter*:AllGather*:VirtualTeam.*:GemmAllReduce.SmallShapes}"
fi
if [ "$MODE" = virtualcheck ] && [ "${VIRTUALCHECK_BENCH:-1}" != 0 ]; then
  step "bench allreduce --virtual 8"
  run 150 "$TW" bench allreduce --virtual 8 -b 8K -e 64M -f 4 --json "$OUT/bench_allreduce_virtual8.json"
  step "bench gemm-allreduce --virtual 8"
  run 200 "$TW" bench gemm-allreduce --virtual 8 --json "$OUT/bench_gemm_allreduce_virtual8.json"
fi

if [ "$MODE" = decode ]; then
  header
  STEPS=" ${DECODE_STEPS:-probe tests memcheck bench} "
  FUSED_TESTS='GemmAllReduce.*:GemmAllReduceReuse.*:GemmReduceScatter.*:AllGatherGemm.*:GemmScatterGather.*:-GemmAllReduce.AcceptanceShape'
  if [[ $STEPS == *" probe "* ]]; then
    step "coresidency_probe: whole-SM CTAs of P grids resident at once, plain and under memcheck"
    run 60 "$DIST/bin/coresidency_probe" 2000
    run 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$DIST/bin/coresidency_probe" 3000
  fi
  if [[ $STEPS == *" tests "* ]]; then
    step "GEMM tests and the fused ops' tests, the real rank"
    run 250 "$TESTS" --gtest_filter="${DECODE_P1_TESTS:-Gemm.*}:$FUSED_TESTS" --gtest_output=json:"$OUT/gpu_tests_decode_p1.json"
    for p in ${VIRTUAL_P:-2 4}; do
      step "the fused ops' tests, $p virtual ranks"
      TILEWIRE_TEST_VIRTUAL=$p run "${VIRTUAL_LIMIT:-200}" "$TESTS" --gtest_filter="$FUSED_TESTS" \
        --gtest_output=json:"$OUT/gpu_tests_decode_p$p.json"
    done
  fi
  if [[ $STEPS == *" memcheck "* ]]; then
    step "memcheck on the decode tests, ${MEMCHECK_P:-4} virtual ranks"
    TILEWIRE_TEST_VIRTUAL=${MEMCHECK_P:-4} TILEWIRE_TIMEOUT_MS=60000 run 400 compute-sanitizer --tool memcheck \
      --report-api-errors no --error-exitcode 9 "$TESTS" \
      --gtest_filter="${MEMCHECK_FILTER:-GemmAllReduce.OwnerDecodeTile:GemmReduceScatter.*:AllGatherGemm.*}"
  fi
  if [[ $STEPS == *" bench "* ]]; then
    : >"$OUT/bench_decode.jsonl"  # one JSON line per bench run
    for algo in auto exchange; do
      step "bench gemm-allreduce --sweep decode --path fused --algo $algo, the real rank"
      run 150 "$TW" bench gemm-allreduce --sweep decode --path fused --algo $algo -R 5 --json "$OUT/b.json" &&
        cat "$OUT/b.json" >>"$OUT/bench_decode.jsonl"
    done
    for op in gemm-rs ag-gemm; do
      step "bench $op -m 1,16,64,128,256 -n 8192 -k 4096, the real rank"
      run 120 "$TW" bench $op -m 1,16,64,128,256 -n 8192 -k 4096 --json "$OUT/b.json" && cat "$OUT/b.json" >>"$OUT/bench_decode.jsonl"
    done
    rm -f "$OUT/b.json"
  fi
fi

if [ "$MODE" = gemm ]; then
  { nvidia-smi --query-gpu=index,name,clocks.sm,memory.total --format=csv; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
  step "GEMM tests"
  run 200 "$TESTS" --gtest_filter='Gemm.*' --gtest_output=json:"$OUT/gpu_tests_gemm.json"
  step "memcheck on the small GEMM tests (hook and stream-K kernels)"
  run 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$TESTS" \
    --gtest_filter='Gemm.SmallShapes:Gemm.HookFiresOncePerTile:Gemm.DecodeShapesOnTheSwappedTile:Gemm.DecodeShapesOnThePingpongTiles'
  step "bench gemm"
  run 150 "$TW" bench gemm --sweep acceptance -R 9 --json "$OUT/bench_gemm_acceptance.json"
  run 150 "$TW" bench gemm --sweep grid -R 7 --json "$OUT/bench_gemm_grid.json"
  step "bench gemm, decode, narrow and ragged shapes, bf16 and fp16"
  for d in bf16 fp16; do
    run 100 "$TW" bench gemm --dtype $d --sweep decode -R 5 --json "$OUT/bench_gemm_decode_$d.json"
    run 100 "$TW" bench gemm --dtype $d --sweep narrow -R 5 --json "$OUT/bench_gemm_narrow_$d.json"
    run 100 "$TW" bench gemm --dtype $d --sweep ragged -R 5 --json "$OUT/bench_gemm_ragged_$d.json"
  done
  run 100 "$TW" bench gemm --dtype fp16 --sweep acceptance -R 5 --json "$OUT/bench_gemm_acceptance_fp16.json"
  step "the other kernel on the shapes the rule decides (plan.hpp use_streamk): for the record"
  TILEWIRE_GEMM_KERNEL=streamk run 100 "$TW" bench gemm --sweep tail -R 7
  TILEWIRE_GEMM_KERNEL=hook run 100 "$TW" bench gemm -m 512 -n 4096 -k 4096 -R 7
fi

if [ "$MODE" = gemmplans ]; then
  { nvidia-smi --query-gpu=index,name,clocks.sm,memory.total --format=csv; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
  DECODE_PLANS="auto;hook;tile=swap64x16;tile=swap64x32;tile=swap64x64"  # the ping-pong tiles, data-parallel
  DECODE_PLANS+=";tile=swap128x64pp;tile=128x128pp;tile=128x112pp"  # the 128-row ping-pong tiles
  DECODE_PLANS+=";tile=swap128x64,mode=dp;tile=swap128x64,mode=splitk,splits=2;tile=swap128x64,mode=splitk,splits=4"
  DECODE_PLANS+=";tile=128x64,mode=heuristic;tile=128x128,mode=heuristic;tile=128x256,mode=heuristic"
  DECODE_PLANS+=";tile=swap64x64,pdl=1;tile=128x128pp,pdl=1"  # programmatic dependent launch
  RAGGED_PLANS="auto;hook;streamk;tile=128x256,mode=heuristic;tile=128x256,mode=streamk,raster=n"
  RAGGED_PLANS+=";tile=128x128,mode=heuristic;tile=128x128pp;tile=128x112pp"
  # The 256-row tiles. A spec that names a cooperative tile and no mode keeps the plan's mode
  # (stream-K where the rule runs 128x256 stream-K): name it.
  RAGGED_PLANS+=";tile=256x160,mode=dp;tile=256x160c2,mode=dp;tile=256x160,mode=streamk;tile=256x112,mode=dp"
  DECODE_PLANS=${GEMMPLANS_DECODE:-$DECODE_PLANS}
  RAGGED_PLANS=${GEMMPLANS_RAGGED:-$RAGGED_PLANS}
  step "the ping-pong and 256-row tiles' tests (every element against the reference)"
  run 180 "$TESTS" --gtest_filter='Gemm.DecodeShapesOnThePingpongTiles:Gemm.RaggedShapesOnTheWideTiles' \
    --gtest_output=json:"$OUT/gpu_tests_pingpong.json"
  for d in ${GEMMPLANS_DTYPES:-bf16 fp16}; do
    for sw in ${GEMMPLANS_SWEEPS:-decode narrow ragged acceptance}; do
      case $sw in
        decode) step "bench gemm --plans, decode, $d"
          run 280 "$TW" bench gemm --dtype $d --sweep decode -R 3 --plans "$DECODE_PLANS" --json "$OUT/bench_gemm_plans_decode_$d.json" ;;
        narrow) step "bench gemm --plans, narrow, $d"
          run 150 "$TW" bench gemm --dtype $d --sweep narrow -R 3 --plans "$DECODE_PLANS" --json "$OUT/bench_gemm_plans_narrow_$d.json" ;;
        ragged) step "bench gemm --plans, ragged, $d"
          run 150 "$TW" bench gemm --dtype $d --sweep ragged -R 3 --plans "$RAGGED_PLANS" --json "$OUT/bench_gemm_plans_ragged_$d.json" ;;
        acceptance) step "bench gemm --plans, acceptance, $d"
          run 150 "$TW" bench gemm --dtype $d --sweep acceptance -R 3 --plans "$RAGGED_PLANS" --json "$OUT/bench_gemm_plans_acceptance_$d.json" ;;
      esac
    done
  done
fi

if [ "$MODE" = gemmpick ]; then
  { nvidia-smi --query-gpu=index,name,clocks.sm,memory.total --format=csv; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
  PICK="${GEMMPICK_PLANS:-tile=swap128x64,mode=dp;tile=swap128x64pp}"
  PICK2="$PICK;$PICK"
  TMPJ=$(mktemp -d)
  for d in bf16 fp16; do
    for shape in ${GEMMPICK_SHAPES:-256x4096x4096 256x4096x8192 128x8192x4096 128x8192x8192}; do
      IFS=x read -r m n k <<<"$shape"
      step "bench gemm --plans, $d, $shape"
      run 60 "$TW" bench gemm --dtype $d -m "$m" -n "$n" -k "$k" -R 5 --plans "$PICK2" --json "$TMPJ/$d-$shape.json"
      cat "$TMPJ/$d-$shape.json" >>"$OUT/bench_gemm_pick.jsonl" 2>/dev/null
    done
  done
  rm -rf "$TMPJ"
fi

if [ "$MODE" = acceptance ]; then
  # The fused op's acceptance shapes only (nvidia-h200-x2; 8192x8192x4096, 16384x8192x4096,
  # 4096x8192x14336), in ${PROCS:-6} fresh processes: the spread of the e/a ratio between
  # processes and machines.
  header
  for i in $(seq 1 ${PROCS:-6}); do
    step "bench gemm-allreduce acceptance, process $i"
    run 120 "$TW" bench gemm-allreduce --sweep acceptance --iters 20 -R 5
  done
fi

if [ "$MODE" = scale ]; then
  # 4 or 8 GPUs (nvidia-h200-x4 / nvidia-h200-x8; no results under bench/results/ yet): topology
  # and LSA team, the all-reduce bench with NCCL's columns, the fused op on the scale sweep (the
  # 2-GPU grid plus K_local 1024 and 3584), the GPU tests, then memcheck on the small all-reduce
  # and fused tests at this rank count.
  header
  step "machine and tilewire info"
  nvidia-smi topo -m >>"$LOG" 2>&1
  run 120 "$TW" info
  "$TW" info --json >"$OUT/info.json" 2>>"$LOG"
  step "bench allreduce -b 8K -e 1G -f 4 (bf16)"
  run 300 "$TW" bench allreduce -b 8K -e 1G -f 4 -d bf16 --json "$OUT/bench_allreduce_bf16.json"
  step "bench gemm-allreduce, scale sweep"
  run 400 "$TW" bench gemm-allreduce --sweep scale --iters 10 -R 3 --json "$OUT/bench_gar_scale.json"
  step "GPU tests"
  run 300 "$TESTS" --gtest_output=json:"$OUT/gpu_tests.json"
  step "memcheck on the small all-reduce and fused tests"
  TILEWIRE_TIMEOUT_MS=120000 TW_TEST_MAX_COUNT=1000003 timeout 300 compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 9 "$TESTS" --gtest_filter='*AllReduceExact*:*AllReduceRandom*:BadInput.*:GemmAllReduce.SmallShapes:GemmAllReduce.SequentialPath' \
    >"$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$LOG"
  grep -E "ERROR SUMMARY" "$OUT/sanitizer.log" | tee -a "$LOG"
fi

if [ "$MODE" = nvlink ]; then
  # The part of the fused ops' acceptance a virtual team cannot show (docs/fused_gemm.md, "What is
  # left"): fused against the GEMM alone and the sequential path where the collective crosses
  # NVLink, and whether kAuto's cost model picks the faster path.
  header
  J=$OUT/bench_nvlink.jsonl
  : >"$J"
  ngpu=$(nvidia-smi -L | wc -l)
  nb() { bench_json "$J" "$@"; }
  for p in ${NVLINK_P:-2 4 8}; do
    [ "$p" -le "$ngpu" ] || { step "P=$p skipped: $ngpu GPUs here"; continue; }
    export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((p - 1)))
    nb 200 "gemm-allreduce acceptance P=$p" gemm-allreduce --sweep acceptance --path fused -R 3 --iters 10 --warm-s 2
    nb 200 "gemm-allreduce grid P=$p" gemm-allreduce --sweep grid --path fused -R 3 --iters 10 --warm-s 1
    nb 150 "gemm-allreduce decode P=$p" gemm-allreduce --sweep decode --path fused -R 3 --iters 20 --warm-s 1
    nb 200 "gemm-rs llama P=$p" gemm-rs --sweep llama -R 3 --iters 10 --warm-s 1
    nb 200 "ag-gemm llama P=$p" ag-gemm --sweep llama -R 3 --iters 10 --warm-s 1
    nb 120 "gemm-rs decode P=$p" gemm-rs -m 16,64,128,256 -n 8192 -k $((8192 / p)) -R 3 --iters 20 --warm-s 1
    nb 120 "ag-gemm decode P=$p" ag-gemm -m 16,64,128,256 -n $((28672 / p)) -k 8192 -R 3 --iters 20 --warm-s 1
  done
  unset CUDA_VISIBLE_DEVICES
  python3 "$(dirname "${BASH_SOURCE[0]}")/accept_table.py" "$J" >"$OUT/accept_table.md" 2>>"$LOG"
  python3 "$(dirname "${BASH_SOURCE[0]}")/model_check.py" "$J" >"$OUT/model_check.md" 2>>"$LOG"
  tail -3 "$OUT/model_check.md" | tee -a "$LOG"
fi

if [ "$MODE" = fused ]; then
  # The fused op (nvidia-h200-x2): fused tests, the acceptance shapes with a per-tile trace of the
  # first one (then three more processes), the grid sweep, the other GPU tests and the all-reduce
  # bench, then compute-sanitizer on the small fused tests.
  header
  step "fused tests"
  run 240 "$TESTS" --gtest_filter='GemmAllReduce.*:TimeoutDeathTest.Fused*:Trace.*' --gtest_output=json:"$OUT/gpu_tests_gemm_allreduce.json"
  step "bench gemm-allreduce acceptance (+ trace of 8192x8192x4096)"
  run 200 "$TW" bench gemm-allreduce --sweep acceptance --iters 20 -R 5 --trace "$OUT/trace_8192x8192x4096.json" --json "$OUT/bench_gar_acceptance.json"
  for i in 2 3 4; do  # the acceptance shapes again, each in a fresh process: the spread between runs
    step "bench gemm-allreduce acceptance, process $i"
    run 120 "$TW" bench gemm-allreduce --sweep acceptance --iters 20 -R 5
  done
  step "bench gemm-allreduce grid"
  run 200 "$TW" bench gemm-allreduce --sweep grid --iters 10 -R 3 --json "$OUT/bench_gar_grid.json"
  step "the other GPU tests, and the all-reduce bench at this commit"
  run 200 "$TESTS" --gtest_filter='-GemmAllReduce.*:TimeoutDeathTest.Fused*:Trace.*:Gemm.*' \
    --gtest_output=json:"$OUT/gpu_tests_other.json"
  run 200 "$TW" bench allreduce -b 8K -e 1G -f 2 -d bf16 --json "$OUT/bench_allreduce_bf16.json"
  step "compute-sanitizer on the small fused tests"
  {
    TILEWIRE_TIMEOUT_MS=120000 timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$TESTS" --gtest_filter='GemmAllReduce.SmallShapes:GemmAllReduce.TraceEventsPerTile:GemmAllReduce.SequentialPath:GemmAllReduce.BLayoutKN'; echo "memcheck rc=$?"
    TILEWIRE_TIMEOUT_MS=120000 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 \
      "$TESTS" --gtest_filter='GemmAllReduce.SmallShapes'; echo "racecheck rc=$?"
  } >"$OUT/sanitizer.log" 2>&1
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=" "$OUT/sanitizer.log" | tee -a "$LOG"
fi

if [ "$MODE" = trace ]; then
  # The tracer (nvidia-h200-x2): the headline shape traced, fused and sequential, with long timings
  # (compiled-out / off / on) so the tracing cost is above the noise.
  export TILEWIRE_TIMEOUT_MS=${TILEWIRE_TIMEOUT_MS:-3000}
  step "tracer GPU tests"
  run 120 "$TESTS" --gtest_filter='Trace.*:GemmAllReduce.TraceEventsPerTile' --gtest_output=json:"$OUT/gpu_tests_trace.json"
  step "bench gemm-allreduce 8192x8192x4096 --trace"
  run 200 "$TW" bench gemm-allreduce -m 8192 -n 8192 -k 4096 --iters 50 -R 9 --trace "$OUT/trace_8192x8192x4096.json" \
    --plot "$OUT/trace_8192x8192x4096.png" \
    --json "$OUT/bench_gar_8192x8192x4096.json"
fi

if [ "$MODE" = full ] || [ "$MODE" = quick ]; then
step "machine"
{ nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvidia-smi topo -m; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
step "tilewire info"
run 120 "$TW" info
"$TW" info --json >"$OUT/info.json" 2>>"$LOG"
run 30 "$TW" info --env

step "GPU tests"
run 300 "$TESTS" --gtest_output=json:"$OUT/gpu_tests.json"

step "bench allreduce bf16 (out-of-place, back-to-back)"
run 300 "$TW" bench allreduce -b 8K -e 1G -f 2 -d bf16 --json "$OUT/bench_allreduce_bf16.json"
if [ "$MODE" = full ]; then
  step "bench allreduce fp16 / fp32 (correctness across dtypes), bf16 in-place, bf16 CUDA graph"
  run 300 "$TW" bench allreduce -b 8K -e 256M -f 4 -d fp16 --json "$OUT/bench_allreduce_fp16.json"
  run 300 "$TW" bench allreduce -b 8K -e 256M -f 4 -d fp32 --json "$OUT/bench_allreduce_fp32.json"
  run 300 "$TW" bench allreduce -b 8K -e 1G -f 4 -d bf16 -i 1 --json "$OUT/bench_allreduce_bf16_inplace.json"
  run 300 "$TW" bench allreduce -b 8K -e 4M -f 2 -d bf16 -G 1
  step "exploratory: one-shot beyond its default limit (tuning data for TILEWIRE_ONESHOT_MAX_BYTES)"
  TILEWIRE_ONESHOT_MAX_BYTES=2M run 120 "$TW" bench allreduce -b 256K -e 2M -f 2 -d bf16 -a oneshot
fi

fi

if [ "$MODE" = house ]; then
  # A change that must not move performance (nvidia-h200): this dist and the one in BEFORE_TAR (a
  # tar.xz of a dist before the change) in alternation, twice each, in this one call: `bench
  # allreduce` at the real rank (8K..256M) and `bench gemm --sweep acceptance`, one JSON line per
  # run with its commit (bench_house.jsonl), and the whole GPU test binary at the real rank.
  header
  dists=$DIST
  if [ -f "${BEFORE_TAR:-/nonexistent}" ]; then
    x=$(mktemp -d) && tar xJf "$BEFORE_TAR" -C "$x" && dists="$(ls -d "$x"/*/ | head -1) $DIST"
  fi
  : >"$OUT/bench_house.jsonl"
  for round in 1 2; do
    for d in $dists; do
      for b in "allreduce -b 8K -e 256M -f 4" "gemm --sweep acceptance -R 5"; do
        step "bench $b, round $round ($(cat "$d/COMMIT"))"
        # The line's "dist" names the build measured (bench allreduce's own "commit" reads
        # TILEWIRE_COMMIT, set for this dist too).
        TILEWIRE_COMMIT=$(cat "$d/COMMIT") LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH run 150 "$d/bin/tilewire" bench $b \
          --json "$OUT/h.json" &&
          sed "s/^{/{\"dist\": \"$(cat "$d/COMMIT")\", \"round\": $round, /" "$OUT/h.json" | tr -d '\n' >>"$OUT/bench_house.jsonl" &&
          echo >>"$OUT/bench_house.jsonl"
      done
    done
  done
  rm -f "$OUT/h.json"
  whole_binary "0 ${HOUSE_P-2 4 8}" gpu_tests_house.tgz
fi

if [ "$MODE" = moe ]; then
  header
  steps=${MOE_STEPS:-tests memcheck grouped bench}
  filter='GroupedGemm*:Moe*'
  if [[ " $steps " == *" tests "* ]]; then
    step "grouped GEMM and MoE tests, the real rank"
    run 240 "$TESTS" --gtest_filter="$filter" --gtest_output=json:"$OUT/gpu_tests_moe_p1.json"
    for p in ${MOE_P:-2 3 4 8}; do
      step "MoE tests at $p virtual ranks"
      TILEWIRE_TEST_VIRTUAL=$p run 240 "$TESTS" --gtest_filter='Moe*' --gtest_output=json:"$OUT/t.json" &&
        { echo "{\"P\": $p, \"gtest\": $(cat "$OUT/t.json" | tr -d '\n')}" >>"$OUT/gpu_tests_moe_virtual.jsonl"; }
    done
    rm -f "$OUT/t.json"
  fi
  if [[ " $steps " == *" memcheck "* ]]; then
    step "memcheck: grouped GEMM and MoE tests at the real rank, MoE at 4 virtual ranks"
    run 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$TESTS" --gtest_filter="$filter"
    TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=120000 run 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$TESTS" --gtest_filter='Moe*'
  fi
  if [[ " $steps " == *" grouped "* ]]; then
    for r in uniform skewed; do
      step "bench gemm --grouped, routing $r"
      run 200 "$TW" bench gemm --grouped --routing "$r" --tiles 'auto;64x128pp;128x256coop' -R 3 \
        --json "$OUT/bench_grouped_$r.json"
    done
  fi
  if [[ " $steps " == *" bench "* ]]; then
    : >"$OUT/bench_moe.jsonl"
    for args in "--routing uniform" "--routing skewed" "--virtual 8 --routing uniform"; do
      step "bench moe $args"
      run 240 "$TW" bench moe $args --json "$OUT/m.json" &&
        sed "s/^{/{\"label\": \"$args\", /" "$OUT/m.json" | tr -d '\n' >>"$OUT/bench_moe.jsonl" && echo >>"$OUT/bench_moe.jsonl"
    done
    rm -f "$OUT/m.json"
  fi
fi

if [ "$MODE" = sanitize ]; then
step "compute-sanitizer memcheck + racecheck on the GPU tests"
# Death tests (their children trap on purpose), 10000-iteration drift and the multi-process
# launcher are left out; element counts are capped at 1000003.
SAN_FILTER='-TimeoutDeathTest.*:Drift.*:MultiProcess.*'
export TILEWIRE_TIMEOUT_MS=120000 TW_TEST_MAX_COUNT=1000003  # sanitized kernels are slow; waits stay bounded
{
  timeout 330 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 --target-processes all \
    "$TESTS" --gtest_filter="$SAN_FILTER"; echo "memcheck rc=$?"
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$TESTS" --gtest_filter="$SAN_FILTER"; echo "racecheck rc=$?"
} >"$OUT/sanitizer.log" 2>&1
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=" "$OUT/sanitizer.log" | tee -a "$LOG"
grep -qE "memcheck rc=0" "$OUT/sanitizer.log" && grep -qE "racecheck rc=0" "$OUT/sanitizer.log" || FAIL=1
fi

step "done: $([ $FAIL = 0 ] && echo ALL PASSED || echo FAILURES, see run.log)"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^#|!!!" "$LOG" | tail -40
exit $FAIL
