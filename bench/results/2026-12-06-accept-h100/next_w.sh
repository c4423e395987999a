#!/usr/bin/env bash
# Call W: (1) the fused ops' acceptance sweeps on main's kernels (dist-main), one H200 run (engine mode,
# step accept); (2) the claims A/B on the claim branch (dist-claim) with JSON; dsv3 rows.
cd "$(dirname "$0")/.."
for x in main claim; do [ -x dist-$x/bin/tilewire ] || tar xJf dist-$x-pack/dist-$x.tar.xz; done
ENGINE_STEPS=accept DIST=$PWD/dist-main OUT=$OUT/acc timeout 420 bash scripts/gpu_run.sh engine
grep -E "^===|!!!" $OUT/acc/run.log | tail -25
python3 scripts/accept_table.py $OUT/acc/bench_engine.jsonl
# the relay's pacing on the virtual team: gemm-rs Llama unpaced, P = 2 and 4 (dist-main)
for p in 2 4; do TILEWIRE_RELAY_PACE_PCT=0 LD_LIBRARY_PATH=$PWD/dist-main/lib:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64 \
  NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_COMMIT=$(cat dist-main/COMMIT) \
  timeout 100 dist-main/bin/tilewire bench gemm-rs --virtual $p --sweep llama -R 3 --iters 5 --json $OUT/acc/rs_llama_p${p}_unpaced.json > $OUT/acc/rs_llama_p${p}_unpaced.log 2>&1
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; print(json.dumps(d))' $OUT/acc/rs_llama_p${p}_unpaced.json "gemm-rs llama P=$p unpaced" >> $OUT/acc/unpaced.jsonl
done
python3 scripts/accept_table.py $OUT/acc/unpaced.jsonl
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
d=$PWD/dist-claim; export LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$(cat $d/COMMIT)
mkdir -p $OUT/moe
b() { local e=$1 j=$2; shift 2; echo "=== TILEWIRE_GROUPED_CLAIM=$e: bench $*" | tee -a $OUT/moe/moe.log; TILEWIRE_GROUPED_CLAIM=$e timeout 100 $d/bin/tilewire bench "$@" --json $OUT/moe/$j.json >> $OUT/moe/moe.log 2>&1; echo "rc=$?" >> $OUT/moe/moe.log; }
for m in qwen3 dsv3; do for p in 4 8; do for e in 0 1; do
  b $e moe_${m}_p${p}_claim$e moe --virtual $p --mode ht --model $m --tokens 1024,4096 --iters 5 -R 3
done; done; done
grep -E "^(===|qwen3|dsv3)" $OUT/moe/moe.log
