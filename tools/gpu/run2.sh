#!/usr/bin/env bash
# Second GPU session (issue 12): the paper-shape bench with progress lines, cuDNN attention
# (accelerator config) then the paper-faithful einsum attention with attention dropout 0.1.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
B="python3 -m dense_cf.bench.accelerator --shapes=paper --steps=5 --warmup=1 --export_batches=4"
for v in "cudnn|280|" "einsum|200|--attention_impl=einsum --attention_dropout=0.1 --matmul_peak=false"; do
  IFS='|' read -r name limit args <<< "$v"
  echo "=== bench $name: $B $args"
  timeout "$limit" $B $args --out="$OUT/accel_$name.json" 2>&1 | grep -v "^[IW]1124\|^ \|^{\|^}" \
    | tee "$OUT/accel_$name.log"
done
