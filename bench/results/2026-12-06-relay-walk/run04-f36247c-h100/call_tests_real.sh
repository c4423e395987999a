#!/usr/bin/env bash
# one device call: the fused ops' and the GEMM's tests at the real rank; the fused tests at 4 virtual ranks (defaults)
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-l2.tar.xz
DIST=$PWD/dist-l2
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000
T=$DIST/bin/tilewire_gpu_tests
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
s tests virtual 4
TILEWIRE_TEST_VIRTUAL=4 timeout 120 $T --gtest_filter='GemmAllReduce*:GemmReduceScatter*:AllGatherGemm*:Trace*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
s tests real rank
timeout 420 $T --gtest_filter='GemmAllReduce*:GemmReduceScatter*:AllGatherGemm*:GemmScatterGather*:Trace*:Gemm.*' >>$L 2>&1; echo rc=$? >>$L
s end
