#!/usr/bin/env bash
# one device call at dist-t/COMMIT: the grouped GEMM tests at the real rank (the SwiGLU epilogue's
# quad-transposed store among them); an A/B of the grouped launch (CUTLASS's adapter against
# TILEWIRE_GROUPED_PDL=1, alternating) on Qwen3's GEMMs at 128/512/2048 tokens with the 64x256 and
# 128x256 tiles; bench moe ht --fused combine,swiglu at 8 and 4 virtual ranks (Qwen3), at 4 also with
# the EP on the whole budget (33 CTAs); bench gemm --grouped against cuBLAS grouped (tile auto, both
# routings); bench moe for DeepSeek-V3 at 8 and 4 virtual ranks; memcheck (grouped GEMM at the real
# rank); nsys per-kernel times of bench moe at 4 virtual ranks (Qwen3, 1024 tokens);
# the grouped and MoE tests at the real rank and 2 and 4 virtual ranks.
cd "$(dirname "$0")/.."
export OUT=${OUT:?}
tar xJf probe/dist-t.tar.xz
export DIST=$PWD/dist-t
MOE_STEPS="tests" MOE_P="2 4" timeout 100 bash scripts/gpu_run.sh moe > /dev/null 2>&1
mv $OUT/run.log $OUT/tests_run.log; grep -E "PASSED|FAILED|SKIPPED|step" $OUT/tests_run.log | tail -8
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=3000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
VENV_NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VENV_NCCL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
{
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $TILEWIRE_COMMIT"
echo "=== tests: GroupedGemm*, Moe.Interleave* at the real rank ($(date -u +%T))"
timeout 40 $DIST/bin/tilewire_gpu_tests --gtest_filter='GroupedGemm*:Moe.Interleave*' \
  --gtest_output=json:$OUT/gpu_tests_grouped_p1.json 2>&1 | grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED|rror"
for pdl in 0 1 0 1; do
  echo "=== TILEWIRE_GROUPED_PDL=$pdl bench gemm --grouped --model qwen3 --tokens 128,512,2048 ($(date -u +%T))"
  TILEWIRE_GROUPED_PDL=$pdl timeout 45 $TW bench gemm --grouped --model qwen3 --tokens 128,512,2048 \
    --tiles '64x256pp;128x256coop' -R 2 --iters 10 --json $OUT/g.json | grep -E "^(qwen3|model)"
  sed "s/^{/{\"label\": \"TILEWIRE_GROUPED_PDL=$pdl\", /" $OUT/g.json | tr -d '\n' >> $OUT/ab.jsonl; echo >> $OUT/ab.jsonl; rm -f $OUT/g.json
done
for run in "8 0" "4 0" "4 33"; do
  set -- $run
  echo "=== bench moe --virtual $1 ht --model qwen3 --fused combine,swiglu --fused-ep-sms $2 ($(date -u +%T))"
  timeout 90 $TW bench moe --virtual $1 --mode ht --model qwen3 --tokens 1024,2048,4096,8192 -R 3 --iters 5 \
    --fused combine,swiglu $([ $2 != 0 ] && echo --fused-ep-sms $2) --json $OUT/m.json; echo "rc=$?"
  sed "s/^{/{\"label\": \"P$1 qwen3 fused combine,swiglu ep_sms $2\", /" $OUT/m.json | tr -d '\n' >> $OUT/moe.jsonl; echo >> $OUT/moe.jsonl; rm -f $OUT/m.json
done
for r in uniform skewed; do
  echo "=== bench gemm --grouped, tile auto, routing $r ($(date -u +%T))"
  TILEWIRE_GROUPED_PDL=0 timeout 90 $TW bench gemm --grouped --routing $r --tiles auto -R 3 --json $OUT/g.json; echo "rc=$?"
  cat $OUT/g.json >> $OUT/grouped.jsonl; echo >> $OUT/grouped.jsonl; rm -f $OUT/g.json
done
for P in 8 4; do
  toks=1024,2048,4096,8192; [ $P = 8 ] && toks=1024,2048,4096  # 8192: ~120 GB at 8 ranks
  echo "=== bench moe --virtual $P ht --model dsv3 --fused combine,swiglu ($(date -u +%T))"
  timeout 100 $TW bench moe --virtual $P --mode ht --model dsv3 --tokens $toks -R 3 --iters 5 --fused combine,swiglu \
    --json $OUT/m.json; echo "rc=$?"
  sed "s/^{/{\"label\": \"P$P dsv3 fused combine,swiglu ep_sms 0\", /" $OUT/m.json | tr -d '\n' >> $OUT/moe.jsonl; echo >> $OUT/moe.jsonl; rm -f $OUT/m.json
done
echo "=== nsys: bench moe --virtual 4 qwen3 1024 tokens, every kernel's time ($(date -u +%T))"
if command -v nsys >/dev/null; then
  timeout 90 nsys profile -t cuda -o /tmp/moe_p4 --force-overwrite true --stats=false $TW bench moe --virtual 4 --mode ht \
    --model qwen3 --tokens 1024 -R 1 --iters 4 --fused combine,swiglu > /dev/null 2>&1; echo "rc=$?"
  timeout 60 nsys stats -r cuda_gpu_kern_sum -f csv -o $OUT/nsys_p4 /tmp/moe_p4.nsys-rep > /dev/null 2>&1; echo "rc=$?"
  head -c 3000 $OUT/nsys_p4_cuda_gpu_kern_sum.csv | cut -c1-250
else echo "no nsys"; fi
echo "=== memcheck: GroupedGemm at the real rank ($(date -u +%T))"
TILEWIRE_TIMEOUT_MS=120000 timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
  $DIST/bin/tilewire_gpu_tests --gtest_filter='GroupedGemm*' > $OUT/memcheck_p1.log 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_p1.log | tail -3
} 2>&1 | tee $OUT/bench.log
