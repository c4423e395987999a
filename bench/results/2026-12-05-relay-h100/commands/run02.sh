#!/usr/bin/env bash
# Call F (~8 min): where the reduce-scatter relay's time goes at 4 virtual ranks on the 70B attention
# output (K_local 2048), which the walk in bands did not help: traces and rows with the relay as
# built, flags only (no pushes), unpaced; the same at P = 2 and on 8B FFN for contrast; the plain
# GEMM's plans at that budget; then the status sweeps of the merged build (ag-gemm Llama, the
# all-reduce acceptance sweep at P = 2 and 4).
cd "$(dirname "$0")/.."
[ -x dist-cand/bin/tilewire ] || tar xJf dist-cand-pack/dist-cand.tar.xz
W=/tmp/f; mkdir -p $W
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
d=$PWD/dist-cand c=$(cat dist-cand/COMMIT)
export LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $W/card.txt
b() {  # b <label> <limit> args...
  local label=$1 lim=$2; shift 2
  echo "=== $label: tilewire bench $*" | tee -a $W/f.log
  timeout $lim $d/bin/tilewire bench "$@" --json $W/one.json >>$W/f.log 2>&1 &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' $W/one.json "$label" >>$W/f.jsonl
  rm -f $W/one.json
}
b "rs P=4 attn relay" 60 gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k 2048 -R 3 --iters 5 --trace $W/rs4_attn.json
TILEWIRE_RELAY_NO_PUSH=1 b "rs P=4 attn flags only" 60 gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k 2048 -R 3 --iters 5 --trace $W/rs4_attn_nopush.json
TILEWIRE_RELAY_PACE_PCT=0 b "rs P=4 attn unpaced" 60 gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k 2048 -R 3 --iters 5
TILEWIRE_RELAY_CONSUMER_ROWS=0 b "rs P=4 attn consumer rows 0" 60 gemm-rs --virtual 4 -m 4096 -n 8192 -k 2048 -R 3 --iters 5
TILEWIRE_RELAY_CONSUMER_ROWS=64 b "rs P=4 attn consumer rows 64" 60 gemm-rs --virtual 4 -m 4096 -n 8192 -k 2048 -R 3 --iters 5
b "rs P=4 8B FFN relay" 60 gemm-rs --virtual 4 -m 4096 -n 4096 -k 3584 -R 3 --iters 5 --trace $W/rs4_ffn8.json
b "rs P=2 attn relay" 60 gemm-rs --virtual 2 -m 4096 -n 8192 -k 4096 -R 3 --iters 5 --trace $W/rs2_attn.json
b "gemm plans P=4 attn" 90 gemm --virtual 4 -m 4096 -n 8192 -k 2048 -R 3 \
  --plans 'auto;hook;tile=128x256,mode=heuristic;tile=256x160,mode=streamk;tile=256x160c2,mode=dp;tile=128x128pp'
python3 scripts/trace_split.py $W/rs4_attn.json $W/rs4_attn_nopush.json $W/rs4_ffn8.json $W/rs2_attn.json 2>&1 | tee $W/split.txt
grep -E '^===|\((a|e|g|h|l)\)|^#|plan|best' $W/f.log | head -150
for p in 2 4; do
  b "ag-gemm llama P=$p" 150 ag-gemm --virtual $p --sweep llama -R 3 --iters 5
  b "gemm-allreduce acceptance P=$p" 150 gemm-allreduce --virtual $p --sweep acceptance -R 3 --iters 5
done
python3 probe/rs_table.py $W/f.jsonl 2>/dev/null | head -5
(cd $W && tar czf $OUT/f.tgz .)
