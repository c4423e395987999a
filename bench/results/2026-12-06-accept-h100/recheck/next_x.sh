#!/usr/bin/env bash
# Call X: ag-gemm's erratic 8B FFN rows at 4 virtual ranks (main's kernels): repeated runs, a trace.
cd "$(dirname "$0")/.."
[ -x dist-main/bin/tilewire ] || tar xJf dist-main-pack/dist-main.tar.xz
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib; d=$PWD/dist-main
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
export LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$(cat $d/COMMIT)
nvidia-smi --query-gpu=name --format=csv,noheader
W=$OUT; i=0
timeout 60 probe/ce/cecopy | tee $W/cecopy.txt
b() { i=$((i+1)); echo "=== $i: $*"; timeout 100 $d/bin/tilewire bench ag-gemm "$@" --json $W/ag$i.json > $W/ag$i.log 2>&1; echo rc=$?;
  python3 - $W/ag$i.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for sh in d["shapes"]:
    us={x["op"][:3]:x["us"] for x in sh["rows"] if x.get("ran")}
    print(" %5dx%dx%d "%(sh["M"],sh["N"],sh["K"])+" ".join("%s=%.0f"%(k,v) for k,v in us.items()))
PY
}
for r in 1 2; do b --virtual 4 -m 1024,2048,4096 -n 3584 -k 4096 -R 5 --iters 5; done
b --virtual 4 -m 2048 -n 3584 -k 4096 -R 3 --iters 5 --trace $W/ag_p4_2048_trace.json
b --virtual 2 -m 1024,2048,4096 -n 7168 -k 4096 -R 5 --iters 5
