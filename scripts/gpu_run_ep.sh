# scripts/gpu_run_ep.sh — the `gin`, `ep` and `ll` modes of scripts/gpu_run.sh (virtual nodes and
# the emulated GIN; the EP tests and benches) and the EP memcheck of its `whole` mode, sourced by it: its helpers (run, step, header) and
# variables (OUT, LOG, DIST, TW, TESTS, MODE, FAIL) are the caller's. Not run on its own.

# memcheck on the EP tests (not the death tests: a forked child under the sanitizer hangs): at 4
# virtual ranks in three processes, Ep.LowLatencyLargestLayout and EpQueue.* each in its own
# (under the sanitizer each stalled once in a combine wait, a copy ordered behind a peer's
# spinning kernel; the tests now finish every rank's copies first, and a stall kills the context
# for every later test), then at the real rank with TILEWIRE_EP_LL_EARLY=1 (the early launches
# run there only). Modes ep, ll and whole.
ep_memcheck() {
  local mc=(compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$TESTS") t
  step "memcheck on the EP tests, 4 virtual ranks (all but Ep.LowLatencyLargestLayout and EpQueue.*)"
  TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 run 300 "${mc[@]}" \
    --gtest_filter='Ep.*:EpHardening.*:EpGin.*:EpEpoch.*:-Ep.LowLatencyLargestLayout'
  for t in Ep.LowLatencyLargestLayout 'EpQueue.*'; do
    step "memcheck on $t, 4 virtual ranks"
    TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 run 200 "${mc[@]}" --gtest_filter="$t"
  done
  step "memcheck on the EP tests, the real rank, TILEWIRE_EP_LL_EARLY=1"
  TILEWIRE_EP_LL_EARLY=1 TILEWIRE_TIMEOUT_MS=60000 run 200 "${mc[@]}" --gtest_filter='Ep.*:EpHardening.*:EpEpoch.*'
}

# The EP tests at real P = 1 and VIRTUAL_P virtual ranks (one JSON each), at the real rank again
# with TILEWIRE_EP_LL_EARLY=1, then ep_memcheck. Modes ep and ll.
ep_tests() {
  for p in ${VIRTUAL_P:-0 2 3 4 8}; do
    step "EP tests, ${p} virtual ranks (0: the real GPU)"
    TILEWIRE_TEST_VIRTUAL=$p run 200 "$TESTS" --gtest_filter='Ep*' --gtest_output=json:"$OUT/gpu_tests_ep_p$p.json"
  done
  step "EP tests, the real GPU, TILEWIRE_EP_LL_EARLY=1"
  TILEWIRE_EP_LL_EARLY=1 run 200 "$TESTS" --gtest_filter='Ep*' --gtest_output=json:"$OUT/gpu_tests_ep_p0_early.json"
  ep_memcheck
}

if [ "$MODE" = gin ]; then
  header
  if [ "${GIN_PARALLEL:-0}" = 1 ]; then
    # One process per shape at once (the GPU time-slices their contexts, and each team keeps the
    # whole GPU within its slices): this script again per shape, into OUT/<shape>, then one tarball.
    # GIN_SPLIT=N: N processes per shape, each a share of the EP repeats under its own seeds (the
    # first also runs Gin.* and the limit cases): the runs wait mostly on the emulation's delays
    # and host work, so more of them at once take little longer each.
    pids=() dirs=()
    split=${GIN_SPLIT:-1} all=${GIN_EP_SEEDS:-${GIN_SEEDS:-20}}
    for shape in ${GIN_SHAPES:-2x2 2x4 4x2 8x1}; do
      for k in $(seq 0 $((split - 1))); do
        n=$((all / split + (k < all % split ? 1 : 0)))
        [ "$n" -gt 0 ] || [ "$k" = 0 ] || continue  # the first runs Gin.* even with no EP repeats
        dir=$shape
        [ "$split" -gt 1 ] && dir=$shape.$k
        first=$([ "$k" = 0 ] && echo 1 || echo 0)
        step "gin at $shape in a process of its own, $n EP repeats (log: gin_shapes.tgz, $dir/run.log)"
        # Several processes share the GPU in time slices: a device wait's bound grows with them.
        TILEWIRE_TIMEOUT_MS=$((${TILEWIRE_TIMEOUT_MS:-3000} * (split > 1 ? 3 : 1))) \
          OUT=$OUT/$dir GIN_SHAPES=$shape GIN_PARALLEL=0 GIN_ONE_NODE=0 GIN_MEMCHECK=0 GIN_BEFORE_TAR= GIN_SUITE=$first \
          GIN_EP_SEEDS=$n GIN_EP_LIMITS_SEEDS=$([ "$first" = 1 ] && echo "${GIN_EP_LIMITS_SEEDS:-1}" || echo 0) \
          GIN_EP_SEED0=$((${GIN_EP_SEED0:-1} + 20000 * k)) bash "$0" gin >/dev/null 2>&1 &
        pids+=($!) dirs+=("$dir")
      done
    done
    for pid in "${pids[@]}"; do wait "$pid" || FAIL=1; done
    for dir in "${dirs[@]}"; do
      { echo "##### $dir"; grep -E '^(===|!!!)' "$OUT/$dir/run.log"; } | tee -a "$LOG"
      grep -hE '^\[  (PASSED|FAILED)  \]' "$OUT/$dir/run.log" | sort | uniq -c | tee -a "$LOG"
    done
    if [ "${#dirs[@]}" -eq 0 ]; then
      echo "!!! gin: no shape ran (GIN_SHAPES empty?)" | tee -a "$LOG"
      FAIL=1
    else
      (cd "$OUT" && tar czf gin_shapes.tgz "${dirs[@]}" && rm -rf "${dirs[@]}") ||
        { echo "!!! gin: could not write gin_shapes.tgz" | tee -a "$LOG"; FAIL=1; }
    fi
  else
    SEEDS=${GIN_SEEDS:-20}
    # The EP kernels' GIN flush (EpGin.*) on the code before it: expected to fail there.
    if [ -f "${GIN_BEFORE_TAR:-/nonexistent}" ]; then
      mkdir -p /tmp/gin-before && tar xJf "$GIN_BEFORE_TAR" -C /tmp/gin-before
      d=$(ls -d /tmp/gin-before/*/ | head -1)
      step "EpGin.* on the code before the fix ($(tr '\n' ' ' <"$d/COMMIT")), 2 x 2: expected to FAIL"
      LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TEST_RANKS_PER_NODE=2 timeout 120 \
        "$d/bin/tilewire_gpu_tests" --gtest_filter='EpGin.*' >>"$LOG" 2>&1
      echo "=== before the fix: rc=$? (non-zero expected)" | tee -a "$LOG"
    fi
    for shape in ${GIN_SHAPES:-2x2 2x4 4x2 8x1}; do
      IFS=x read -r nodes per <<<"$shape"
      export TILEWIRE_TEST_VIRTUAL=$((nodes * per)) TILEWIRE_TEST_RANKS_PER_NODE=$per
      if [ "${GIN_SUITE:-1}" = 1 ]; then
        step "Gin.* tests, $nodes x $per (nodes x ranks per node), $SEEDS chaos seeds in the test"
        TILEWIRE_TEST_GIN_SEEDS=$SEEDS run "${GIN_LIMIT:-300}" "$TESTS" --gtest_filter='Gin.*' \
          --gtest_output=json:"$OUT/gpu_tests_gin_${nodes}x$per.json"
      fi
      if [ "${GIN_EP:-1}" = 1 ]; then  # the device-API and EP tests (both modes, both payloads), one seed per repeat
        # The first GIN_EP_LIMITS_SEEDS repeats (default 1) with Ep.DispatchCombineMatchTheReference's
        # two limit cases, the others without them (TILEWIRE_TEST_EP_LIMITS=0: over a GiB per rank
        # through host memory), under seeds from GIN_EP_SEED0 + 1000 on.
        all=${GIN_EP_SEEDS:-$SEEDS} lim=${GIN_EP_LIMITS_SEEDS:-1}
        [ "$lim" -gt "$all" ] && lim=$all
        [ "$lim" -lt 0 ] && lim=0
        step "${GIN_EP_FILTER:-DeviceApi.*:Ep.*:EpGin.*}, $nodes x $per, $all chaos seeds (one per repeat; the EP limit cases under $lim)"
        [ "$lim" -gt 0 ] &&
          TILEWIRE_TEST_GIN_CHAOS=${GIN_EP_SEED0:-1} run "${GIN_EP_LIMIT:-400}" "$TESTS" --gtest_filter="${GIN_EP_FILTER:-DeviceApi.*:Ep.*:EpGin.*}" \
            --gtest_repeat="$lim"
        [ "$all" -gt "$lim" ] &&
          TILEWIRE_TEST_EP_LIMITS=0 TILEWIRE_TEST_GIN_CHAOS=$((${GIN_EP_SEED0:-1} + 1000)) run "${GIN_EP_LIMIT:-400}" "$TESTS" \
            --gtest_filter="${GIN_EP_FILTER:-DeviceApi.*:Ep.*:EpGin.*}" --gtest_repeat=$((all - lim))
      fi
      unset TILEWIRE_TEST_VIRTUAL TILEWIRE_TEST_RANKS_PER_NODE
    done
    if [ "${GIN_ONE_NODE:-1}" = 1 ]; then
      step "GIN tests, one node of 4"
      TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TEST_GIN_SEEDS=2 run 300 "$TESTS" --gtest_filter='DeviceApi.*:Gin.*' \
        --gtest_output=json:"$OUT/gpu_tests_gin_1x4.json"
    fi
  fi
  if [ "${GIN_MEMCHECK:-1}" = 1 ]; then
    step "memcheck on the GIN tests, 2 x 2"
    TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TEST_RANKS_PER_NODE=2 TILEWIRE_TEST_GIN_SEEDS=${GIN_MEMCHECK_SEEDS:-2} \
      TILEWIRE_TIMEOUT_MS=60000 run "${GIN_MEMCHECK_LIMIT:-600}" compute-sanitizer --tool memcheck --error-exitcode 1 "$TESTS" \
      --gtest_filter="${GIN_MEMCHECK_FILTER:-DeviceApi.*:Gin.*:EpGin.*}"
  fi
fi

if [ "$MODE" = ep ]; then
  header
  # EP_BEFORE_FILTER (default EpHardening.*) on the code before its fixes (EP_BEFORE_TARS: tar.xz
  # files of such dists, each holding one folder with bin/, lib/ and COMMIT): expected to fail there.
  EP_BEFORE_FILTER=${EP_BEFORE_FILTER:-EpHardening.*}
  for tarball in ${EP_BEFORE_TARS:-}; do
    [ -f "$tarball" ] || { step "no $tarball: skipped"; continue; }
    x=$(mktemp -d) && tar xJf "$tarball" -C "$x"
    d=$(ls -d "$x"/*/ | head -1)
    for p in 0 2 4; do
      step "$EP_BEFORE_FILTER on the code before the fixes ($(tr '\n' ' ' <"$d/COMMIT")), $p virtual ranks: expected to FAIL"
      LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH TILEWIRE_TEST_VIRTUAL=$p timeout 120 "$d/bin/tilewire_gpu_tests" \
        --gtest_filter="$EP_BEFORE_FILTER" >>"$LOG" 2>&1
      echo "=== before the fixes, P = $p: rc=$? (non-zero expected)" | tee -a "$LOG"
    done
  done
  ep_tests
  : >"$OUT/bench_ep.jsonl"
  for ranks in ${EP_BENCH_RANKS-real 8}; do
    for mode in ht ll; do
      for pay in bf16 fp8; do
        tok=$([ $mode = ht ] && echo 4096 || echo 128)
        v=$([ $ranks = real ] && echo "" || echo "--virtual $ranks")
        [ $ranks != real ] && [ $mode = ht ] && tok=512  # 8 ranks' buffers on one GPU
        step "bench ep --mode $mode --payload $pay -t $tok $v"
        run 120 "$TW" bench ep --mode $mode --payload $pay -t $tok $v --json "$OUT/ep.json" && cat "$OUT/ep.json" >>"$OUT/bench_ep.jsonl"
      done
    done
  done
  rm -f "$OUT/ep.json"
  step "bench ep --mode ll -t 128 --trace: where the low-latency dispatch's time goes (per CTA)"
  run 60 "$TW" bench ep --mode ll -t 128 -R 3 --trace "$OUT/trace_ep_ll.json"
fi

if [ "$MODE" = ll ]; then
  header
  ep_tests
  for shape in ${LL_GIN_SHAPES:-}; do
    IFS=x read -r nodes per <<<"$shape"
    step "DeviceApi.*, Ep*, $nodes x $per nodes, ${LL_GIN_SEEDS:-2} chaos seeds (one per repeat)"
    TILEWIRE_TEST_VIRTUAL=$((nodes * per)) TILEWIRE_TEST_RANKS_PER_NODE=$per TILEWIRE_TEST_GIN_CHAOS=${LL_GIN_SEED0:-1} \
      run 200 "$TESTS" --gtest_filter='DeviceApi.*:Ep*' --gtest_repeat="${LL_GIN_SEEDS:-2}"
  done
  : >"$OUT/ep_ll_ceiling.jsonl"  # the row phase's floors in plain CUDA, at 1 rank's and 8 ranks' buffer spread
  for p in 1 8; do
    step "ep_ll_ceiling, P = $p"
    P=$p run 60 "$DIST/bin/ep_ll_ceiling" "$OUT/c.json" && cat "$OUT/c.json" >>"$OUT/ep_ll_ceiling.jsonl"
  done
  rm -f "$OUT/c.json"
  for tarball in ${LL_BEFORE_TAR:-}; do  # one or more, the oldest first
    [ -f "$tarball" ] || { step "no $tarball: skipped"; continue; }
    x=$(mktemp -d) && tar xJf "$tarball" -C "$x" && before="${before:-} $(ls -d "$x"/*/ | head -1)"
  done
  dists="${before:-} $DIST"
  : >"$OUT/bench_ll.jsonl"
  # ll_row DIST LABEL ROUND ARGS...: one `bench ep --mode ll` run of DIST's CLI, its JSON line
  # labelled (commit LABEL, round ROUND) into bench_ll.jsonl.
  ll_row() {
    local d=$1 label=$2 round=$3
    shift 3
    step "bench ep --mode ll $* ($label), round $round"
    LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH run 120 "$d/bin/tilewire" bench ep --mode ll "$@" --json "$OUT/ll.json" &&
      sed "s/^{/{\"commit\": \"$label\", \"round\": $round, /" "$OUT/ll.json" >>"$OUT/bench_ll.jsonl"
  }
  for round in $(seq 1 "${LL_ROUNDS:-1}"); do
    for args in "-t 128 --combine-probes" "-t 128 --payload fp8" "-t 256 --combine-probes" "-t 128 --routing skewed" \
      "-t 128 --virtual 8" "-t 128 --virtual 8 --payload fp8"; do
      for d in $dists; do
        # A dist whose bench has no --combine-probes (before 419b564) runs the row without it.
        a=$args
        LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH "$d/bin/tilewire" bench ep --help 2>&1 | grep -q -- --combine-probes ||
          a=${args/ --combine-probes/}
        ll_row "$d" "$(cat "$d/COMMIT")" "$round" $a
      done
    done
  done
  # The combine after the warp send (TILEWIRE_EP_LL_TMA=0) against after the copy-engine send
  # (1), this dist, in alternation: what the send's way of writing the rows leaves in the L2.
  for round in $(seq 1 "${LL_ROUNDS:-1}"); do
    for tokens in 128 256; do
      for tma in 0 1; do
        TILEWIRE_EP_LL_TMA=$tma ll_row "$DIST" "$(cat "$DIST/COMMIT") tma=$tma" "$round" -t "$tokens" --combine-probes
      done
    done
  done
  # The second kernel of each step launched early (TILEWIRE_EP_LL_EARLY=1) against at the first
  # one's end (0, the default), this dist, in alternation: the dispatch, and the combine whose
  # send copies y in (the probes' "y copied" row; the bench's own combine rows pass y in the
  # combine block, whose one-CTA send lets combine_recv launch early either way).
  for round in $(seq 1 "${LL_ROUNDS:-1}"); do
    for args in "-t 128 --combine-probes" "-t 128 --payload fp8" "-t 256 --combine-probes"; do
      for early in 0 1; do
        TILEWIRE_EP_LL_EARLY=$early ll_row "$DIST" "$(cat "$DIST/COMMIT") early=$early" "$round" $args
      done
    done
  done
  rm -f "$OUT/ll.json"
  step "bench ep --mode ll -t 128 --trace"
  run 60 "$TW" bench ep --mode ll -t 128 -R 3 --trace "$OUT/trace_ll.json"
  # The high-throughput mode's profile: one traced call at 1 real and 8 virtual ranks (the
  # timelines print in the log).
  for v in "" "--virtual 8"; do
    step "bench ep --mode ht -t 4096 $v --trace"
    run 120 "$TW" bench ep --mode ht -t 4096 $v -R 3 --trace "$OUT/trace_ht.json"
  done
  rm -f "$OUT/trace_ht.json"
fi
