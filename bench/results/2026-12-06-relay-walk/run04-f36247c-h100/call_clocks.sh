#!/usr/bin/env bash
# one device call: SM clock and power while 4 virtual ranks run the GEMM alone, the relay all-reduce, and the relay without data
cd "$(dirname "$0")/.."
OUT=${OUT:?}
tar xJf probe/dist-l2.tar.xz
DIST=$PWD/dist-l2
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
VN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$DIST/lib:$VN:/usr/local/cuda/lib64 TILEWIRE_TIMEOUT_MS=10000
TW=$DIST/bin/tilewire
L=$OUT/log.txt
s() { echo "=== $* ($(date -u +%T))" >>$L; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv >>$L; cat $DIST/COMMIT >>$L
sample() {  # sample <name> cmd...: clocks and power every 100 ms while cmd runs
  local n=$1; shift
  s "$n: $*"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 >$OUT/clk_$n.csv &
  local pid=$!
  timeout 120 "$@" >>$L 2>&1; echo rc=$? >>$L
  kill $pid; wait $pid 2>/dev/null
}
for rep in 1 2; do
  sample gemm_$rep $TW bench gemm --virtual 4 -m 8192 -n 8192 -k 4096 --iters 200 -R 5
  sample relay_$rep $TW bench gemm-allreduce --virtual 4 --algo relay --path fused --only-fused -m 8192 -n 8192 -k 4096 --iters 20 -R 5 --warm-s 4
  TILEWIRE_RELAY_NO_PUSH=1 sample flags_$rep $TW bench gemm-allreduce --virtual 4 --algo relay --path fused --only-fused -m 8192 -n 8192 -k 4096 --iters 20 -R 5 --warm-s 4
done
python3 - $OUT >>$L 2>&1 <<'PY'
import csv, glob, statistics, sys
for f in sorted(glob.glob(sys.argv[1] + "/clk_*.csv")):
    rows = [r for r in csv.reader(open(f)) if len(r) >= 4]
    clk = [float(r[1].split()[0]) for r in rows]; pw = [float(r[2].split()[0]) for r in rows]
    busy = [(c, p) for c, p in zip(clk, pw) if p > 450]  # samples while the kernels ran
    if busy:
        print(f.split("/")[-1], "samples", len(busy), "SM clock median %.0f MHz" % statistics.median([c for c, _ in busy]),
              "power median %.0f W" % statistics.median([p for _, p in busy]))
PY
s end
cd $OUT && tar czf results.tgz clk_*.csv log.txt && rm -f clk_*.csv
