#!/usr/bin/env bash
# Next call for the MoE's Python side (~6 min): the python mode on main's build (dist-main, e911014):
# pytest under torchrun (the new test_moe_and_grouped_mm_custom_ops_compile), the three examples
# (the new examples/python/moe_block.py: a MoE block under torch.compile). carry: probe, dist-main-pack.
cd "$(dirname "$0")/.."
[ -x dist-main/bin/tilewire ] || tar xJf dist-main-pack/dist-main.tar.xz
DIST=$PWD/dist-main OUT=$OUT/py timeout 560 bash scripts/gpu_run.sh python
grep -E '^===|passed|failed|moe_block|moe_layer|tp_mlp' $OUT/py/run.log | tail -30
