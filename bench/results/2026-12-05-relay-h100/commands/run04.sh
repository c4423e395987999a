#!/usr/bin/env bash
# Call H (~9 min): the relay's comm warp sending its rows by bulk copies (dist-bulk, the default
# TILEWIRE_RELAY_BULK_PUSH=1) against its 16-byte stores (=0, the kernel before) and the pull, on
# the shapes traced before; a trace; the Llama gemm-rs and all-reduce acceptance sweeps at P = 2
# and 4 (bulk, stores, pull; two rounds in alternation); then the fused tests at the real rank and
# 2, 3, 4, 8 virtual ranks and memcheck at 4 under the default.
cd "$(dirname "$0")/.."
[ -x dist-bulk/bin/tilewire ] || tar xJf dist-bulk-pack/dist-bulk.tar.xz
W=/tmp/h; mkdir -p $W
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $W/card.txt
b() {  # b <dist> <label> <limit> <env> args...
  local dn=$1 d=$PWD/dist-$1 label=$2 lim=$3 e=$4; shift 4
  local c=$(cat $d/COMMIT)
  echo "=== $label ($c; $e): tilewire bench $*" | tee -a $W/h.log
  env $e LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout $lim $d/bin/tilewire bench "$@" --json $W/one.json >>$W/h.log 2>&1 &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; d["env"]=sys.argv[3]; d["dist"]=sys.argv[4]; print(json.dumps(d))' $W/one.json "$label" "$e" "$dn" >>$W/h.jsonl
  rm -f $W/one.json
}
V=("bulk X=0" "bulk TILEWIRE_RELAY_BULK_PUSH=0" "bulk TILEWIRE_RELAY_PULL=1" "bulk TILEWIRE_RELAY_PACE_PCT=0")
for v in "${V[@]}"; do
  set -- $v; d=$1; shift; e="$*"
  b $d "rs P=4 attn" 60 "$e" gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k 2048 -R 3 --iters 5
  b $d "rs P=4 8B FFN" 60 "$e" gemm-rs --virtual 4 -m 4096 -n 4096 -k 3584 -R 3 --iters 5
  b $d "rs P=2 attn" 60 "$e" gemm-rs --virtual 2 -m 4096 -n 8192 -k 4096 -R 3 --iters 5
  b $d "ar P=4 relay" 60 "$e" gemm-allreduce --virtual 4 -m 8192 -n 8192 -k 4096 -R 3 --iters 5
done
b bulk "rs P=4 attn traced" 60 "X=0" gemm-rs --virtual 4 -m 4096 -n 8192 -k 2048 -R 3 --iters 5 --trace $W/rs4_attn_bulk.json
python3 scripts/trace_split.py $W/rs4_attn_bulk.json | tee $W/split.txt | grep -A3 "rank 0"
t0=$SECONDS
for r in 1 2; do
  for v in "${V[@]:0:3}"; do
    set -- $v; d=$1; shift; e="$*"
    [ $((SECONDS - t0)) -lt 200 ] || { echo "!!! sweep budget spent: $r $v" | tee -a $W/h.log; continue; }
    for p in 2 4; do
      b $d "sweep rs llama P=$p r$r" 60 "$e" gemm-rs --virtual $p --sweep llama -R 3 --iters 5
      b $d "sweep ar acceptance P=$p r$r" 60 "$e" gemm-allreduce --virtual $p --sweep acceptance -R 3 --iters 5
    done
  done
done
python3 probe/g_table.py $W/h.jsonl
DIST=$PWD/dist-bulk OUT=$W/eng ENGINE_STEPS="tests memcheck" timeout 300 bash scripts/gpu_run.sh engine
grep -E '^(===|!!!)|PASSED|FAILED|ERROR SUMMARY' $W/eng/run.log | tail -14
(cd $W && tar czf $OUT/h.tgz .)
