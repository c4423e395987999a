#!/usr/bin/env bash
# one device call: the fused ops' tests at the real rank and 2, 3, 8 virtual ranks; memcheck on the relay and trace tests at 4
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
F='GemmAllReduce*:GemmReduceScatter*:AllGatherGemm*:GemmScatterGather*:Trace*:Gemm.*'
s tests real rank
timeout 150 $T --gtest_filter="$F" --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
for p in 2 3 8; do
  s tests virtual $p
  TILEWIRE_TEST_VIRTUAL=$p timeout 150 $T --gtest_filter='GemmAllReduce*:GemmReduceScatter*:AllGatherGemm*:Trace*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
done
s tests relay, hint on, virtual 4
TILEWIRE_RELAY_L2_EVICT_FIRST=1 TILEWIRE_TEST_VIRTUAL=4 timeout 120 $T --gtest_filter='GemmAllReduce*:GemmReduceScatter*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
TW=$DIST/bin/tilewire
for rep in 1 2; do for h in 0 1; do for k in 2048 7168; do
  s gemm-rs P=4 k $k hint $h rep $rep
  TILEWIRE_TIMEOUT_MS=5000 TILEWIRE_RELAY_L2_EVICT_FIRST=$h timeout 100 $TW bench gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k $k -R 3 --iters 5 \
    --json $OUT/rs_p4_k${k}_h${h}_$rep.json >>$L 2>&1; echo rc=$? >>$L
done; done; done
s memcheck virtual 4
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='GemmAllReduce.AcceptanceShape:GemmAllReduce.OddShapes:Trace.PeersLaunchRightAfterClockSync' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
s end
s end
cd $OUT && tar czf results.tgz *.json log.txt && rm -f *.json
