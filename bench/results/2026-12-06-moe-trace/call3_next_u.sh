#!/usr/bin/env bash
# Call U: (1) tests/python under torchrun on main's working tree (the SymInt-id fix and its test);
# (2) bench moe traced at 1024 tokens, default dispatch CTAs, P = 4; P = 8 at 1024, 4096.
cd "$(dirname "$0")/.."
[ -x dist-main/bin/tilewire ] || tar xJf dist-main-pack/dist-main.tar.xz
W=$OUT; N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
PYLIB=$(mktemp -d); REPO=$PWD
TILEWIRE_NCCL_ROOT=$(dirname $N) CMAKE_PREFIX_PATH=$PWD/dist-main timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target "$PYLIB" . > $W/pip.log 2>&1; echo "pip rc=$?"
(cd $PYLIB && LD_LIBRARY_PATH=$REPO/dist-main/lib:$N:/usr/local/cuda/lib64 PYTHONPATH=$PYLIB timeout 200 torchrun --nproc-per-node 1 -m pytest -q -p no:cacheprovider $REPO/tests/python > $W/pytest.log 2>&1; echo "pytest rc=$?")
tail -5 $W/pytest.log; grep -E "FAILED|Error" $W/pytest.log | head
d=$PWD/dist-main; c=$(cat $d/COMMIT)
b() { echo "=== $*"; LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout 150 $d/bin/tilewire bench moe "$@" 2>&1 | grep -vE "^#   " ; }
b --virtual 4 --mode ht --model qwen3 --tokens 1024 --iters 5 -R 3 --trace $W/moe_p4_1024_trace.json --json $W/moe_p4_1024.json
b --virtual 8 --mode ht --model qwen3 --tokens 1024,4096 --iters 5 -R 3 --json $W/moe_p8.json
b --virtual 4 --mode ht --model deepseek --tokens 1024,4096 --iters 5 -R 3 --json $W/moe_p4_ds.json
