#!/usr/bin/env bash
# Third GPU session (issue 12): the accelerator default (cuDNN attention, bf16, hidden dropout
# 0.1 with jax's default threefry PRNG) with export and the matmul peak, then two dropout
# levers on the train step alone: the rbg PRNG for dropout masks, and no dropout at all.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
B="python3 -m dense_cf.bench.accelerator --shapes=paper --steps=5 --warmup=1 --export_batches=4"
T="--export=false --matmul_peak=false"
for v in "cudnn|150|" "cudnn_rbg|100|--rng_impl=rbg $T" "cudnn_nodrop|100|--dropout=0 $T"; do
  IFS='|' read -r name limit args <<< "$v"
  echo "=== bench $name: $B $args"
  timeout "$limit" $B $args --out="$OUT/accel_$name.json" 2>&1 | grep -v "^[IW]1124\|^ \|^{\|^}"
done 2>&1 | tee "$OUT/run3.log"
