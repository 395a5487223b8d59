#!/usr/bin/env bash
# Issue #31 on one H100/H200 (no faiss, no TensorFlow): exact chunked top-k at 2^20 x 768 and
# DPR's 21,015,324 x 768, bfloat16 made on the device; ~100 s wall with compiles (estimate, not
# yet run). Then the exactness tests on the GPU itself (1,024-row chunks hit XLA's fast top-k).
# Run from the checkout with OUT set; ml-collections travels as a wheel in .whl/ (as run4.sh).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "=== bench.jax_search 2^20 and 21M x 768 bfloat16, k=100"
timeout 240 python3 -m dense_cf.bench.jax_search --n 1048576,21015324 --dim 768 --k 100 \
  --dtypes bfloat16 --batches 256,1024,4096 --chunk_rows 1024,4096 --queries 65536 \
  --check_queries 256 --max_search_s 1.5 --data device \
  --json_out "$OUT/jax_search_31.json" 2>&1 | grep -v "^I11"
echo "=== tests/test_jax_topk.py on the GPU"
JAX_PLATFORMS=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
  tests/test_jax_topk.py 2>&1 | tail -30
