#!/usr/bin/env bash
# one device call: the all-reduce acceptance at 4 and 2 virtual ranks against (g), brief and after --warm-s 3, twice
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-l2.tar.xz
DIST=$PWD/dist-l2
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000
TW=probe/tilewire-new
L=$OUT/log.txt; J=$OUT/bench.jsonl; : >$J
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
for rep in 1 2; do for p in 4 2; do for w in 0 3; do
  s acceptance P=$p warm-s $w rep $rep
  timeout 100 $TW bench gemm-allreduce --virtual $p --sweep acceptance --path fused -R 3 --iters 5 --warm-s $w --json $OUT/one.json >>$L 2>&1; echo rc=$? >>$L
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' $OUT/one.json "gemm-allreduce acceptance P=$p warm-s $w rep $rep" >>$J
  rm -f $OUT/one.json
done; done; done
python3 scripts/accept_table.py $J >$OUT/accept_table.md 2>&1
s end
