# sourced by the call scripts: the dist, the environment every run needs, the bench helper
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OUT=${OUT:?}
D=${DISTNAME:-dist-d}
[ -d $D ] || tar xJf probe/$D.tar.xz
export DIST=$PWD/$D CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=20000
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export LD_LIBRARY_PATH=$DIST/lib:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64
export TILEWIRE_COMMIT=$(cat $DIST/COMMIT)
TW=$DIST/bin/tilewire
TESTS=$DIST/bin/tilewire_gpu_tests
bm() {  # bm LIMIT P MODEL TOKENS FUSED JSONL
  echo "=== bench moe --virtual $2 --model $3 --tokens $4 --fused $5 ($(date -u +%T))"
  timeout $1 $TW bench moe --virtual $2 --mode ht --model $3 --tokens $4 -R 3 --iters 5 --fused $5 --json $OUT/m.json \
    | grep -vE "^#  "; echo "rc=${PIPESTATUS[0]}"
  [ -f $OUT/m.json ] && { sed "s/^{/{\"label\": \"P$2 $3 fused $5\", /" $OUT/m.json | tr -d '\n' >> $OUT/$6; echo >> $OUT/$6; rm -f $OUT/m.json; }
}
