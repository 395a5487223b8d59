#!/usr/bin/env bash
# The training and export levers in one device call (issue 47; ../shared/reviews/gpu-levers.md
# §4-§6). Run from the checkout with OUT set; every figure is one JSON line appended to
# $OUT/levers.jsonl as soon as it is measured (a part that times out keeps what it printed).
# Parts (LEVERS_PARTS, comma list, default all, in this order), each under `timeout`:
#   layer   one BertLayer fwd+bwd at [384, 256, 768] bf16: baseline, dropout 0, LN recomputed
#           from bf16, remat keeping matmul outputs, remat dots_no_batch, fused QKV, tanh-GELU,
#           XLA attention (vs cuDNN in the baseline), LN remat + fused QKV
#   flags   the baseline again per XLA flag of §4.2, one subprocess each (cuBLASLt also with
#           tanh-GELU, its epilogue case); an unknown flag is recorded as accepted=false
#   hlo     the baseline layer step's optimised HLO by class (matmul, attention, layernorm,
#           GELU, dropout, elementwise) with FLOPs/bytes and a roofline share; the optimizer alone
#   attn    dot_product_attention fwd+bwd at [384, 256, 12, 64]: XLA, cuDNN, cuDNN + padding
#   encode  device-only passage encoding at token-budget buckets (4096x32 ... 512x256): MFU
#   pack    real tokens/s of the passage tower, packed rows vs padded rows, on the Wikipedia corpus
#   export_base  the same export with none of the export levers (tokenised from the TSV, the
#           default batches and dispatch, shards written in line): the A/B reference of export
#   export  end-to-end export (dense_cf.bench.export) of 100k passages from the pre-tokenised
#           table, 32k-row shards, 128K-token batches per bucket, 3 batches in flight, background
#           shard writer; its encode-only rate and MFU apart
#   decide  the §6 decision rules over levers.jsonl: which lever is adopted
#   step    (not in the default list; ~75 s) the isolated train step at the paper's shapes
#           (dense_cf.bench.accelerator) with LEVERS_STEP_ARGS, e.g. "--layer_norm_remat
#           --fused_qkv --remat --remat_policy=matmul_outputs", under LEVERS_STEP_XLA_FLAGS
# Environment: LEVERS_SIZE=full (a GPU; default) | tiny (the CPU test, tests/test_gpu_levers.py);
# LEVERS_CARRY (default .carry, from tools/gpu/prepare_carry.sh); LEVERS_TOKENIZER (tiny: a
# vocabulary directory); LEVERS_VARIANTS (layer: a comma subset). Full size fits one device call
# (the limits below sum to 555 s; the 30 Nov H200 run took 240 s without export_base), leaving
# room for one rerun of a part in a 15-minute lease.
set -u
: "${OUT:?set OUT to a folder for the results}"
SIZE=${LEVERS_SIZE:-full}
PARTS=${LEVERS_PARTS:-layer,flags,hlo,attn,encode,pack,export_base,export,decide}
CARRY=${LEVERS_CARRY:-.carry}
PY=${PYTHON:-python3}
W=${LEVERS_WORK:-$(mktemp -d)}
J=$OUT/levers.jsonl
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import ml_collections" 2>/dev/null && ls "$CARRY"/whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/check_site \
    "$CARRY"/whl/*.whl || exit 1
  export PYTHONPATH="$PYTHONPATH:/tmp/check_site"
fi
T0=$(date +%s)
say() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",$PARTS," in *",$1,"*) return 0;; *) return 1;; esac; }
# part NAME SECONDS CMD...: the command under timeout, its log tail on failure.
part() {
  local name=$1 limit=$2; shift 2
  say "$name (limit ${limit} s)"
  timeout "$limit" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc ($name)"
  [ $rc -eq 0 ] || grep -v "^[IW][0-9]\{4\}" "$W/$name.log" | tail -8
  cp "$W/$name.log" "$OUT/$name.log" 2>/dev/null
  return 0
}
if [ "$SIZE" = tiny ]; then
  TOK=${LEVERS_TOKENIZER:-minilm}
  L_LAYER=120 L_FLAGS=120 L_HLO=60 L_ATTN=60 L_ENCODE=60 L_PACK=90 L_EXPORT=120 L_EXPORT_BASE=120
  EXPORT_SIZE=(--tiny=32,1,2 --passages=64 --batch_size=16 --max_p_len=64 --shard_size=32)
  EXPORT_LEVERS=(--token_table --in_flight=3 --background_write --token_budget=1024)
else
  TOK=$W/minilm
  [ -d "$CARRY/minilm_bf16" ] && "$PY" -m dense_cf.bench.gpu_check --mode=unpack_minilm \
    --src="$CARRY/minilm_bf16" --dst="$TOK" 2>&1 | tail -1
  # Estimated (gpu-levers.md §6; compiles of ~4-8 s per layer variant): layer ~90 s, flags ~90
  # (5 subprocesses of ~15 s: import, CUDA init, compile), hlo ~20, attn ~15, encode ~45 (four
  # 12-layer compiles), pack ~45 (three 4-layer fwd+bwd compiles), export ~80 (table build,
  # the buckets' compiles, 100k passages twice). Sum of the limits: 525 s with export_base,
  # plus 30 for decide: one device call (600 s at most).
  # Measured on an H200 (30 Nov, every default part but export_base): 239.5 s in all (layer 31,
  # flags 63, hlo 12, attn 9, encode 30, pack 26, export 58). export_base (added after) ~60 s.
  L_LAYER=80 L_FLAGS=100 L_HLO=30 L_ATTN=25 L_ENCODE=55 L_PACK=55 L_EXPORT=90 L_EXPORT_BASE=90
  # 128K-token batches: 4096 x 32 ... 512 x 256 (gpu-levers.md §5.2 lever 4)
  EXPORT_SIZE=(--tiny=768,12,12 --passages=100000 --batch_size=512 --max_p_len=256
               --shard_size=32768 --dtype=bfloat16)
  EXPORT_LEVERS=(--token_table --in_flight=3 --background_write --token_budget=131072)
fi
CORPUS="$CARRY/wiki.tsv.gz"
if [ ! -f "$CORPUS" ]; then  # the CPU test: the installed Wikipedia summaries
  "$PY" -m dense_cf.cli.wiki_corpus --out="$W/wiki" >/dev/null 2>&1 && CORPUS="$W/wiki/psgs.tsv.gz"
fi
L=("$PY" -m dense_cf.bench.levers "--size=$SIZE" "--out=$J")

say "host"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader
has layer && part layer "$L_LAYER" "${L[@]}" --part=layer ${LEVERS_VARIANTS:+--variants=$LEVERS_VARIANTS}
has flags && part flags "$L_FLAGS" "${L[@]}" --part=flags --flag_timeout=35
has hlo && part hlo "$L_HLO" "${L[@]}" --part=hlo
has attn && part attn "$L_ATTN" "${L[@]}" --part=attn
has encode && part encode "$L_ENCODE" "${L[@]}" --part=encode
has pack && part pack "$L_PACK" "${L[@]}" --part=pack --corpus="$CORPUS" --tokenizer="$TOK"
# export_part NAME LIMIT EXTRA...: bench.export of the replicated corpus, its JSON as one line.
export_part() {
  local name=$1 limit=$2; shift 2
  part "$name" "$limit" "$PY" -m dense_cf.bench.export --model=tiny --tokenizer="$TOK" \
    --corpus="$CORPUS" --attention_impl=dot_product --replicate "${EXPORT_SIZE[@]}" "$@" \
    --out="$W/$name.json"
  [ -f "$W/$name.json" ] && "$PY" -c "import json,sys; d=json.load(open(sys.argv[1]));
d.update(part=sys.argv[2]); print(json.dumps(d, sort_keys=True, default=float))" \
    "$W/$name.json" "$name" | tee -a "$J"
}
has export_base && export_part export_base "$L_EXPORT_BASE"
has export && export_part export "$L_EXPORT" "${EXPORT_LEVERS[@]}"
if has step; then
  if [ "$SIZE" = tiny ]; then STEP_SIZE=(--shapes=small --steps=2 --warmup=1); else
    STEP_SIZE=(--shapes=paper --steps=5 --warmup=1); fi
  # shellcheck disable=SC2086  # LEVERS_STEP_ARGS is a list of flags
  XLA_FLAGS="${XLA_FLAGS:-} ${LEVERS_STEP_XLA_FLAGS:-}" part step 150 "$PY" -m \
    dense_cf.bench.accelerator "${STEP_SIZE[@]}" --export=false --search=false \
    --matmul_peak=false --check_sharding=false ${LEVERS_STEP_ARGS:-} --out="$W/step.json"
  [ -f "$W/step.json" ] && "$PY" -c "import json,sys; t=json.load(open(sys.argv[1]))['train'];
print(json.dumps({'part': 'step', 'args': sys.argv[2], 'xla_flags': sys.argv[3],
                  **{k: t.get(k) for k in ('step_s_median', 'achieved_flops_model', 'mfu',
                                           'compile_s', 'loss')}}, default=float))" \
    "$W/step.json" "${LEVERS_STEP_ARGS:-}" "${LEVERS_STEP_XLA_FLAGS:-}" | tee -a "$J"
fi
has decide && part decide 30 "${L[@]}" --part=decide && grep -v "^[IW][0-9]\{4\}\|^{" "$W/decide.log"
say "done"
