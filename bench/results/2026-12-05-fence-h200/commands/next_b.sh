#!/usr/bin/env bash
# Call B (~9.5 min): GIN at the four shapes, 20 seeds each in 2 processes per shape, then memcheck 2x2.
# D: the dist to run (dist: main; dist-fence: the fence candidate).
cd "$(dirname "$0")/.."
D=${D:-dist}
[ -d $D ] || { [ $D = dist ] && tar xJf dist-pack/dist.tar.xz || tar xJf dist-fence-pack/dist-fence.tar.xz; }
mkdir -p /tmp/g
DIST=$PWD/$D OUT=/tmp/g GIN_PARALLEL=1 GIN_SPLIT=2 GIN_LIMIT=90 GIN_EP_LIMIT=420 GIN_MEMCHECK_LIMIT=100 timeout 570 bash scripts/gpu_run.sh gin
cp /tmp/g/gin_shapes.tgz /tmp/g/run.log "$OUT/" 2>/dev/null
grep -E '^(=== |!!!|#####)|PASSED|FAILED|ERROR SUMMARY' /tmp/g/run.log | tail -60
