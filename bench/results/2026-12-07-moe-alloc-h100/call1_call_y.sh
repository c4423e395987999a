#!/usr/bin/env bash
# device call A at dist-x/COMMIT (tile rule: 128x256coop above 64 rows per group; no PDL launch; the SwiGLU
# epilogue's fast math; the MoE constructor's agreement): MoE + grouped tests at the real rank and 2, 4, 8
# virtual ranks; bench moe ht --fused combine,swiglu at 8 and 4 virtual ranks (Qwen3 1024-8192, DeepSeek-V3
# 1024-4096 at 8, 1024-8192 at 4), 20 s device-wait bound; bench gemm --grouped against cuBLAS grouped.
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
tar xJf probe/dist-x.tar.xz
export DIST=$PWD/dist-x
MOE_STEPS="tests" MOE_P="2 4 8" timeout 170 bash scripts/gpu_run.sh moe > /dev/null 2>&1
mv $OUT/run.log $OUT/tests_run.log; grep -E "PASSED|FAILED|SKIPPED" $OUT/tests_run.log | tail -12
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=20000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"
for run in "8 dsv3" "8 qwen3" "4 qwen3" "4 dsv3"; do
  set -- $run
  toks=1024,2048,4096,8192; [ $1 = 8 ] && [ $2 = dsv3 ] && toks=1024,2048,4096  # 8192: ~120 GB at 8 ranks
  echo "=== bench moe --virtual $1 ht --model $2 --fused combine,swiglu ($(date -u +%T))"
  timeout 110 $TW bench moe --virtual $1 --mode ht --model $2 --tokens $toks -R 3 --iters 5 --fused combine,swiglu \
    --json $OUT/m.json; echo "rc=$?"
  sed "s/^{/{\"label\": \"P$1 $2 fused combine,swiglu\", /" $OUT/m.json | tr -d '\n' >> $OUT/moe.jsonl; echo >> $OUT/moe.jsonl; rm -f $OUT/m.json
done
echo "=== bench gemm --grouped, tile auto, routing uniform ($(date -u +%T))"
timeout 60 $TW bench gemm --grouped --routing uniform --tiles auto -R 3 --json $OUT/g.json; echo "rc=$?"
mv $OUT/g.json $OUT/grouped.json
echo "=== end ($(date -u +%T))"
} 2>&1 | tee $OUT/bench.log
