#!/usr/bin/env bash
# one device call at the library of 32ecddf: the fused tests and the GEMM tests at the real rank
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-b.tar.xz
DIST=$PWD/dist-b
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000
T=$DIST/bin/tilewire_gpu_tests
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
s "fused tests, the real GPU"
timeout 200 $T --gtest_filter='GemmAllReduce*:GemmReduceScatter.*:AllGatherGemm.*:GemmScatterGather.*' --gtest_output=json:$OUT/tests_real_fused.json >$OUT/tests_real_fused.log 2>&1
echo rc=$? >>$L; tail -3 $OUT/tests_real_fused.log >>$L
s "GEMM tests, the real GPU"
timeout 330 $T --gtest_filter='Gemm.*' --gtest_output=json:$OUT/tests_real_gemm.json >$OUT/tests_real_gemm.log 2>&1
echo rc=$? >>$L; tail -3 $OUT/tests_real_gemm.log >>$L
s end
