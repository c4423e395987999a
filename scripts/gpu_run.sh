#!/usr/bin/env bash
# The one script that runs tilewire's GPU work in a single device call: topology and `tilewire
# info`, the GPU test binary, the benches, and compute-sanitizer (memcheck + racecheck) on the
# tests. Everything lands in $OUT (at most 8 files: the device tool brings back no more).
#
# Build here first (scripts/pack_dist.sh puts the binaries and libtilewire into dist/), then on
# the GPU machine, from the repo root:   OUT=/some/dir scripts/gpu_run.sh [full|quick|sanitize]
#   full      info, GPU tests, all benches (bf16 sweep, fp16, fp32, in-place, CUDA graph)
#   quick     info, GPU tests, the bf16 bench
#   gemm      (nvidia-h200) GEMM tests, memcheck on them, `tilewire bench gemm` acceptance + grid sweeps
#   trace     (nvidia-h200-x2) the traced headline shape: fused + sequential trace JSON, tracing cost
#   fused     (nvidia-h200-x2) fused GEMM + all-reduce: tests, acceptance + trace, grid, sanitizer
#   gemmtune  (nvidia-h200) stream-K plan sweep on the skinny and ragged GEMM shapes
#   artune    (nvidia-h200-x2) NVLink transport ceilings, one-shot / two-shot all-reduce grids
#   relay, relaytune, relaydiag, relaygrid, relaypull, relaydiag2, relaydiag3, relaydiag4, alternatives,
#             acceptance (issue 4's shapes in several processes), fusedtests (tests + a short memcheck)
#   scale     (nvidia-h200-x4 / -x8) issue 6: info, all-reduce bench, fused scale sweep, tests, memcheck
#             (nvidia-h200-x2) the relay algorithm's first contact, tuning, diagnosis, grid and
#             push-vs-pull runs (session 3; their results: bench/results/2026-11-30-s3-h200x2/)
#   virtual   (nvidia-h200) the GPU tests at P = 1, 2, 3, 4, 8 virtual ranks on one GPU
#   virtualcheck (nvidia-h200) memcheck on the multi-rank tests at 4 virtual ranks; benches at 8
#   sanitize  compute-sanitizer memcheck + racecheck on the GPU tests (a second call: together
#             they do not fit the device tool's 10-minute command limit)
# Results are committed under bench/results/ with scripts/collect_results.py.
set -uo pipefail
MODE=${1:-full}
OUT=${OUT:-$PWD/gpu-out}
DIST=${DIST:-$PWD/dist}
mkdir -p "$OUT"
LOG=$OUT/run.log
: >"$LOG"

# Policy: never NVLink multicast. NCCL runtime must be 2.28.9 (the system one there is 2.28.3).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# A hardware queue per stream: virtual teams need it (Comm::run_virtual refuses otherwise).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
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

if [ "$MODE" = virtualcheck ]; then
  # The virtual team's sanitizer and CLI checks (nvidia-h200): memcheck on the multi-rank tests
  # at P = 4, then the correctness benches at 8 virtual ranks.
  header
  step "memcheck, 4 virtual ranks"
  TILEWIRE_TEST_VIRTUAL=4 TW_TEST_MAX_COUNT=1000003 TILEWIRE_TIMEOUT_MS=60000 run 400 compute-sanitizer --tool memcheck \
    --report-api-errors no --error-exitcode 9 "$TESTS" --gtest_filter="${MEMCHECK_FILTER:-DeviceApi.*:AllReduce*:ReduceScatter*:AllGather*:VirtualTeam.*:GemmAllReduce.SmallShapes}"
  step "bench allreduce --virtual 8"
  run 150 "$TW" bench allreduce --virtual 8 -b 8K -e 64M -f 4 --json "$OUT/bench_allreduce_virtual8.json"
  step "bench gemm-allreduce --virtual 8"
  run 200 "$TW" bench gemm-allreduce --virtual 8 --json "$OUT/bench_gemm_allreduce_virtual8.json"
fi

if [ "$MODE" = gemm ]; then
  { nvidia-smi --query-gpu=index,name,clocks.sm,memory.total --format=csv; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
  step "GEMM tests"
  run 150 "$TESTS" --gtest_filter='Gemm.*' --gtest_output=json:"$OUT/gpu_tests_gemm.json"
  step "memcheck on the small GEMM tests (hook and stream-K kernels)"
  run 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$TESTS" \
    --gtest_filter='Gemm.SmallShapes:Gemm.HookFiresOncePerTile'
  step "bench gemm"
  run 150 "$TW" bench gemm --sweep acceptance -R 9 --json "$OUT/bench_gemm_acceptance.json"
  run 150 "$TW" bench gemm --sweep grid -R 7 --json "$OUT/bench_gemm_grid.json"
  step "the other kernel on the shapes the rule decides (plan.hpp use_streamk): for the record"
  TILEWIRE_GEMM_KERNEL=streamk run 100 "$TW" bench gemm --sweep ragged -R 7
  TILEWIRE_GEMM_KERNEL=hook run 100 "$TW" bench gemm -m 512 -n 4096 -k 4096 -R 7
fi

if [ "$MODE" = probe ]; then
  # First contact with new kernels: small tests first, each under a short limit, and nothing
  # heavier runs when the small one fails (a hung mbarrier would otherwise eat the call).
  header
  step "Gemm.SmallShapes"
  if run 90 "$TESTS" --gtest_filter='Gemm.SmallShapes:Gemm.HookFiresOncePerTile'; then
    step "Gemm rest"
    run 180 "$TESTS" --gtest_filter='Gemm.*' --gtest_output=json:"$OUT/gpu_tests_gemm.json"
    step "bench gemm acceptance"
    run 200 "$TW" bench gemm --sweep acceptance --json "$OUT/bench_gemm_acceptance.json"
    step "GemmAllReduce.SmallShapes"
    if run 90 "$TESTS" --gtest_filter='GemmAllReduce.SmallShapes'; then
      step "GemmAllReduce rest"
      run 180 "$TESTS" --gtest_filter='GemmAllReduce.*' --gtest_output=json:"$OUT/gpu_tests_gemm_allreduce.json"
    fi
  fi
  step "the other GPU tests"
  run 200 "$TESTS" --gtest_filter='-Gemm*' --gtest_output=json:"$OUT/gpu_tests.json"
fi

if [ "$MODE" = gemmtune ]; then
  # Stream-K plan sweep (nvidia-h200, issue 3): the skinny (M = 128) and ragged-wave shapes under
  # TILEWIRE_GEMM_STREAMK_PLAN overrides; the bench prints what ran and cuBLASLt's algorithm.
  step "GEMM tests"
  run 120 "$TESTS" --gtest_filter='Gemm.*' --gtest_output=json:"$OUT/gpu_tests_gemm.json"
  for p in "" tile=128x128,det=0 tile=128x128,mode=splitk,splits=4 tile=128x128,mode=splitk,splits=4,det=0 \
           tile=128x128,mode=streamk,det=0 tile=128x64 tile=128x64,det=0 tile=128x64,mode=dp \
           tile=128x64,mode=splitk,splits=2 tile=128x64,mode=splitk,splits=2,det=0 tile=128x64,mode=streamk,det=0 \
           tile=128x256,mode=splitk,splits=8,det=0 tile=128x256,mode=streamk,det=0; do
    step "skinny, streamk plan '$p'"
    TILEWIRE_GEMM_KERNEL=streamk TILEWIRE_GEMM_STREAMK_PLAN=$p run 60 "$TW" bench gemm --sweep skinny --iters 50 -R 5
  done
  step "ragged, hook kernel"
  TILEWIRE_GEMM_KERNEL=hook run 60 "$TW" bench gemm --sweep ragged --iters 10 -R 5
  for p in "" det=0 mode=heuristic mode=dp tile=128x128,mode=streamk tile=128x128,mode=streamk,det=0 \
           swizzle=1 swizzle=2,det=0 raster=n; do
    step "ragged, streamk plan '$p'"
    TILEWIRE_GEMM_KERNEL=streamk TILEWIRE_GEMM_STREAMK_PLAN=$p run 60 "$TW" bench gemm --sweep ragged --iters 10 -R 5
  done
fi

if [ "$MODE" = artune ]; then
  # Issue 2 tuning (nvidia-h200-x2): NVLink transport ceilings (SM stores, TMA bulk copies, copy
  # engines; bench/nvlink_ceiling.cu), one-shot grid at 64K..512K, two-shot grid at 256M..1G.
  { nvidia-smi --query-gpu=index,name,clocks.sm,memory.total --format=csv; echo "commit $TILEWIRE_COMMIT"; } >>"$LOG" 2>&1
  step "nvlink_ceiling 256 MiB"
  run 120 "$DIST/bin/nvlink_ceiling" 256
  for b in 64 128; do for t in 256 512; do
    step "one-shot blocks $b threads $t"
    TILEWIRE_ONESHOT_BLOCKS=$b TILEWIRE_ONESHOT_THREADS=$t run 60 "$TW" bench allreduce -b 64K -e 512K -f 2 -d bf16 -n 50
  done; done
  for b in 0 66 264; do for t in 256 512; do
    step "two-shot blocks cap $b threads $t"
    TILEWIRE_ALLREDUCE_BLOCKS=$b TILEWIRE_ALLREDUCE_THREADS=$t run 90 "$TW" bench allreduce -b 256M -e 1G -f 2 -d bf16 -n 10
  done; done
fi

if [ "$MODE" = relay ]; then
  # First contact with the relay algorithm (nvidia-h200-x2): small fused tests under a short
  # limit, the rest only when they pass, then the acceptance shapes with relay and exchange.
  header
  step "GemmAllReduce.SmallShapes"
  if run 90 "$TESTS" --gtest_filter='GemmAllReduce.SmallShapes'; then
    step "bench gemm-allreduce acceptance, relay"
    run 200 "$TW" bench gemm-allreduce --sweep acceptance --algo relay --iters 10 -R 3 --json "$OUT/bench_gar_relay.json"
    step "bench gemm-allreduce 8192x8192x4096, exchange"
    run 100 "$TW" bench gemm-allreduce -m 8192 -n 8192 -k 4096 --algo exchange --iters 10 -R 3
    step "fused tests"
    run 240 "$TESTS" --gtest_filter='GemmAllReduce.*:TimeoutDeathTest.Fused*' --gtest_output=json:"$OUT/gpu_tests_gemm_allreduce.json"
  fi
fi

if [ "$MODE" = relaytune ]; then
  # Relay algorithm tuning (nvidia-h200-x2): who pushes (TILEWIRE_RELAY_CONSUMER_ROWS), swizzle,
  # on the acceptance shapes (fused path forced), then the fused tests.
  header
  B="$TW bench gemm-allreduce --algo relay --path fused --chunks 4 --iters 10 -R 3"
  for cr in 0 32 64 128; do for sw in 1 4; do
    step "relay 8192x8192x4096 consumer_rows $cr swizzle $sw"
    TILEWIRE_RELAY_CONSUMER_ROWS=$cr run 60 $B -m 8192 -n 8192 -k 4096 --swizzle $sw
  done; done
  for cr in 0 64; do
    step "relay 16384x8192x4096 and 4096x8192x14336, consumer_rows $cr swizzle 4"
    TILEWIRE_RELAY_CONSUMER_ROWS=$cr run 60 $B -m 16384 -n 8192 -k 4096 --swizzle 4
    TILEWIRE_RELAY_CONSUMER_ROWS=$cr run 60 $B -m 4096 -n 8192 -k 14336 --swizzle 4
  done
  step "fused tests"
  run 240 "$TESTS" --gtest_filter='GemmAllReduce.*:TimeoutDeathTest.Fused*' --gtest_output=json:"$OUT/gpu_tests_gemm_allreduce.json"
  step "fused tests, consumer rows 64"
  TILEWIRE_RELAY_CONSUMER_ROWS=64 run 240 "$TESTS" --gtest_filter='GemmAllReduce.SmallShapes:GemmAllReduce.OddShapes:GemmAllReduce.RepeatedCallsDoNotDrift'
fi

if [ "$MODE" = relaydiag ]; then
  # Where the relay kernel's time goes (nvidia-h200-x2): polling backoff, no data (flags only),
  # SM clocks and power sampled during the runs.
  header
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw --format=csv,noheader -lms 200 >"$OUT/clocks.csv" 2>&1 &
  SMI=$!
  B="$TW bench gemm-allreduce --algo relay --path fused --chunks 4 --iters 20 -R 5 --swizzle 4 -m 8192 -n 8192 -k 4096"
  step "relay cr 32"
  TILEWIRE_RELAY_CONSUMER_ROWS=32 run 60 $B
  step "relay cr 32, poll 1000 ns"
  TILEWIRE_RELAY_CONSUMER_ROWS=32 TILEWIRE_RELAY_POLL_NS=1000 run 60 $B
  step "relay cr 0, no push (C wrong on purpose)"
  TILEWIRE_RELAY_NO_PUSH=1 run 60 $B
  step "relay cr 0"
  run 60 $B
  step "bench gemm 8192x8192x4096 (hook kernel vs cuBLASLt, GPU 0)"
  run 60 "$TW" bench gemm -m 8192 -n 8192 -k 4096 -R 7
  kill $SMI 2>/dev/null
fi

if [ "$MODE" = relaydiag2 ]; then
  # Session 4, after the counted steps (nvidia-h200-x2): where the rest of the relay kernel's time
  # goes (no data at all vs the default), the consumer-row split re-tuned, each in its own process,
  # and the hook GEMM against cuBLASLt on one GPU for the same shape.
  header
  B="$TW bench gemm-allreduce --algo relay --path fused --chunks 4 --iters 20 -R 7 -m 8192 -n 8192 -k 4096"
  for cfg in "cr 32" "no-push" "cr 0" "cr 16" "cr 48" "cr 64" "cr 32 again" "no-push again"; do
    step "relay $cfg"
    case $cfg in
      no-push*) TILEWIRE_RELAY_NO_PUSH=1 run 60 $B ;;
      *) TILEWIRE_RELAY_CONSUMER_ROWS=$(echo $cfg | cut -d' ' -f2) run 60 $B ;;
    esac
  done
  step "bench gemm 8192x8192x4096 (hook kernel vs cuBLASLt, GPU 0)"
  run 60 "$TW" bench gemm -m 8192 -n 8192 -k 4096 -R 7
fi

if [ "$MODE" = relaydiag3 ]; then
  # Session 4 (nvidia-h200-x2): the comm warp's rows in flight (8, 4) with the consumer split, and
  # one traced call with and without data (no push: C wrong on purpose) to see where the NVLink
  # stores slow the kernel (mainloop or epilogue).
  header
  B="$TW bench gemm-allreduce --algo relay --path fused --chunks 4 --iters 20 -R 7 -m 8192 -n 8192 -k 4096"
  for cfg in ${RELAY_CFGS:-8:32:0 4:32:0 4:48:0 4:64:0 8:32:0 4:32:0 4:48:0}; do  # inflight:consumer_rows:pace_pct
    set -- ${cfg//:/ }
    step "relay inflight $1, consumer rows $2, pace ${3:-0}%"
    TILEWIRE_RELAY_COMM_INFLIGHT=$1 TILEWIRE_RELAY_CONSUMER_ROWS=$2 TILEWIRE_RELAY_PACE_PCT=${3:-0} run 60 $B
  done
  step "traced: default${TRACE_ENV:+ with $TRACE_ENV}"
  env $TRACE_ENV $B --trace "$OUT/trace_push.json" >>"$LOG" 2>&1
  if [ "${NOPUSH_TRACE:-1}" = 1 ]; then
    step "traced: no push"
    TILEWIRE_RELAY_NO_PUSH=1 run 60 $B --trace "$OUT/trace_nopush.json"
  fi
fi

if [ "$MODE" = relaydiag4 ]; then
  # Session 4 (nvidia-h200-x2): pacing of the comm warp's pushes (TILEWIRE_RELAY_PACE_PCT) on the
  # acceptance sweep (as `fused` runs it) and on the single headline shape, on the same machine.
  header
  for pace in ${PACES:-0 60 70 0 60 70}; do
    step "acceptance sweep, pace $pace%"
    TILEWIRE_RELAY_PACE_PCT=$pace run 120 "$TW" bench gemm-allreduce --sweep acceptance --iters 20 -R 5
    step "8192x8192x4096 alone, pace $pace%"
    TILEWIRE_RELAY_PACE_PCT=$pace run 60 "$TW" bench gemm-allreduce --algo relay --path fused --chunks 4 --iters 20 -R 7 -m 8192 -n 8192 -k 4096
  done
fi

if [ "$MODE" = alternatives ]; then
  # Issue 4's design alternatives not yet measured with the relay (nvidia-h200-x2), one process
  # each on 8192x8192x4096: partial precision (owner algorithm: bf16 vs fp32 partials), SMs left
  # out of the GEMM (reserved_sms), and the three algorithms side by side.
  header
  B="$TW bench gemm-allreduce --path fused --chunks 4 --iters 20 -R 5 -m 8192 -n 8192 -k 4096"
  for a in "--algo relay" "--algo exchange" "--algo owner --partials bf16" "--algo owner --partials fp32" \
           "--algo relay --reserved-sms 2" "--algo relay --reserved-sms 4" "--algo relay --reserved-sms 8" \
           "--algo relay --reserved-sms 16" "--algo relay"; do
    step "alternative: $a"
    run 60 $B $a
  done
fi

if [ "$MODE" = acceptance ]; then
  # Issue 4's acceptance shapes only (nvidia-h200-x2), in ${PROCS:-6} fresh processes: the spread
  # of the e/a ratio between processes and machines.
  header
  for i in $(seq 1 ${PROCS:-6}); do
    step "bench gemm-allreduce acceptance, process $i"
    run 120 "$TW" bench gemm-allreduce --sweep acceptance --iters 20 -R 5
  done
fi

if [ "$MODE" = fusedtests ]; then
  # The fused op's GPU tests and memcheck on the sequential path and B [K, N] tests only
  # (nvidia-h200-x2): a short check after a host-side fix.
  header
  step "fused tests"
  run 100 "$TESTS" --gtest_filter='GemmAllReduce.*:TimeoutDeathTest.Fused*' --gtest_output=json:"$OUT/gpu_tests_gemm_allreduce.json"
  step "memcheck on the sequential-path and B [K, N] tests"
  TILEWIRE_TIMEOUT_MS=120000 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$TESTS" --gtest_filter='GemmAllReduce.SequentialPath:GemmAllReduce.BLayoutKN' >"$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$LOG"
  grep -E "ERROR SUMMARY" "$OUT/sanitizer.log" | tee -a "$LOG"
fi

if [ "$MODE" = scale ]; then
  # Issue 6 (nvidia-h200-x4 / nvidia-h200-x8; not run yet: those kinds were never lent): topology
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

if [ "$MODE" = relaygrid ]; then
  # The fused path on issue 4's grid (nvidia-h200-x2), forced, against (b) (c) (d) in the same
  # run: the data behind gemm_allreduce_prefers_fused().
  header
  step "bench gemm-allreduce grid, fused path forced"
  run 300 "$TW" bench gemm-allreduce --sweep grid --path fused --iters 10 -R 3 --json "$OUT/bench_gar_grid_fused.json"
  step "bench gemm-allreduce grid, sequential path forced"
  run 250 "$TW" bench gemm-allreduce --sweep grid --path sequential --chunks 4 --iters 10 -R 3 --json "$OUT/bench_gar_grid_seq.json"
fi

if [ "$MODE" = relaypull ]; then
  # Relay: push vs pull of the partials (nvidia-h200-x2), acceptance shapes, then the small tests
  # in pull mode.
  header
  step "pull: small tests"
  if TILEWIRE_RELAY_PULL=1 run 120 "$TESTS" --gtest_filter='GemmAllReduce.SmallShapes:GemmAllReduce.OddShapes'; then
    for pl in 0 1; do
      step "relay pull=$pl, acceptance (fused path)"
      TILEWIRE_RELAY_PULL=$pl run 120 "$TW" bench gemm-allreduce --sweep acceptance --path fused --chunks 4 --iters 20 -R 5
    done
  fi
fi

if [ "$MODE" = fused ]; then
  # Issue 4/5 round (nvidia-h200-x2): fused tests, acceptance shapes with a per-tile trace of the
  # first one, the grid sweep, then compute-sanitizer on the small fused tests.
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
  step "the other GPU tests, and the all-reduce bench (issue 2) at this commit"
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
  # Issue 5 (nvidia-h200-x2): the headline shape traced, fused and sequential, with long timings
  # (compiled-out / off / on) so the tracing cost is above the noise.
  export TILEWIRE_TIMEOUT_MS=${TILEWIRE_TIMEOUT_MS:-3000}
  step "tracer GPU tests"
  run 120 "$TESTS" --gtest_filter='Trace.*:GemmAllReduce.TraceEventsPerTile' --gtest_output=json:"$OUT/gpu_tests_trace.json"
  step "bench gemm-allreduce 8192x8192x4096 --trace"
  run 200 "$TW" bench gemm-allreduce -m 8192 -n 8192 -k 4096 --iters 50 -R 9 --trace "$OUT/trace_8192x8192x4096.json" \
    --plot "$OUT/trace_8192x8192x4096.png" \
    --json "$OUT/bench_gar_8192x8192x4096.json"
fi

if [ "$MODE" = iter ]; then
  # Development round: fused-op tests, its acceptance shapes and the grid sweep.
  header
  step "fused tests"
  run 240 "$TESTS" --gtest_filter='GemmAllReduce.*:TimeoutDeathTest.Fused*' --gtest_output=json:"$OUT/gpu_tests_gemm_allreduce.json"
  step "bench gemm-allreduce acceptance"
  run 200 "$TW" bench gemm-allreduce --sweep acceptance --json "$OUT/bench_gar_acceptance.json"
  step "bench gemm-allreduce grid"
  run 300 "$TW" bench gemm-allreduce --sweep grid --iters 10 -R 3 --json "$OUT/bench_gar_grid.json"
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
