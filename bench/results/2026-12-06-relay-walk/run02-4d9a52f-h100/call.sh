#!/usr/bin/env bash
# one device call: clock-sync fix before/after, the relay's staggered walk (TILEWIRE_RELAY_ROUNDS) vs the segments, python tests
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-stagger.tar.xz; tar xJf probe/dist-main.tar.xz
DIST=$PWD/dist-stagger
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=5000
TW=$DIST/bin/tilewire; T=$DIST/bin/tilewire_gpu_tests
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
for p in 4 8; do
  s "clock sync test, virtual $p, BEFORE (main's library)"
  LD_LIBRARY_PATH=$PWD/dist-main/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=2000 TILEWIRE_TEST_VIRTUAL=$p timeout 100 $T --gtest_filter='Trace.*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
  s "clock sync test, virtual $p, after"
  TILEWIRE_TIMEOUT_MS=2000 TILEWIRE_TEST_VIRTUAL=$p timeout 100 $T --gtest_filter='Trace.*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
done
for pr in "4 4" "8 4" "3 8" "4 0"; do set -- $pr
  s tests GemmAllReduce* virtual $1 rounds $2
  TILEWIRE_RELAY_ROUNDS=$2 TILEWIRE_TEST_VIRTUAL=$1 timeout 120 $T --gtest_filter='GemmAllReduce*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
done
for rep in 1 2; do
  for r in 0 4 8; do
    s acceptance P=4 rounds $r rep $rep
    TILEWIRE_RELAY_ROUNDS=$r timeout 120 $TW bench gemm-allreduce --virtual 4 --sweep acceptance --path fused -R 3 --iters 5 \
      --json $OUT/acc_p4_r${r}_$rep.json >>$L 2>&1; echo rc=$? >>$L
  done
done
for r in 0 4; do
  s trace P=4 rounds $r
  TILEWIRE_RELAY_ROUNDS=$r timeout 100 $TW bench gemm-allreduce --virtual 4 --algo relay --path fused -m 8192 -n 8192 -k 4096 -R 3 --iters 5 \
    --trace $OUT/trace_relay_p4_r$r.json >>$L 2>&1; echo rc=$? >>$L
  python3 scripts/trace_phases.py $OUT/trace_relay_p4_r$r.json >>$L 2>&1
  gzip -9 $OUT/trace_relay_p4_r$r.json
done
s end
