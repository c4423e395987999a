#!/usr/bin/env bash
# Next GPU call (~7 min): the candidate branch next-candidate (gemm_allreduce decided once; the
# reduce-scatter walk in bands of scatter_swizzle): bench gemm-rs Llama at 2 and 4 virtual ranks
# with the band forced to 1 (the walk on main), the rule's, and 8, in alternation (3 rounds), then
# the candidate's fused tests at the real rank and 2, 3, 4, 8 virtual ranks, then memcheck at 4.
cd "$(dirname "$0")/.."
[ -x dist-fence/bin/tilewire ] || tar xJf dist-fence-pack/dist-fence.tar.xz
[ -x dist-cand/bin/tilewire ] || tar xJf dist-cand-pack/dist-cand.tar.xz
mkdir -p /tmp/c
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=3000
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
t0=$SECONDS
for r in 1 2 3; do
  for p in 2 4; do
    for w in 1 0 8; do
      [ $((SECONDS - t0)) -lt 220 ] || { echo "!!! bench budget spent: round $r P=$p band $w skipped" | tee -a /tmp/c/rs.log; continue; }  # TILEWIRE_RS_SWIZZLE: 1 the walk before, 0 the candidate's rule, 8 wider still
      d=dist-cand c=$(cat dist-cand/COMMIT)
      echo "=== gemm-rs llama P=$p ($c, TILEWIRE_RS_SWIZZLE=$w), round $r" | tee -a /tmp/c/rs.log
      TILEWIRE_RS_SWIZZLE=$w LD_LIBRARY_PATH=$PWD/$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout 60 $d/bin/tilewire \
        bench gemm-rs --virtual $p --sweep llama -R 3 --iters 5 --json /tmp/c/one.json >>/tmp/c/rs.log 2>&1 &&
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; d["round"]=int(sys.argv[3]); print(json.dumps(d))' \
          /tmp/c/one.json "$c P=$p rs_swizzle=$w" $r >>/tmp/c/bench_rs.jsonl
    done
  done
done
python3 probe/rs_table.py /tmp/c/bench_rs.jsonl
DIST=$PWD/dist-cand OUT=/tmp/c/eng ENGINE_STEPS="tests memcheck" timeout 330 bash scripts/gpu_run.sh engine
grep -E '^(===|!!!)|PASSED|FAILED|ERROR SUMMARY' /tmp/c/eng/run.log | tail -20
(cd /tmp/c && tar czf "$OUT/cand.tgz" .)
