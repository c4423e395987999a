#!/usr/bin/env bash
# Call S (the warm machine's rest; carry probe, dist-{ag,bulk,bulk2,padtest,padfix,moe}-pack): what waits for a
# GPU, most important first, each part tarred as it ends: (0) ag-seq-pad's test before/after the
# fix; (1) ag-gate's tests and bench ag-gemm P = 4 against main's kernels (dist-bulk); (2)
# moe-overlap's grouped-gate and MoE tests (real, 4, 8 virtual) and bench moe ht at 4 virtual;
# (3) next-candidate (bulk2) vs bulk on the all-reduce acceptance at P = 2, 4; (4) M = 1024 checks.
cd "$(dirname "$0")/.."
for x in bulk2; do [ -x dist-$x/bin/tilewire ] || tar xJf dist-$x-pack/dist-$x.tar.xz; done
W=/tmp/s; mkdir -p $W
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $W/card.txt
t0=$SECONDS
T=${T:-230}
left() { echo $((T - SECONDS + t0)); }
tarit() { (cd $W && tar czf $OUT/s.tgz .); }
b() {  # b <dist> <label> <limit> <env> args...
  local dn=$1 d=$PWD/dist-$1 label=$2 lim=$3 e=$4; shift 4
  local c=$(cat $d/COMMIT)
  [ $(left) -gt $lim ] || { echo "!!! no time for: $label ($dn)" | tee -a $W/s.log; return; }
  echo "=== $label ($c; $e): tilewire bench $*" | tee -a $W/s.log
  env $e LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout $lim $d/bin/tilewire bench "$@" --json $W/one.json >>$W/s.log 2>&1 &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; d["env"]=sys.argv[3]; d["dist"]=sys.argv[4]; print(json.dumps(d))' $W/one.json "$label" "$e" "$dn" >>$W/s.jsonl
  echo "rc=$?" >> $W/s.log; rm -f $W/one.json
}
tests() {  # tests <dist> <virtual P> <filter> <limit>
  local d=$1 p=$2 f=$3 lim=$4
  [ $(left) -gt $lim ] || { echo "!!! no time for tests $d P=$p" | tee -a $W/s.log; return; }
  echo "=== tests $f, virtual $p (dist-$d $(cat dist-$d/COMMIT))" | tee -a $W/s.log
  env LD_LIBRARY_PATH=$PWD/dist-$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_TEST_VIRTUAL=$p timeout $lim dist-$d/bin/tilewire_gpu_tests \
    --gtest_filter="$f" --gtest_output=json:$W/tests_${d}_p$p.json >$W/tests_${d}_p$p.log 2>&1
  echo "rc=$?" | tee -a $W/s.log; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|TIMEOUT" $W/tests_${d}_p$p.log | tail -5 | tee -a $W/s.log
}
for p in 4 2 0 3; do tests bulk2 $p 'GemmAllReduce.*:GemmAllReduceReuse.*:GemmReduceScatter.*:-GemmAllReduce.AcceptanceShape' 55; tarit; done
