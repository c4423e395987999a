#!/usr/bin/env bash
# one device call: the GEMM alone and the relay timed briefly (5 calls x 3 repeats, as the acceptance sweep) and sustained (200 calls x 5 / --warm-s 4), back to back
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-l2.tar.xz
DIST=$PWD/dist-l2
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000
TW=$DIST/bin/tilewire
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
for rep in 1 2; do
  s gemm brief; timeout 60 $TW bench gemm --virtual 4 -m 8192 -n 8192 -k 4096 --iters 5 -R 3 >>$L 2>&1
  s relay brief; timeout 60 $TW bench gemm-allreduce --virtual 4 --algo relay --path fused --only-fused -m 8192 -n 8192 -k 4096 --iters 5 -R 3 >>$L 2>&1
  s gemm sustained; timeout 60 $TW bench gemm --virtual 4 -m 8192 -n 8192 -k 4096 --iters 200 -R 5 >>$L 2>&1
  s relay sustained; timeout 60 $TW bench gemm-allreduce --virtual 4 --algo relay --path fused --only-fused -m 8192 -n 8192 -k 4096 --iters 20 -R 5 --warm-s 4 >>$L 2>&1
done
s end
