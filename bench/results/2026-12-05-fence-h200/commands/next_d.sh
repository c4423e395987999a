#!/usr/bin/env bash
# Call D (~4 min): bench ep at virtual nodes (both modes, both payloads, 4 shapes), then memcheck
# at 2 x 2 on the EP tests (limit cases out).
cd "$(dirname "$0")/.."
[ -x dist-fence/bin/tilewire ] || tar xJf dist-fence-pack/dist-fence.tar.xz
D=$PWD/dist-fence
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
export LD_LIBRARY_PATH=$D/lib:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $D/COMMIT)
echo "commit $TILEWIRE_COMMIT"; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p $OUT/bench
for shape in 2x2 2x4 4x2 8x1; do
  n=${shape%x*} l=${shape#*x}; P=$((n * l))
  for mode in ht ll; do for pay in bf16 fp8; do
    f=$OUT/bench/ep_${shape}_${mode}_${pay}.txt
    TILEWIRE_TIMEOUT_MS=30000 timeout 30 $D/bin/tilewire bench ep --virtual $P --ranks-per-node $l --mode $mode --payload $pay -t 128 -n 2 -R 2 --json ${f%.txt}.json >$f 2>&1
    echo "$shape $mode $pay rc=$? $(grep -E '#wrong' $f | tail -1)"
  done; done
done
echo "=== memcheck at 2 x 2 on the EP tests (limit cases out)"
TILEWIRE_TIMEOUT_MS=30000 TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TEST_RANKS_PER_NODE=2 TILEWIRE_TEST_EP_LIMITS=0 TILEWIRE_TEST_GIN_CHAOS=7 \
  timeout 150 compute-sanitizer --tool memcheck $D/bin/tilewire_gpu_tests --gtest_filter='Ep.*:EpHardening.*:EpEpoch.*' >$OUT/memcheck_2x2_ep.log 2>&1
echo "rc=$?"; grep -E 'PASSED|FAILED|ERROR SUMMARY|OK \]' $OUT/memcheck_2x2_ep.log | tail -30
