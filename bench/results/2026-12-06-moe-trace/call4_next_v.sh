#!/usr/bin/env bash
# Call V (claim branch, e9ee776): grouped + MoE tests with claimed tiles; bench moe claims on / off
# (TILEWIRE_GROUPED_CLAIM=1 / 0, same binary, same run) at P = 1, 4, 8; a P = 4 trace with claims;
# the plain grouped GEMM with claims forced (2) against the static walk (0).
cd "$(dirname "$0")/.."
[ -x dist-claim/bin/tilewire ] || tar xJf dist-claim-pack/dist-claim.tar.xz
W=$OUT; N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
d=$PWD/dist-claim; c=$(cat $d/COMMIT); export LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c
nvidia-smi --query-gpu=name --format=csv,noheader
t() { echo "=== tests $1 virtual ${2:-real}"; env ${2:+TILEWIRE_TEST_VIRTUAL=$2} timeout 200 $d/bin/tilewire_gpu_tests --gtest_filter="$1" > $W/tests_${2:-real}_$3.log 2>&1; echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|TIMEOUT|SKIPPED \]" $W/tests_${2:-real}_$3.log | tail -6; }
t 'GroupedGemm.*' "" g
t 'Moe*:MoE*' "" m
t 'Moe*:MoE*' 4 m
b() { local e=$1; shift; echo "=== $e: bench $*"; env $e timeout 150 $d/bin/tilewire bench "$@" 2>&1 | grep -vE "^#   |^# (pairs|GEMMs|f/|time)" ; }
for e in TILEWIRE_GROUPED_CLAIM=0 TILEWIRE_GROUPED_CLAIM=1; do
  b $e moe --virtual 4 --mode ht --model qwen3 --tokens 1024,4096 --iters 5 -R 3 --json $W/moe_p4_$e.json
  b $e moe --mode ht --model qwen3 --tokens 1024,4096 --iters 5 -R 3 --json $W/moe_p1_$e.json
done
b TILEWIRE_GROUPED_CLAIM=1 moe --virtual 4 --mode ht --model qwen3 --tokens 1024 --iters 5 -R 3 --trace $W/moe_p4_1024_claim_trace.json
b TILEWIRE_GROUPED_CLAIM=1 moe --mode ht --model qwen3 --tokens 4096 --iters 5 -R 3 --trace $W/moe_p1_4096_claim_trace.json
for e in TILEWIRE_GROUPED_CLAIM=0 TILEWIRE_GROUPED_CLAIM=1; do
  b $e moe --virtual 8 --mode ht --model qwen3 --tokens 1024,4096 --iters 5 -R 3 --json $W/moe_p8_$e.json
done
for e in TILEWIRE_GROUPED_CLAIM=0 TILEWIRE_GROUPED_CLAIM=2; do
  b $e gemm --grouped --model qwen3 --tokens 128,2048,8192 -R 3 --json $W/grouped_$e.json
done
