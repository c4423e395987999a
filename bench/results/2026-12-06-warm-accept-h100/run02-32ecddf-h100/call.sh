#!/usr/bin/env bash
# one device call: the relay's interleaved walk (TILEWIRE_RELAY_WAVES) against the segments, gemm-rs Llama and the
# all-reduce acceptance at 2 and 4 virtual ranks, every shape after --warm-s; the fused tests on the interleaved walk
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-b.tar.xz
DIST=$PWD/dist-b
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000 TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
L=$OUT/log.txt; J=$OUT/bench.jsonl
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >>$L; echo "commit $TILEWIRE_COMMIT" >>$L
b() {  # b <waves> <label> bench args...
  local w=$1 label=$2; shift 2
  s "TILEWIRE_RELAY_WAVES=$w $label: bench $*"
  TILEWIRE_RELAY_WAVES=$w timeout 150 $TW bench "$@" --json $OUT/one.json >>$L 2>&1; echo rc=$? >>$L
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' $OUT/one.json "$label waves $w" >>$J
  rm -f $OUT/one.json
}
for p in 4 2; do
  for w in 0 1 2; do
    b $w "gemm-rs llama P=$p" gemm-rs --virtual $p --sweep llama -R 3 --iters 5 --warm-s 2
  done
  for w in 0 1 2; do
    b $w "gemm-allreduce acceptance P=$p" gemm-allreduce --virtual $p --sweep acceptance --path fused -R 3 --iters 5 --warm-s 3
  done
done
for p in 4 3; do
  s "fused tests, interleaved walk, $p virtual ranks"
  TILEWIRE_RELAY_WAVES=1 TILEWIRE_TEST_VIRTUAL=$p timeout 200 $DIST/bin/tilewire_gpu_tests \
    --gtest_filter='GemmAllReduce*:GemmReduceScatter.*:GemmScatterGather.*' --gtest_output=json:$OUT/tests_ilv_p$p.json > $OUT/tests_ilv_p$p.log 2>&1
  echo rc=$? >>$L; tail -3 $OUT/tests_ilv_p$p.log >>$L
done
s end
python3 scripts/accept_table.py $J
