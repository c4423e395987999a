#!/usr/bin/env bash
# one device call at dist-n/COMMIT: compute-sanitizer memcheck of the grouped GEMM and MoE tests at
# the real rank (the fused combine variants among them).
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
tar xJf probe/dist-n.tar.xz
DIST=$PWD/dist-n
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=120000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
{ nvidia-smi --query-gpu=name --format=csv,noheader; cat $DIST/COMMIT
timeout 170 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $DIST/bin/tilewire_gpu_tests \
  --gtest_filter='GroupedGemm*:Moe*' --gtest_output=json:$OUT/memcheck_tests.json; echo "rc=$?"
} > $OUT/memcheck.log 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED|rc=|^\[ *(OK|FAILED)" $OUT/memcheck.log | tail -20
