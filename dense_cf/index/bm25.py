"""The one BM25 of dense_cf: a bm25s index over ``title + " " + text`` (docs/method.md §8).

Used by BM25 mining (:mod:`dense_cf.mining.negatives`, Lucene/Anserini k1 = 0.9, b = 0.4) and by
the synthetic generator (:mod:`dense_cf.synthetic.generate`, bm25s' own k1 = 1.5, b = 0.75 and
``bm25s.tokenize``, so its files stay byte-identical). ``k1``, ``b`` and the tokenizer are
explicit parameters everywhere: the two callers differ on purpose.
"""

from __future__ import annotations

import array
import json
import os
import re
import tempfile
import time
from typing import Any, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np
from absl import logging

from dense_cf import files
from dense_cf.datasets import formats
from dense_cf.datasets.formats import SkipReport
from dense_cf.index.passage_store import (
    INDEX_FORMAT,
    PassageStore,
    build_atomically,
    check_fingerprint,
    corpus_fingerprint,
    verify_built,
    write_meta_json,
)
from dense_cf.progress import timed

__all__ = ["BM25Index", "bm25_tokenize", "bm25_document", "search_texts", "ANSERINI",
           "BM25S_DEFAULTS", "TOKENIZERS", "bm25s_info"]

# Lucene/Anserini's parameters, as used by Pyserini's BM25 for DPR (the mining default).
ANSERINI = {"k1": 0.9, "b": 0.4}
# bm25s' own defaults (``bm25s.BM25()``): what the synthetic benchmark was generated with.
BM25S_DEFAULTS = {"k1": 1.5, "b": 0.75}
# "regex": :func:`bm25_tokenize` (streams a 21M-passage corpus without bm25s' lists);
# "bm25s": ``bm25s.tokenize`` itself (same tokens; kept for the synthetic files' byte identity).
TOKENIZERS = ("regex", "bm25s")

TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_TOKEN_RE = re.compile(TOKEN_PATTERN)


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN
    return frozenset(STOPWORDS_EN)


def bm25_tokenize(text: str, stopwords: Collection[str]) -> list[str]:
    """Lowercased ``\\w\\w+`` tokens minus stop words (bm25s's default tokeniser)."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in stopwords]


def bm25_document(title: str, text: str) -> str:
    """What BM25 indexes for a passage: title and text, as DPR's Lucene index."""
    return f"{title} {text}"


class BM25Index:
    """bm25s over ``title + text`` of a corpus, with its :class:`PassageStore`.

    ``directory`` layout: ``bm25/`` (bm25s ``save``; loaded with ``mmap=True``), the store files,
    ``meta.json`` (parameters, corpus fingerprint, bm25s version) and ``SHA256SUMS`` over them
    all (written last; checked by :meth:`load`).
    """

    def __init__(self, retriever, store: PassageStore, meta: Mapping[str, Any],
                 tmp: tempfile.TemporaryDirectory | None = None) -> None:
        self.retriever, self.store, self.meta = retriever, store, dict(meta)
        self._tmp = tmp  # keeps an unnamed index's directory alive with the object
        self._stopwords = _stopwords()

    def __len__(self) -> int:
        return len(self.store)

    @classmethod
    def open(cls, corpus: str | None, directory: str | None, *, k1: float, b: float,
             method: str = "lucene", skip_bad: bool = True,
             report: SkipReport | None = None) -> "BM25Index":
        """Loads the index in ``directory`` or builds it from ``corpus`` (saved there if given).

        ``k1``/``b``: see :data:`ANSERINI` (mining) and :data:`BM25S_DEFAULTS`. The saved index
        always uses the "regex" tokenizer (:func:`bm25_tokenize`).
        """
        if directory and os.path.exists(os.path.join(directory, "meta.json")):
            index = cls.load(directory)
            check_fingerprint(directory, index.meta, corpus)
            want = {"k1": k1, "b": b, "method": method}
            have = {key: index.meta["bm25"][key] for key in want}
            if want != have:
                logging.warning("%s was built with %s; using it (not %s)", directory, have, want)
            logging.info("BM25 index loaded from %s (%d passages)", directory, len(index))
            return index
        if corpus is None:
            raise FileNotFoundError(f"no BM25 index in {directory} and no corpus to build one")
        # Without a report the reader logs its own skip counts (duplicate ids, bad rows).
        rows = formats.read_corpus_tsv(corpus, skip_bad=skip_bad, report=report)
        extra = {"corpus": corpus_fingerprint(corpus)}
        return cls.build(rows, directory, k1=k1, b=b, method=method, meta=extra)

    @classmethod
    def build(cls, rows: Iterable[tuple[str, str, str]], directory: str | None = None, *,
              k1: float, b: float, method: str = "lucene",
              meta: Mapping[str, Any] | None = None) -> "BM25Index":
        """Indexes (id, text, title) rows; saved to ``directory``, else to a private temp dir."""
        import bm25s  # lazy: heavy import (pulls in JAX)

        stop = _stopwords()
        vocab: dict[str, int] = {}
        docs: list[array.array] = []

        def on_row(pid: str, text: str, title: str) -> None:
            ids = array.array("i")  # ~4 bytes/token instead of a list of Python ints
            for tok in bm25_tokenize(bm25_document(title, text), stop):
                tid = vocab.get(tok)
                if tid is None:
                    tid = vocab[tok] = len(vocab)
                ids.append(tid)
            docs.append(ids)

        def build(out: str) -> None:
            t0 = time.perf_counter()
            n = PassageStore.write(out, rows, on_row)
            if n == 0:
                raise ValueError("the corpus has no passages")
            tok_s = time.perf_counter() - t0
            retriever = bm25s.BM25(k1=k1, b=b, method=method)
            with timed(f"BM25 index: indexing {n} passages with bm25s", "BM25 index: indexed"):
                retriever.index(bm25s.tokenization.Tokenized(ids=docs, vocab=vocab),
                                create_empty_token=False, show_progress=False)
            docs.clear()
            retriever.save(os.path.join(out, "bm25"), show_progress=False)
            info = {"format": INDEX_FORMAT, "passages": n,
                    "bm25": {"k1": k1, "b": b, "method": method,
                             "bm25s_version": str(getattr(bm25s, "__version__", "unknown"))},
                    "tokenizer": {"pattern": TOKEN_PATTERN, "lower": True, "stopwords": "en",
                                  "document": "title + ' ' + text"},
                    "vocab_size": len(vocab), "tokenize_s": tok_s,
                    "index_s": time.perf_counter() - t0 - tok_s, **dict(meta or {})}
            write_meta_json(os.path.join(out, "meta.json"), info)  # last: marks the index complete
            files.seal_dir(out)  # checked by every load
            logging.info("BM25 index: %d passages, %d terms, %.1f s", n, len(vocab),
                         time.perf_counter() - t0)

        if directory:
            build_atomically(directory, build)
            return cls.load(directory)
        tmp = tempfile.TemporaryDirectory(prefix="dense_cf_bm25-")
        build(tmp.name)
        index = cls.load(tmp.name)
        index._tmp = tmp
        return index

    @classmethod
    def load(cls, directory: str) -> "BM25Index":
        import bm25s

        verify_built(directory, "BM25 index")
        with open(os.path.join(directory, "meta.json")) as f:
            meta = json.load(f)
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(f"{directory}: index format {meta.get('format')}, expected "
                             f"{INDEX_FORMAT}: delete it to rebuild")
        retriever = bm25s.BM25.load(os.path.join(directory, "bm25"), mmap=True,
                                    show_progress=False)
        store = PassageStore(directory)
        if len(store) != retriever.scores["num_docs"]:
            raise ValueError(f"{directory}: store has {len(store)} passages, BM25 matrix "
                             f"{retriever.scores['num_docs']}: delete it to rebuild")
        return cls(retriever, store, meta)

    def search(self, questions: Sequence[str], k: int, *, threads: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k corpus rows by BM25: (rows int64 [Q, k], scores float32 [Q, k]), best first."""
        k = min(int(k), len(self))
        if not questions:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        q_tokens = [bm25_tokenize(q, self._stopwords) for q in questions]
        # "auto" = bm25s's JAX top-k when JAX is installed (it is here): numpy's argpartition
        # is far slower on the mostly-zero score vector of a large corpus.
        docs, scores = self.retriever.retrieve(q_tokens, k=k, show_progress=False,
                                               n_threads=threads, backend_selection="auto")
        return np.asarray(docs, np.int64).reshape(len(questions), k), \
            np.asarray(scores, np.float32).reshape(len(questions), k)


def search_texts(documents: Sequence[str], queries: Sequence[str], k: int, *, k1: float,
                 b: float, tokenizer: str, method: str = "lucene", threads: int = 0,
                 block: int = 4096) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """In-memory BM25 over ``documents``: per block of ``queries``, (rows [q, k], scores [q, k]).

    Nothing is written to disk (the synthetic generator's case). ``k`` is capped at the corpus
    size; rows are best first.
    """
    import bm25s  # lazy: heavy import (pulls in JAX), only needed here

    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer {tokenizer!r} not in {TOKENIZERS}")
    if tokenizer == "bm25s":
        corpus_tokens = bm25s.tokenize(list(documents), stopwords="en", show_progress=False)
    else:
        stop = _stopwords()
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in bm25_tokenize(d, stop)]
               for d in documents]
        corpus_tokens = bm25s.tokenization.Tokenized(ids=ids, vocab=vocab)
    retriever = bm25s.BM25(k1=k1, b=b, method=method)
    with timed(f"BM25: indexing {len(documents)} documents", "BM25: indexed"):
        retriever.index(corpus_tokens, show_progress=False)
    del corpus_tokens
    k = min(k, len(documents))
    stop = _stopwords() if tokenizer == "regex" else None
    for lo in range(0, len(queries), block):
        qs = list(queries[lo:lo + block])
        if tokenizer == "bm25s":
            q_tokens = bm25s.tokenize(qs, stopwords="en", return_ids=False, show_progress=False)
        else:
            q_tokens = [bm25_tokenize(q, stop) for q in qs]
        # "auto" = bm25s's JAX top-k when JAX is installed (it is here): numpy's argpartition
        # is ~35x slower on the mostly-zero score vector of a 1M-passage corpus.
        docs, scores = retriever.retrieve(q_tokens, k=k, show_progress=False, n_threads=threads,
                                          backend_selection="auto")
        yield docs, scores


def bm25s_info() -> dict[str, str]:
    """bm25s version and top-k backend: tie order among equal BM25 scores depends on them."""
    import bm25s
    from bm25s import selection

    return {"version": str(getattr(bm25s, "__version__", "unknown")),
            "topk_backend": "jax" if getattr(selection, "JAX_IS_AVAILABLE", False) else "numpy"}
