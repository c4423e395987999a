#!/usr/bin/env bash
# one device call: the all-reduce acceptance at 2 and 4 virtual ranks with and without --warm-s (sustained load), clocks sampled
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
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 >$OUT/clk.csv &
SP=$!
for p in 4 2; do
  for w in 0 3; do
    s acceptance P=$p warm-s $w
    timeout 150 $TW bench gemm-allreduce --virtual $p --sweep acceptance --path fused -R 3 --iters 5 --warm-s $w \
      --json $OUT/acc_p${p}_w$w.json >>$L 2>&1; echo rc=$? >>$L
  done
done
kill $SP
s end
cd $OUT && tar czf results.tgz *.json clk.csv log.txt && rm -f *.json clk.csv
