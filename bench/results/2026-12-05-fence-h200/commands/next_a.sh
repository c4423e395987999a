#!/usr/bin/env bash
# Call A (~5 min): the ll mode at the fence candidate against 72a2347-ep and main.
cd "$(dirname "$0")/.."
tar xJf dist-pack/dist.tar.xz && tar xJf dist-fence-pack/dist-fence.tar.xz
mkdir -p /tmp/a
DIST=$PWD/dist-fence OUT=/tmp/a LL_ROUNDS=2 LL_BEFORE_TAR="$PWD/dist-before-pack/dist-before.tar.xz $PWD/dist-pack/dist.tar.xz" timeout 420 bash scripts/gpu_run.sh ll
(cd /tmp/a && tar czf "$OUT/ll.tgz" .)
grep -E '^(===|!!!)|PASSED|FAILED|ERROR SUMMARY' /tmp/a/run.log | grep -v 'bench ep --mode ll' | tail -30
python3 probe/ll_table.py /tmp/a/bench_ll.jsonl 2>&1 | tail -45
