#!/usr/bin/env bash
# device call B at dist-x/COMMIT: the 64x256 and 128x256 tiles on 8 virtual ranks (bench moe --tile) and alone
# on 16 SMs (bench gemm --grouped --reserved-sms 116); memcheck of Moe at 4 virtual ranks; ncu per-kernel
# durations of bench moe ht at the real rank (Qwen3, 4096 tokens): where the forward's time goes.
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
[ -d dist-x ] || tar xJf probe/dist-x.tar.xz
export DIST=$PWD/dist-x
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=20000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"
echo "=== memcheck: Moe at 4 virtual ranks ($(date -u +%T))"
TILEWIRE_TEST_VIRTUAL=4 TILEWIRE_TIMEOUT_MS=120000 timeout 170 compute-sanitizer --tool memcheck --report-api-errors no \
  --error-exitcode 9 $DIST/bin/tilewire_gpu_tests --gtest_filter='Moe*' > $OUT/memcheck_p4.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED|SKIPPED" $OUT/memcheck_p4.log | tail -4
echo "=== the tiles on a virtual team: bench moe --virtual 8 qwen3 1024,2048 --tile 64x256pp, then 128x256coop ($(date -u +%T))"
for t in 64x256pp 128x256coop; do
  timeout 90 $TW bench moe --virtual 8 --mode ht --model qwen3 --tokens 1024,2048 -R 3 --iters 5 --fused combine \
    --tile $t --json $OUT/m.json; echo "rc=$?"
  sed "s/^{/{\"label\": \"P8 qwen3 fused combine tile $t\", /" $OUT/m.json | tr -d '\n' >> $OUT/moe_tiles.jsonl; echo >> $OUT/moe_tiles.jsonl; rm -f $OUT/m.json
done
echo "=== the tiles alone on 16 SMs: bench gemm --grouped --reserved-sms 116 ($(date -u +%T))"
timeout 60 $TW bench gemm --grouped --model qwen3 --tokens 1024,2048 --tiles '64x256pp;128x256coop' --reserved-sms 116 \
  -R 3 --json $OUT/g16.json | grep -E "^(#|model|qwen3)"; echo "rc=$?"
echo "=== ncu per kernel: bench moe ht --model qwen3 --tokens 4096 --fused combine,swiglu -R 1 --iters 1 ($(date -u +%T))"
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $TW bench moe --mode ht --model qwen3 --tokens 4096 -R 1 --iters 1 --fused combine,swiglu > $OUT/ncu_qwen3_4096.txt 2>&1
echo "rc=$?"; xz -k $OUT/ncu_qwen3_4096.txt 2>/dev/null
echo "=== end ($(date -u +%T))"
} 2>&1 | tee $OUT/bench_b.log
