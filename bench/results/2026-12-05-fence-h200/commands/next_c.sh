#!/usr/bin/env bash
# Call C (~9.5 min): the whole binary at 1 real and 2, 4, 8 virtual ranks, EP at 3 and EARLY=1.
cd "$(dirname "$0")/.."
D=${D:-dist}
[ -d $D ] || { [ $D = dist ] && tar xJf dist-pack/dist.tar.xz || tar xJf dist-fence-pack/dist-fence.tar.xz; }
mkdir -p /tmp/w
DIST=$PWD/$D OUT=/tmp/w WHOLE_MEMCHECK=0 timeout 575 bash scripts/gpu_run.sh whole
(cd /tmp/w && tar czf "$OUT/whole.tgz" .)
grep -E '^(===|!!!)|PASSED|FAILED' /tmp/w/run.log | tail -30
