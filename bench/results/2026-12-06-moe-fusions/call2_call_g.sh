#!/usr/bin/env bash
# one device call at dist-n/COMMIT: MoE tests (real rank, 2/4/8 virtual) with the listed fused
# combine, bench moe ht with --fused combine (8 and 4 virtual ranks) and overlap,combine (8), the
# 64-row tiles at 128 and 512 tokens, and ncu on the grouped GEMM's decode shape (tilewire, cuBLAS).
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
tar xJf probe/dist-n.tar.xz
export DIST=$PWD/dist-n
MOE_STEPS="tests" MOE_P="4 8" timeout 200 bash scripts/gpu_run.sh moe
mv $OUT/run.log $OUT/tests_run.log; rm -f $OUT/gpu_tests_moe_virtual.jsonl.tmp
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=3000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
{
for run in "8 combine" "8 overlap,combine" "4 combine"; do
  set -- $run
  echo "=== bench moe --virtual $1 ht --fused $2 ($(date -u +%T))"
  timeout 100 $TW bench moe --virtual $1 --mode ht --model all --tokens 1024,4096 -R 3 --iters 5 --fused $2 \
    --json $OUT/m.json; echo "rc=$?"; cat $OUT/m.json >> $OUT/moe.jsonl; rm -f $OUT/m.json
done
for r in uniform skewed; do
  echo "=== bench gemm --grouped, 128 and 512 tokens, 64-row tiles, routing $r ($(date -u +%T))"
  timeout 100 $TW bench gemm --grouped --routing $r --tokens 128,512 --tiles '64x128pp;64x256pp' -R 3 \
    --json $OUT/g.json; echo "rc=$?"; cat $OUT/g.json >> $OUT/grouped_decode.jsonl; rm -f $OUT/g.json
done
echo "=== ncu: bench gemm --grouped qwen3 down 128 uniform ($(date -u +%T))"
timeout 60 ncu --clock-control none --launch-skip 16 --launch-count 6 -k regex:'device_kernel|[Gg]emm|sm90' \
  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,launch__cluster_dim_x,launch__cluster_dim_y \
  $TW bench gemm --grouped --model qwen3 --gemm down --tokens 128 --tiles auto -R 1 --iters 1 --warmup 1 > $OUT/ncu_grouped.txt 2>&1
echo "rc=$?"; tail -5 $OUT/ncu_grouped.txt
} 2>&1 | tee $OUT/bench_moe.log
