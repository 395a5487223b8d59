#!/usr/bin/env bash
# Builds what tools/gpu/check.sh needs on a GPU host that has JAX but no TensorFlow and no
# network, into .carry/ (ignored by git; name it in the device call's carry): the wheels the
# host lacks (grain and its dependencies, ml-collections, pysbd, bm25s) for CPython 3.12 x86-64,
# all-MiniLM-L6-v2 as bfloat16 bits (45 MB; float32 is 91 MB, over the 64 MiB a call carries)
# and the 10,033 Wikipedia summaries as a DPR corpus TSV. Run from the checkout, once.
set -euo pipefail
CARRY=${CHECK_CARRY:-.carry}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$CARRY/whl"
PLAT=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do PLAT+=(--platform "$p"); done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLAT[@]}" -d "$CARRY/whl" "grain==0.2.18" "array-record==0.8.6" "ml-collections==1.1.0" \
  "pysbd==0.3.4" "portpicker==1.6.0" "bm25s==0.3.16"
"$PY" -m dense_cf.bench.gpu_check --mode=pack_minilm --src=minilm --dst="$CARRY/minilm_bf16"
"$PY" -m dense_cf.cli.wiki_corpus --out="$CARRY/wiki" >/dev/null
mv "$CARRY/wiki/psgs.tsv.gz" "$CARRY/wiki.tsv.gz" && rm -rf "$CARRY/wiki"
du -sh "$CARRY" "$CARRY"/*
