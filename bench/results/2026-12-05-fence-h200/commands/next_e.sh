#!/usr/bin/env bash
# Call E: the low-latency rows on this card, fence candidate against 72a2347-ep, two rounds.
cd "$(dirname "$0")/.."
[ -x dist-fence/bin/tilewire ] || tar xJf dist-fence-pack/dist-fence.tar.xz
mkdir -p /tmp/bf && tar xJf dist-before-pack/dist-before.tar.xz -C /tmp/bf; B=$(ls -d /tmp/bf/*/ | head -1)
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
W=/tmp/e; mkdir -p $W
for r in 1 2; do
  for d in $B $PWD/dist-fence; do
    c=$(cat $d/COMMIT)
    for a in "-t 128 --combine-probes" "-t 128 --payload fp8" "-t 256 --combine-probes" "-t 128 --routing skewed" "-t 128 --virtual 8" "-t 128 --virtual 8 --payload fp8"; do
      echo "=== bench ep --mode ll $a ($c), round $r" >>$W/ll.log
      LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout 25 $d/bin/tilewire bench ep --mode ll $a --json $W/x.json >>$W/ll.log 2>&1 && { python3 -c "import json,sys;r=json.load(open('$W/x.json'));r['label']='$c';r['round']=$r;print(json.dumps(r))" >>$W/bench_ll.jsonl 2>/dev/null || cat $W/x.json >>$W/bench_ll.jsonl; }
    done
  done
done
grep -E '^(===|  ll dispatch|  ll combine|  nccl dispatch)' $W/ll.log | grep -v 'copied in' 
(cd $W && tar czf $OUT/ll_h200.tgz ll.log bench_ll.jsonl)
