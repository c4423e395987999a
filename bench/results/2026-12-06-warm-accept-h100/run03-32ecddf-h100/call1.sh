#!/usr/bin/env bash
# one device call at the library of 32ecddf (HEAD's code): the fused tests at the real rank (with Gemm.*) and at
# 2, 3, 4, 8 virtual ranks; memcheck at 4; the plain GEMM against cuBLASLt; one real rank's fused rows after --warm-s
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-b.tar.xz
DIST=$PWD/dist-b
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000 TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire; T=$DIST/bin/tilewire_gpu_tests
L=$OUT/log.txt; J=$OUT/bench.jsonl
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>$L; echo "commit $TILEWIRE_COMMIT" >>$L
F='GemmAllReduce*:GemmReduceScatter.*:AllGatherGemm.*:GemmScatterGather.*'
for p in 0 2 3 4 8; do
  s "fused tests, $p virtual ranks (0: the real GPU, with Gemm.*)"
  f=$F; [ $p = 0 ] && f="Gemm.*:$F"
  TILEWIRE_TEST_VIRTUAL=$p timeout 150 $T --gtest_filter="$f" --gtest_brief=1 --gtest_output=json:$OUT/tests_p$p.json >$OUT/tests_p$p.log 2>&1
  echo rc=$? >>$L; tail -2 $OUT/tests_p$p.log >>$L
done
s "memcheck, 4 virtual ranks"
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=60000 timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
  $T --gtest_filter='GemmAllReduce.AcceptanceShape:GemmAllReduce.OddShapes:GemmReduceScatter.ShardsMatchTheReference:GemmScatterGather.GraphReplayMatchesEagerCalls' \
  --gtest_brief=1 >$OUT/memcheck.log 2>&1
echo rc=$? >>$L; tail -4 $OUT/memcheck.log >>$L
b() { local label=$1; shift; s "$label: bench $*"
  timeout 150 $TW bench "$@" --json $OUT/one.json >>$L 2>&1; echo rc=$? >>$L
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' $OUT/one.json "$label" >>$J; rm -f $OUT/one.json; }
b "gemm acceptance bf16" gemm --dtype bf16 --sweep acceptance -R 3
b "gemm-allreduce acceptance P=1" gemm-allreduce --sweep acceptance --path fused -R 3 --iters 10 --warm-s 3
s end
