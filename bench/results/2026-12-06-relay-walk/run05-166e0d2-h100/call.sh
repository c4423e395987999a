#!/usr/bin/env bash
# one device call: the all-reduce acceptance at 4 and 2 virtual ranks, (a) on the rank's SM budget (new CLI) against the CLI before
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-l2.tar.xz
DIST=$PWD/dist-l2
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
for p in 4 2; do
  for cli in new old; do
    TW=$DIST/bin/tilewire; [ $cli = new ] && TW=probe/tilewire-new
    s acceptance P=$p cli $cli
    timeout 100 $TW bench gemm-allreduce --virtual $p --sweep acceptance --path fused -R 3 --iters 5 --json $OUT/acc_p${p}_$cli.json >>$L 2>&1; echo rc=$? >>$L
  done
done
s end
