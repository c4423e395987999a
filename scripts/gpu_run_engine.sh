# scripts/gpu_run_engine.sh — the `engine` mode of scripts/gpu_run.sh (the fused ops against the
# GEMM alone on a virtual team), sourced by it: its helpers (run, step, bench_json, header) and
# variables (OUT, LOG, DIST, TW, TESTS) are the caller's. Not run on its own.
  header
  STEPS=" ${ENGINE_STEPS:-owner relay relay4 gemmbudget ag tests memcheck accept} "
  has() { [[ $STEPS == *" $1 "* ]]; }
  J=$OUT/bench_engine.jsonl
  : >"$J"
  bench() { bench_json "$J" "$@"; }  # bench <limit> <label> args...: one JSON line per run, labelled
  if has owner; then
    for p in 2 3 4; do
      bench 120 "owner P=$p" gemm-allreduce --virtual $p --algo owner --path fused -m 8192 -n 8192 -k 4096 -R 3 --iters 5 \
        --trace "$OUT/trace_owner_p$p.json"
    done
    TILEWIRE_OWNER_PLAIN=1 TILEWIRE_OWNER_FINAL_POLL_ALL=1 bench 150 "owner P=4 plain owners, every thread polls" \
      gemm-allreduce --virtual 4 --algo owner --path fused -m 8192 -n 8192 -k 4096 -R 3 --iters 3 --trace "$OUT/trace_owner_p4_before.json"
    TILEWIRE_OWNER_PLAIN=1 bench 150 "owner P=4 plain owners" gemm-allreduce --virtual 4 --algo owner --path fused \
      -m 8192 -n 8192 -k 4096 -R 3 --iters 3
    TILEWIRE_OWNER_FINAL_POLL_ALL=1 bench 150 "owner P=4 every thread polls" gemm-allreduce --virtual 4 --algo owner \
      --path fused -m 8192 -n 8192 -k 4096 -R 3 --iters 3
  fi
  if has relay; then
    for p in 3 4; do
      bench 120 "relay P=$p" gemm-allreduce --virtual $p --algo relay --path fused -m 8192 -n 8192 -k 4096 -R 3 --iters 5 \
        --trace "$OUT/trace_relay_p$p.json"
    done
    for p in 2 4; do  # the reduce-scatter's two fused kernels on the 70B attention output and FFN down shapes
      for k in owner relay; do
        [ $k = owner ] && export TILEWIRE_RS_OWNER=1 || unset TILEWIRE_RS_OWNER
        bench 150 "gemm-rs P=$p $k" gemm-rs --virtual $p -m 4096,16384 -n 8192 -k $((8192 / p)) -R 3 --iters 5
      done
      unset TILEWIRE_RS_OWNER
    done
  fi
  if has relay4; then  # the relay at 4 virtual ranks, back to back, with and without its trace
    TILEWIRE_TIMEOUT_MS=20000 bench 120 "relay P=4 untraced" gemm-allreduce --virtual 4 --algo relay --path fused \
      -m 8192 -n 8192 -k 4096 -R 3 --iters 5
    TILEWIRE_TIMEOUT_MS=20000 bench 120 "relay P=4" gemm-allreduce --virtual 4 --algo relay --path fused \
      -m 8192 -n 8192 -k 4096 -R 3 --iters 5 --trace "$OUT/trace_relay_p4.json"
  fi
  if has gemmbudget; then  # the plain GEMM on a virtual rank's SM budget, every rank at once, under each candidate plan
    PLANS=${ENGINE_PLANS:-'auto;hook;tile=128x128pp;tile=256x160c2,mode=dp;tile=256x160,mode=streamk;tile=128x256,mode=heuristic'}
    for p in 2 4; do
      bench 240 "gemm plans acceptance P=$p" gemm --virtual $p --sweep acceptance -R 3 --plans "$PLANS"
    done
    bench 150 "gemm plans ag 70B FFN P=4" gemm --virtual 4 -m 16384 -n 7168 -k 8192 -R 3 --plans "$PLANS"
    bench 150 "gemm plans rs 70B FFN P=4" gemm --virtual 4 -m 16384 -n 8192 -k 7168 -R 3 --plans "$PLANS"
  fi
  if has ag; then
    for i in 1 2; do
      bench 120 "ag-gemm P=2 run $i" ag-gemm --virtual 2 -m 8192 -n 4096 -k 7168 -R 3 --iters 5 --trace "$OUT/trace_ag_p2_$i.json"
    done
    bench 120 "ag-gemm P=2 decode traced" ag-gemm --virtual 2 -m 128 -n 14336 -k 8192 -R 3 --iters 10 \
      --trace "$OUT/trace_ag_decode_p2.json"
    for p in 2 4; do  # the 70B FFN up shapes, with the push's default CTAs (2 on a virtual team), 4 and 8
      bench 120 "ag-gemm P=$p 70B FFN up" ag-gemm --virtual $p -m 8192,16384 -n $((28672 / p)) -k 8192 -R 3 --iters 5
      for g in 4 8; do
        TILEWIRE_AG_PUSH_CTAS=$g bench 120 "ag-gemm P=$p 70B FFN up, push $g CTAs" ag-gemm --virtual $p -m 8192,16384 \
          -n $((28672 / p)) -k 8192 -R 3 --iters 5
      done
    done
  fi
  if has decodem; then  # the plain GEMM at every M from 1 to 256 (one real rank) against cuBLASLt
    bench 300 "gemm decode-m" gemm --sweep decode-m -R 3
  fi
  if has decodepick; then  # the plain GEMM's candidate plans at M between the decode sweep's points
    # (DECODEPICK_M), N x K = 8192 x 8192 and 14336 x 4096, bf16, one real rank; then the tests
    # of the tiles among them
    run 300 "$TESTS" --gtest_filter='Gemm.DecodeShapesOnThePingpongTiles' \
      --gtest_output=json:"$OUT/gpu_tests_decodepick.json"
    PICK="auto;tile=swap64x64;tile=swap128x128pp;tile=swap128x64pp"
    PICK+=";tile=128x256,mode=heuristic;tile=128x128pp;tile=128x128,mode=heuristic"
    for nk in 8192x8192 14336x4096; do
      IFS=x read -r n k <<<"$nk"
      for m in ${DECODEPICK_M:-40 65 80 96 112 129 144 160 176 192 208 224 240}; do
        bench 60 "gemm pick $m x $nk" gemm --dtype bf16 -m "$m" -n "$n" -k "$k" -R 3 --plans "${DECODEPICK_PLANS:-$PICK}"
      done
    done
  fi
  if has agsplit; then  # where the all-gather's gated GEMM loses against the GEMM alone: the same
    # hook kernel on the same SM budget at the gated GEMM's band (swizzle 1) and the plain GEMM's (4),
    # next to the fused op, in one run
    for p in 2 4; do
      n=$((8192 / p))
      for z in 1 4; do
        bench 120 "gemm hook P=$p swizzle $z" gemm --virtual $p -m 8192 -n $n -k 7168 --swizzle $z -R 3 --plans "auto;hook"
      done
      bench 120 "ag-gemm P=$p agsplit" ag-gemm --virtual $p -m 8192 -n $n -k 7168 -R 3 --iters 5
    done
  fi
  if has agswizzle; then  # the gated GEMM's band of row units (TILEWIRE_AG_SWIZZLE; default 1)
    for p in 2 4; do
      for z in 1 4 8; do
        TILEWIRE_AG_SWIZZLE=$z bench 120 "ag-gemm llama P=$p swizzle $z" ag-gemm --virtual $p --sweep llama -R 3 --iters 5
      done
    done
  fi
  if has split; then  # bench_tp's rows (h)-(k) beside (a), (g): the lockstep basis, the fused op without
    # A_gathered, a pull gather alone and followed by the GEMM; gemm-rs and ag-gemm at 2 and 4
    # virtual ranks, Llama and decode shapes, and ag-gemm 4096^3 at the real rank
    for p in 2 4; do
      bench 200 "split ag-gemm llama P=$p" ag-gemm --virtual $p --sweep llama -R 3 --iters 5
      bench 120 "split ag-gemm decode P=$p" ag-gemm --virtual $p -m 16,64,128,256 -n $((28672 / p)) -k 8192 -R 3 --iters 10
      bench 200 "split gemm-rs llama P=$p" gemm-rs --virtual $p --sweep llama -R 3 --iters 5
      bench 120 "split gemm-rs decode P=$p" gemm-rs --virtual $p -m 16,64,128,256 -n 8192 -k $((8192 / p)) -R 3 --iters 10
    done
    bench 120 "split ag-gemm 4096^3 P=1" ag-gemm -m 4096 -n 4096 -k 4096 -R 3 --iters 10
  fi
  if has agaccept; then  # the all-gather's rows of accept alone
    for p in 2 4; do
      bench 200 "ag-gemm llama P=$p" ag-gemm --virtual $p --sweep llama -R 3 --iters 5
      bench 120 "ag-gemm decode P=$p" ag-gemm --virtual $p -m 16,64,128,256 -n $((28672 / p)) -k 8192 -R 3 --iters 10
    done
    bench 120 "ag-gemm 4096^3 P=1" ag-gemm -m 4096 -n 4096 -k 4096 -R 3 --iters 10
  fi
  if has agpush; then  # the all-gather's push design (TILEWIRE_AG_PUSH=1) on accept's all-gather rows
    for p in 2 4; do
      TILEWIRE_AG_PUSH=1 bench 200 "ag-gemm llama P=$p push design" ag-gemm --virtual $p --sweep llama -R 3 --iters 5
      TILEWIRE_AG_PUSH=1 bench 120 "ag-gemm decode P=$p push design" ag-gemm --virtual $p -m 16,64,128,256 \
        -n $((28672 / p)) -k 8192 -R 3 --iters 10
    done
  fi
  if has gemmaccept; then  # the plain GEMM against cuBLASLt, one real rank: acceptance and decode sweeps
    for dt in bf16 fp16; do
      bench 200 "gemm acceptance $dt" gemm --dtype $dt --sweep acceptance -R 3
    done
    bench 200 "gemm decode bf16" gemm --dtype bf16 --sweep decode -R 3
  fi
  if has othertests; then  # every other GPU test: the real GEMM tests at the real rank, the rest at VIRTUAL_P
    OTHER='-Gemm.*:GemmAllReduce*:GemmReduceScatter.*:AllGatherGemm.*:GemmScatterGather.*'
    step "GEMM tests, the real GPU"
    run 280 "$TESTS" --gtest_filter='Gemm.*' --gtest_output=json:"$OUT/t.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"label": "gemm tests P=0", "tests": d["tests"], "failures": d["failures"], "disabled": d.get("disabled", 0)}))' \
      "$OUT/t.json" >>"$J" 2>/dev/null
    for p in ${OTHER_P:-0 2 4 8}; do
      step "the other tests, $p virtual ranks (0: the real GPU)"
      TILEWIRE_TEST_VIRTUAL=$p run 200 "$TESTS" --gtest_filter="$OTHER" --gtest_output=json:"$OUT/t.json"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"label": "other tests P=" + sys.argv[2], "tests": d["tests"], "failures": d["failures"], "disabled": d.get("disabled", 0)}))' \
        "$OUT/t.json" "$p" >>"$J" 2>/dev/null
    done
    rm -f "$OUT/t.json"
  fi
  if has tests; then
    FUSED_TESTS=${FUSED_FILTER:-'GemmAllReduce*:GemmReduceScatter.*:AllGatherGemm.*:GemmScatterGather.*'}
    for p in ${VIRTUAL_P:-0 2 3 4 8}; do
      step "fused tests, $p virtual ranks (0: the real GPU)"
      TILEWIRE_TEST_VIRTUAL=$p run 240 "$TESTS" --gtest_filter="$FUSED_TESTS" --gtest_output=json:"$OUT/t.json"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"label": "tests P=" + sys.argv[2], "tests": d["tests"], "failures": d["failures"], "disabled": d.get("disabled", 0)}))' \
        "$OUT/t.json" "$p" >>"$J" 2>/dev/null
      rm -f "$OUT/t.json"
    done
  fi
  if has memcheck; then
    step "memcheck on the fused tests, 4 virtual ranks"
    TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 run 400 compute-sanitizer --tool memcheck --report-api-errors no \
      --error-exitcode 9 "$TESTS" --gtest_filter="${MEMCHECK_FILTER:-GemmAllReduce.*:GemmReduceScatter.*:AllGatherGemm.*}"
  fi
  if has relayknobs; then  # the relay's push, split by knob at 4 virtual ranks, after --warm-s, RELAYKNOBS_ROUNDS rounds:
    # the consumers' rows of each tile (TILEWIRE_RELAY_CONSUMER_ROWS 16, the default, or 0: the comm warp's
    # bulk copies take them all), the pacing (TILEWIRE_RELAY_PACE_PCT 60, the default, or 0), the
    # padded slots (TILEWIRE_RELAY_PADDED_SLOTS 0, the default, or 1) and flags only
    # (TILEWIRE_RELAY_NO_PUSH), after the fused tests on the padded slots at 4 and 3 virtual ranks
    for p in ${RELAYKNOBS_TEST_P:-4 3}; do
      step "fused tests, padded slots, $p virtual ranks"
      TILEWIRE_RELAY_PADDED_SLOTS=1 TILEWIRE_TEST_VIRTUAL=$p run 200 "$TESTS" \
        --gtest_filter='GemmAllReduce*:GemmReduceScatter.*:GemmScatterGather.*' --gtest_output=json:"$OUT/t.json"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"label": "tests padded P=" + sys.argv[2], "tests": d["tests"], "failures": d["failures"], "disabled": d.get("disabled", 0)}))' \
        "$OUT/t.json" "$p" >>"$J" 2>/dev/null
      rm -f "$OUT/t.json"
    done
    # RELAYKNOBS: "rows pace padded no_push" per variant; no_push 1 is the flags-only floor (its
    # results are wrong by design: nothing is summed)
    KNOBS=${RELAYKNOBS:-"16 60 0 0;16 60 1 0;16 0 1 0;0 0 1 0;16 60 0 1"}
    for ((r = 1; r <= ${RELAYKNOBS_ROUNDS:-1}; ++r)); do  # ~5 minutes a round
      IFS=';' read -ra KV <<<"$KNOBS"
      for kv in "${KV[@]}"; do
        read -r c pp ps np <<<"$kv"
        TILEWIRE_RELAY_CONSUMER_ROWS=$c TILEWIRE_RELAY_PACE_PCT=$pp TILEWIRE_RELAY_PADDED_SLOTS=$ps \
          TILEWIRE_RELAY_NO_PUSH=$np bench 120 "gemm-rs llama P=4 rows $c pace $pp padded $ps nopush $np round $r" \
          gemm-rs --virtual 4 --sweep llama -R 3 --iters 5 --warm-s 2
        TILEWIRE_RELAY_CONSUMER_ROWS=$c TILEWIRE_RELAY_PACE_PCT=$pp TILEWIRE_RELAY_PADDED_SLOTS=$ps \
          TILEWIRE_RELAY_NO_PUSH=$np bench 120 "gemm-allreduce acceptance P=4 rows $c pace $pp padded $ps nopush $np round $r" \
          gemm-allreduce --virtual 4 --sweep acceptance --path fused -R 3 --iters 5 --warm-s 3
      done
    done
  fi
  if has accept; then  # the acceptance sweeps of the fused ops: virtual P = 2 and 4, one real rank, decode
    # Every shape after --warm-s (its rows in turn, untimed, at the GPU's power limit:
    # rows timed briefly spread 2-3x as much between rounds, docs/fused_gemm.md); ACCEPT_WARM_S
    # overrides the seconds per shape (acceptance 3, grid and Llama 2, decode 1).
    W=${ACCEPT_WARM_S:-}
    for p in 2 4; do
      bench 200 "gemm-allreduce acceptance P=$p" gemm-allreduce --virtual $p --sweep acceptance --path fused -R 3 --iters 5 \
        --warm-s ${W:-3}
      bench 200 "gemm-allreduce grid P=$p" gemm-allreduce --virtual $p --sweep grid --path fused -R 3 --iters 5 --warm-s ${W:-2}
      bench 200 "gemm-rs llama P=$p" gemm-rs --virtual $p --sweep llama -R 3 --iters 5 --warm-s ${W:-2}
      bench 200 "ag-gemm llama P=$p" ag-gemm --virtual $p --sweep llama -R 3 --iters 5 --warm-s ${W:-2}
      bench 200 "gemm-allreduce decode P=$p" gemm-allreduce --virtual $p --sweep decode --path fused -R 3 --iters 10 \
        --warm-s ${W:-1}
      bench 120 "gemm-rs decode P=$p" gemm-rs --virtual $p -m 16,64,128,256 -n 8192 -k $((8192 / p)) -R 3 --iters 10 \
        --warm-s ${W:-1}
      bench 120 "ag-gemm decode P=$p" ag-gemm --virtual $p -m 16,64,128,256 -n $((28672 / p)) -k 8192 -R 3 --iters 10 \
        --warm-s ${W:-1}
    done
    bench 200 "gemm-allreduce acceptance P=1" gemm-allreduce --sweep acceptance --path fused -R 3 --iters 10 \
      --warm-s ${W:-3}
    bench 120 "gemm-allreduce 4096^3 P=1" gemm-allreduce -m 4096 -n 4096 -k 4096 --path fused -R 3 --iters 10 \
      --warm-s ${W:-2}
    bench 120 "gemm-rs 4096^3 P=1" gemm-rs -m 4096 -n 4096 -k 4096 -R 3 --iters 10 --warm-s ${W:-2}
    bench 120 "ag-gemm 4096^3 P=1" ag-gemm -m 4096 -n 4096 -k 4096 -R 3 --iters 10 --warm-s ${W:-2}
  fi
  (cd "$OUT" && ls trace_*.json >/dev/null 2>&1 && tar czf traces_engine.tgz trace_*.json && rm -f trace_*.json)
