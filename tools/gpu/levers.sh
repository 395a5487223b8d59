#!/usr/bin/env bash
# Next GPU session (not yet run): the paper-shape train step under the MFU levers that
# docs/feasibility.md lists, one process each (~15 s host init + ~60 s compile + steps), then a
# profile-free per-variant table from the JSONs. Run from the checkout with OUT set; carry
# ml-collections as a wheel in whl/ where the host lacks it.
set -u
if ls whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
B="python3 -m dense_cf.bench.accelerator --shapes=paper --steps=10 --warmup=2"
T="--export=false --matmul_peak=false"
for v in "default|200|" "nodrop|150|--dropout=0 $T" \
         "remat_dots|170|--remat --remat_policy=dots_with_no_batch_dims_saveable --rng_impl=rbg $T"; do
  IFS='|' read -r name limit args <<< "$v"
  echo "=== $name: $B $args"
  timeout "$limit" $B $args --out="$OUT/accel_$name.json" 2>&1 | grep "^\[accelerator\|^train\|^export"
done 2>&1 | tee "$OUT/levers.log"
