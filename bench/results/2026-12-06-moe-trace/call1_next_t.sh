#!/usr/bin/env bash
# Call T (~9.5 min, next session's first; carry probe, dist-{ag,bulk,bulk2,padtest,padfix,moe}-pack): what waits for a
# GPU, most important first, each part tarred as it ends: (0) ag-seq-pad's test before/after the
# fix; (1) ag-gate's tests and bench ag-gemm P = 4 against main's kernels (dist-bulk); (2)
# moe-overlap's grouped-gate and MoE tests (real, 4, 8 virtual) and bench moe ht at 4 virtual;
# (3) next-candidate (bulk2) vs bulk on the all-reduce acceptance at P = 2, 4; (4) M = 1024 checks.
cd "$(dirname "$0")/.."
for x in main; do [ -x dist-$x/bin/tilewire ] || tar xJf dist-$x-pack/dist-$x.tar.xz; done
W=/tmp/t; mkdir -p $W
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $W/card.txt
t0=$SECONDS
T=${T:-565}
left() { echo $((T - SECONDS + t0)); }
tarit() { (cd $W && tar czf $OUT/t.tgz .); }
b() {  # b <dist> <label> <limit> <env> args...
  local dn=$1 d=$PWD/dist-$1 label=$2 lim=$3 e=$4; shift 4
  local c=$(cat $d/COMMIT)
  [ $(left) -gt $lim ] || { echo "!!! no time for: $label ($dn)" | tee -a $W/t.log; return; }
  echo "=== $label ($c; $e): tilewire bench $*" | tee -a $W/t.log
  env $e LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout $lim $d/bin/tilewire bench "$@" --json $W/one.json >>$W/t.log 2>&1 &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; d["env"]=sys.argv[3]; d["dist"]=sys.argv[4]; print(json.dumps(d))' $W/one.json "$label" "$e" "$dn" >>$W/t.jsonl
  echo "rc=$?" >> $W/t.log; rm -f $W/one.json
}
tests() {  # tests <dist> <virtual P> <filter> <limit>
  local d=$1 p=$2 f=$3 lim=$4
  [ $(left) -gt $lim ] || { echo "!!! no time for tests $d P=$p" | tee -a $W/t.log; return; }
  echo "=== tests $f, virtual $p (dist-$d $(cat dist-$d/COMMIT))" | tee -a $W/t.log
  env LD_LIBRARY_PATH=$PWD/dist-$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_TEST_VIRTUAL=$p timeout $lim dist-$d/bin/tilewire_gpu_tests \
    --gtest_filter="$f" --gtest_output=json:$W/tests_${d}_p$p.json >$W/tests_${d}_p$p.log 2>&1
  echo "rc=$?" | tee -a $W/t.log; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|TIMEOUT" $W/tests_${d}_p$p.log | tail -5 | tee -a $W/t.log
}
# carry: probe, dist-main-pack (main at 6aab7c6 or later: repack before the call)
# (1) the MoE overlap: where it waits (trace) and the placement's CTAs against the GEMM's SMs
b main "moe ht P=4 trace" 80 "X=0" moe --virtual 4 --mode ht --model qwen3 --tokens 4096 --iters 5 -R 3 --trace $W/moe_p4_trace.json
for g in 4 8 16; do b main "moe ht P=4 G=$g" 60 "X=0" moe --virtual 4 --mode ht --model qwen3 --tokens 1024,4096 --iters 5 -R 3 --fused-ep-sms $g; done
for g in 8 16; do b main "moe ht P=1 G=$g" 60 "X=0" moe --mode ht --model qwen3 --tokens 1024,4096 --iters 5 -R 3 --fused-ep-sms $g; done
grep -E "^(qwen3|model|# rank|# tilewire)" $W/t.log | tail -30; tarit
# (2) 33: the Llama sweeps on main (the bulk finals merged), P = 2 and 4
for p in 2 4; do b main "rs llama P=$p" 90 "X=0" gemm-rs --virtual $p --sweep llama -R 3 --iters 5; done
python3 probe/g_table.py $W/t.jsonl > $W/table.txt 2>&1; tail -40 $W/table.txt; tarit
# (3) 33: relay knobs on the all-reduce acceptance at P = 4, same run: pace off, consumer rows 0
for e in "X=0" "TILEWIRE_RELAY_PACE_PCT=0" "TILEWIRE_RELAY_CONSUMER_ROWS=0"; do b main "ar acc P=4 $e" 70 "$e" gemm-allreduce --virtual 4 --sweep acceptance -R 3 --iters 5; done
python3 probe/g_table.py $W/t.jsonl > $W/table.txt 2>&1; tail -40 $W/table.txt; tarit
