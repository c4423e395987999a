#!/usr/bin/env bash
# one device call: the relay's L2 evict-first hint off/on (all-reduce acceptance P = 2, 4; gemm-rs 70B attention / FFN down P = 4), tests with it on; python tests
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-l2.tar.xz
DIST=$PWD/dist-l2
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=5000
TW=$DIST/bin/tilewire; T=$DIST/bin/tilewire_gpu_tests
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
s tests relay, hint on, virtual 4
TILEWIRE_RELAY_L2_EVICT_FIRST=1 TILEWIRE_TEST_VIRTUAL=4 timeout 120 $T --gtest_filter='GemmAllReduce*:GemmReduceScatter*' --gtest_brief=1 >>$L 2>&1; echo rc=$? >>$L
for rep in 1 2; do
  for h in 0 1; do
    for p in 2 4; do
      s acceptance P=$p hint $h rep $rep
      TILEWIRE_RELAY_L2_EVICT_FIRST=$h timeout 100 $TW bench gemm-allreduce --virtual $p --sweep acceptance --path fused -R 3 --iters 5 \
        --json $OUT/acc_p${p}_h${h}_$rep.json >>$L 2>&1; echo rc=$? >>$L
    done
    for k in 2048 7168; do
      s gemm-rs P=4 k $k hint $h rep $rep
      TILEWIRE_RELAY_L2_EVICT_FIRST=$h timeout 100 $TW bench gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k $k -R 3 --iters 5 \
        --json $OUT/rs_p4_k${k}_h${h}_$rep.json >>$L 2>&1; echo rc=$? >>$L
    done
  done
done
s python
PYLIB=$(mktemp -d)
TILEWIRE_NCCL_ROOT=$(dirname "$VN") CMAKE_PREFIX_PATH=$DIST timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target "$PYLIB" . >>$L 2>&1; echo rc=$? >>$L
REPO=$PWD; cd "$PYLIB"
PYTHONPATH=$PYLIB timeout 200 torchrun --nproc-per-node 1 -m pytest -q -p no:cacheprovider "$REPO/tests/python" >>$L 2>&1; echo rc=$? >>$L
cd "$REPO"
s end
