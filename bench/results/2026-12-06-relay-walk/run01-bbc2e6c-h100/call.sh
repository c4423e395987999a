#!/usr/bin/env bash
# one device call: main's MoE tests (shared setup, never run), relay traces at P=2/4, acceptance with/without pushes
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-main.tar.xz
DIST=$PWD/dist-main
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=5000
TW=$DIST/bin/tilewire; T=$DIST/bin/tilewire_gpu_tests
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
s moe tests real
timeout 120 $T --gtest_filter='Moe*:GroupedGemm*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
s moe tests virtual 4
TILEWIRE_TEST_VIRTUAL=4 timeout 150 $T --gtest_filter='Moe*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
for p in 2 4; do
  s relay trace P=$p
  timeout 100 $TW bench gemm-allreduce --virtual $p --algo relay --path fused -m 8192 -n 8192 -k 4096 -R 3 --iters 5 \
    --trace $OUT/trace_relay_p$p.json >>$L 2>&1; echo rc=$? >>$L
  python3 scripts/trace_phases.py $OUT/trace_relay_p$p.json >>$L 2>&1
done
for np in 0 1; do
  s acceptance P=4 no_push=$np
  TILEWIRE_RELAY_NO_PUSH=$np timeout 150 $TW bench gemm-allreduce --virtual 4 --sweep acceptance --path fused -R 3 --iters 5 \
    --json $OUT/acc_p4_nopush$np.json >>$L 2>&1; echo rc=$? >>$L
done
gzip -9 $OUT/trace_relay_p*.json
s end
