#!/usr/bin/env bash
# one device call at dist-l/COMMIT: the grouped GEMM (gathered A) and MoE tests (real rank, 4 virtual),
# bench gemm --grouped (cuBLAS grouped baseline, gathered column), bench moe ht with the fused
# gather + combine at 4 and 8 virtual ranks, and each fusion alone at 8.
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
tar xJf probe/dist-l.tar.xz
export DIST=$PWD/dist-l
MOE_STEPS="tests grouped" MOE_P="4" timeout 420 bash scripts/gpu_run.sh moe
cp $OUT/run.log $OUT/run_moe_mode.log
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=3000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
{
for P in 8 4; do
  echo "=== bench moe --virtual $P ht, fused gather,combine ($(date -u +%T))"
  timeout 200 $TW bench moe --virtual $P --mode ht --model all --tokens 1024,4096 -R 3 --iters 5 --json $OUT/moe_p${P}.json; echo "rc=$?"
done
for f in gather combine overlap overlap,gather,combine; do
  echo "=== bench moe --virtual 8 qwen3 4096, fused $f ($(date -u +%T))"
  timeout 100 $TW bench moe --virtual 8 --mode ht --model qwen3 --tokens 4096 -R 3 --iters 5 --fused $f --json $OUT/moe_p8_$f.json; echo "rc=$?"
done
} 2>&1 | tee $OUT/bench_moe.log
