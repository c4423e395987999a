#!/usr/bin/env bash
# one device call: the all-reduce acceptance and grid sweeps at 2 and 4 virtual ranks, (g) tilewire GEMM alone, (a) and (c) on the rank SMs
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
for rep in 1 2; do for p in 2 4; do
  for sw in acceptance grid; do
    s gemm-allreduce $sw P=$p rep $rep
    timeout 200 $TW bench gemm-allreduce --virtual $p --sweep $sw --path fused -R 3 --iters 5 --json $OUT/one.json >>$L 2>&1; echo rc=$? >>$L
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' $OUT/one.json "gemm-allreduce $sw P=$p rep $rep" >>$J
    rm -f $OUT/one.json
  done
done; done
python3 scripts/accept_table.py $J >$OUT/accept_table.md 2>&1
s end
