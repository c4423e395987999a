#!/usr/bin/env bash
# Call G (~8 min): the relay's pacing without the consumers' wait in its period (dist-pace) against
# the build before it (dist-cand, pacing over the whole period), and the pacing / consumer-rows
# knobs, on the shapes the last call traced; then the Llama gemm-rs sweep and the all-reduce
# acceptance sweep at P = 2 and 4 under the leading settings, in alternation, 2 rounds.
cd "$(dirname "$0")/.."
for x in cand pace; do [ -x dist-$x/bin/tilewire ] || tar xJf dist-$x-pack/dist-$x.tar.xz; done
W=/tmp/g; mkdir -p $W
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER TILEWIRE_TIMEOUT_MS=5000
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $W/card.txt
b() {  # b <dist> <label> <limit> <env> args...
  local dn=$1 d=$PWD/dist-$1 label=$2 lim=$3 e=$4; shift 4
  local c=$(cat $d/COMMIT)
  echo "=== $label ($c; $e): tilewire bench $*" | tee -a $W/g.log
  env $e LD_LIBRARY_PATH=$d/lib:$N:/usr/local/cuda/lib64 TILEWIRE_COMMIT=$c timeout $lim $d/bin/tilewire bench "$@" --json $W/one.json >>$W/g.log 2>&1 &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["label"]=sys.argv[2]; d["env"]=sys.argv[3]; d["dist"]=sys.argv[4]; print(json.dumps(d))' $W/one.json "$label" "$e" "$dn" >>$W/g.jsonl
  rm -f $W/one.json
}
V=("cand X=0" "pace X=0" "pace TILEWIRE_RELAY_PACE_PCT=0" "pace TILEWIRE_RELAY_CONSUMER_ROWS=64" "pace TILEWIRE_RELAY_PACE_PCT=0 TILEWIRE_RELAY_CONSUMER_ROWS=64" "pace TILEWIRE_RELAY_PACE_PCT=30" "pace TILEWIRE_RELAY_PACE_PCT=0 TILEWIRE_RELAY_COMM_INFLIGHT=8" "pace TILEWIRE_RELAY_PULL=1")
for v in "${V[@]}"; do
  set -- $v; d=$1; shift; e="$*"
  b $d "rs P=4 attn" 60 "$e" gemm-rs --virtual 4 -m 4096,16384 -n 8192 -k 2048 -R 3 --iters 5
  b $d "rs P=4 8B FFN" 60 "$e" gemm-rs --virtual 4 -m 4096 -n 4096 -k 3584 -R 3 --iters 5
  b $d "rs P=2 attn" 60 "$e" gemm-rs --virtual 2 -m 4096 -n 8192 -k 4096 -R 3 --iters 5
  b $d "ar P=4 relay" 60 "$e" gemm-allreduce --virtual 4 -m 8192 -n 8192 -k 4096 -R 3 --iters 5
done
b pace "rs P=4 attn traced" 60 "X=0" gemm-rs --virtual 4 -m 4096 -n 8192 -k 2048 -R 3 --iters 5 --trace $W/rs4_attn_pace.json
b pace "rs P=4 attn traced unpaced" 60 "TILEWIRE_RELAY_PACE_PCT=0" gemm-rs --virtual 4 -m 4096 -n 8192 -k 2048 -R 3 --iters 5 --trace $W/rs4_attn_p0.json
python3 scripts/trace_split.py $W/rs4_attn_pace.json $W/rs4_attn_p0.json | tee $W/split.txt | grep -A3 "rank 0"
# The best of the first part by the geometric mean of fused / GEMM alone over its rows (the pace build)
BEST=$(python3 - $W/g.jsonl <<'PY'
import json, math, sys, collections
acc = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["dist"] != "pace" or "traced" in d["label"]: continue
    if "shapes" in d:
        for sh in d["shapes"]:
            r = {x["op"][:3]: x["us"] for x in sh["rows"] if x.get("ran")}
            acc[d["env"]].append(math.log(r["(g)"] / r["(a)"]))
    else:
        acc[d["env"]] += [math.log(r["t_fused_us"] / r["t_gemm_us"]) for r in d["rows"] if r.get("t_fused_us")]
best = min((v for v in acc if v not in ("X=0", "TILEWIRE_RELAY_PACE_PCT=0")), key=lambda v: sum(acc[v]) / len(acc[v]))
for v in acc: print("# %-70s %.4f" % (v, math.exp(sum(acc[v]) / len(acc[v]))), file=sys.stderr)
print("pace " + best)
PY
)
echo "best of the rest: $BEST" | tee -a $W/g.log
t0=$SECONDS
for r in 1 2; do
  for v in "pace X=0" "pace TILEWIRE_RELAY_PACE_PCT=0" "$BEST"; do
    set -- $v; d=$1; shift; e="$*"
    [ $((SECONDS - t0)) -lt 240 ] || { echo "!!! sweep budget spent: $r $v" | tee -a $W/g.log; continue; }
    for p in 2 4; do
      b $d "sweep rs llama P=$p r$r" 60 "$e" gemm-rs --virtual $p --sweep llama -R 3 --iters 5
      b $d "sweep ar acceptance P=$p r$r" 60 "$e" gemm-allreduce --virtual $p --sweep acceptance -R 3 --iters 5
    done
  done
done
python3 probe/g_table.py $W/g.jsonl
(cd $W && tar czf $OUT/g.tgz .)
