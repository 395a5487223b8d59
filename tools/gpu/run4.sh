#!/usr/bin/env bash
# GPU session of 2026-11-27: JAX search (eval.index=jax) on the lent GPU, which has no faiss
# (docs/feasibility.md said "not yet run on a GPU"), then the sharding tests with 8 simulated
# CPU devices on that host's jax 0.11.2 (one failed there on 2026-11-24, text not captured).
# Run from the checkout with OUT set; ml-collections travels as a wheel in .whl/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import jax, jaxlib; print('jax', jax.__version__, jaxlib.__version__, jax.devices())"
S="python3 -m dense_cf.bench.jax_search --dims 768 --queries 1024 --batch 256 --k 100"
echo "=== search 2^20 x 768"
timeout 200 $S --n 1048576 --rounds 2 --json_out "$OUT/jax_search_1m.json" 2>&1 | grep -v "^I11"
echo "=== search 2^22 x 768"
timeout 150 $S --n 4194304 --rounds 1 --extra jax-bf16 --json_out "$OUT/jax_search_4m.json" 2>&1 | grep -v "^I11"
echo "=== tests/test_sharding.py, 8 simulated CPU devices"
JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 timeout 150 \
  python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_sharding.py 2>&1 | tail -60
