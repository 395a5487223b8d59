#!/usr/bin/env bash
# First GPU session (issue 12): versions, the accelerator bench in three attention variants,
# the attention tests on the GPU and the TF-free CPU tests. Run from the repository root with
# OUT set; wheels missing on the host (ml-collections) in whl/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
LOG=$OUT/run1.log
{
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c 'import jax, jaxlib, flax, optax, importlib.metadata as md; print("versions", jax.__version__, jaxlib.__version__, flax.__version__, optax.__version__, md.version("orbax-checkpoint"), md.version("chex"), md.version("numpy")); print(jax.devices())'
python3 -m pip list 2>/dev/null | grep -i -E "^(jax|flax|optax|orbax|nvidia-cudnn|ml.dtypes|tensorstore|numpy|chex) "
} 2>&1 | tee $LOG
B="python3 -m dense_cf.bench.accelerator --shapes=paper --steps=5 --warmup=1 --export_batches=4"
for v in "cudnn|" "einsum|--attention_impl=einsum --attention_dropout=0.1 --matmul_peak=false" \
         "xla|--attention_impl=xla --matmul_peak=false"; do
  name=${v%%|*}; args=${v#*|}
  echo "=== bench $name: $B $args" | tee -a $LOG
  timeout 160 $B $args --out=$OUT/accel_$name.json > $OUT/accel_$name.log 2>&1
  echo "rc=$?" | tee -a $LOG; grep -v "^I0000\|^W0000" $OUT/accel_$name.log | tail -12 | tee -a $LOG
  if [ $name = cudnn ]; then
    echo "=== GPU tests" | tee -a $LOG
    JAX_PLATFORMS=cuda XLA_FLAGS= timeout 90 python3 -m pytest -q -x tests/test_attention.py 2>&1 | tail -5 | tee -a $LOG
  fi
done
echo "=== CPU tests (8 simulated devices)" | tee -a $LOG
JAX_PLATFORMS=cpu timeout 100 python3 -m pytest -q -n 8 tests/test_losses.py tests/test_gradcache.py tests/test_sharding.py tests/test_bert.py tests/test_hf.py tests/test_dual_encoder.py 2>&1 | tail -5 | tee -a $LOG
