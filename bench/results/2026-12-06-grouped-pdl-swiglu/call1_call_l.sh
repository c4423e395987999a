#!/usr/bin/env bash
# one device call at dist-r/COMMIT: grouped GEMM + MoE tests (real rank, 4 and 8 virtual; the SwiGLU
# epilogue among them), bench gemm --grouped against cuBLAS grouped (tile auto), ncu on the decode
# shape's kernels, bench moe ht --fused combine,swiglu at 8 and 4 virtual ranks (1024-8192 tokens),
# at 4 with the EP on the whole budget, then memcheck (real rank; MoE at 4 virtual).
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
tar xJf probe/dist-r.tar.xz
export DIST=$PWD/dist-r
MOE_STEPS="tests" MOE_P="4" timeout 150 bash scripts/gpu_run.sh moe
mv $OUT/run.log $OUT/tests_run.log
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=3000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
{
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"
for r in uniform; do
  echo "=== bench gemm --grouped, tile auto, routing $r ($(date -u +%T))"
  timeout 90 $TW bench gemm --grouped --routing $r --tiles auto -R 3 --json $OUT/g.json; echo "rc=$?"
  cat $OUT/g.json >> $OUT/grouped.jsonl; echo >> $OUT/grouped.jsonl; rm -f $OUT/g.json
done
moe() {
for run in "$@"; do
  set -- $run
  for m in qwen3; do
    echo "=== bench moe --virtual $1 ht --model $m --fused $2 --fused-ep-sms $3 ($(date -u +%T))"
    toks=1024,2048,4096,8192; [ $1 = 8 ] && [ $m = dsv3 ] && toks=1024,2048,4096  # 8192: ~120 GB at 8 ranks
    timeout 90 $TW bench moe --virtual $1 --mode ht --model $m --tokens $toks -R 3 --iters 5 --fused $2 \
      $([ $3 != 0 ] && echo --fused-ep-sms $3) --json $OUT/m.json; echo "rc=$?"
    sed "s/^{/{\"label\": \"P$1 $m fused $2 ep_sms $3\", /" $OUT/m.json | tr -d '\n' >> $OUT/moe.jsonl; echo >> $OUT/moe.jsonl; rm -f $OUT/m.json
  done
done
}
moe "8 combine,swiglu 0"
# (the EP on the whole budget at 4 ranks: a later call)
} 2>&1 | tee $OUT/bench.log
