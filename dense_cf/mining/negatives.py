"""BM25 hard-negative mining for any DPR biencoder file (docs/method.md §8; DPR's BM25 negatives, docs/method.md §9).

``python -m dense_cf.cli.mine_bm25 --input biencoder-x.json[.gz] --corpus psgs_w100.tsv[.gz]
--output out.json[.gz] [--num_negatives 30 --top_k 100 --answer_mode string|regex
--index_dir DIR --existing replace|append]``

For each question, the corpus is ranked with BM25 (``bm25s``) over ``title + " " + text``, as
DPR's Lucene index did, and the best ``num_negatives`` passages are kept as
``hard_negative_ctxs`` (``{title, text, score, title_score: 0, passage_id}``, DPR's fields),
skipping

* the question's positives: same passage id (a ``wiki:`` prefix is ignored) or same title and
  text up to case and whitespace (so corpus duplicates of a positive are excluded too);
* answer-bearing passages: DPR's ``has_answer`` on the passage text (docs/method.md §6, ``answer_mode``);
* passages already among the kept hard negatives (append mode) and text duplicates;
* passages with BM25 score ≤ 0 (no query term in common: not a *hard* negative).

The rest of every record is written back unchanged (extra keys included). The index (bm25s
matrices + a random-access passage store) is saved to ``--index_dir`` and reused by later runs,
so the 21M-passage corpus is tokenised and indexed once. Questions are mined in shards written
to ``<output>.parts/`` (:mod:`dense_cf.mining.writers`); an interrupted run restarts where it
stopped and produces the same file. Bad input records are skipped and counted (``--strict``
raises instead); the summary (also in ``<output>.meta.json``) reports them.

Reusable pieces (model mining, :mod:`dense_cf.mining.model_negatives`, uses them too):
:class:`PassageStore`, :class:`BM25Index`, :func:`select_negatives`, :func:`mine_file`; and
:func:`bm25_negatives` for in-memory callers. BM25 and the store live in :mod:`dense_cf.index`.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from absl import logging

from dense_cf import files
from dense_cf.datasets import formats
from dense_cf.datasets.formats import BiencoderExample, SkipReport
from dense_cf.index.bm25 import ANSERINI, BM25Index
from dense_cf.index.passage_store import (
    PassageStore,
    corpus_fingerprint,
    open_store,
    write_meta_json,
)
from dense_cf.mining.writers import ShardedParts
from dense_cf.progress import Progress
from dense_cf.text import answers as answers_lib

__all__ = [
    "PassageStore", "BM25Index", "select_negatives", "bm25_negatives",
    "passage_key", "normalize_pid", "mine_file", "mine_bm25", "MiningStats",
    "corpus_fingerprint", "open_store",  # re-exported from index.passage_store for model_negatives
]

EXISTING_MODES = ("replace", "append")
_INDEX_FORMAT = 1


# ---------------------------------------------------------------------------------------------
# Identity of passages


def normalize_pid(pid: Any) -> str | None:
    """Passage id as compared across files: str, without DPR's ``wiki:`` prefix."""
    if pid is None:
        return None
    s = str(pid).strip()
    return s[5:] if s.startswith("wiki:") else s


def passage_key(title: str, text: str) -> tuple[str, str]:
    """Title and text up to case and whitespace: how a positive without an id is recognised."""
    return formats.fold(title), formats.fold(text)


# ---------------------------------------------------------------------------------------------
# Reading biencoder files with the raw records (extra keys survive the rewrite)


# ---------------------------------------------------------------------------------------------
# Selecting negatives from a ranking


@dataclass
class MiningStats:
    """Counts of what mining kept and why candidates were excluded."""

    counts: Counter = field(default_factory=Counter)

    def add(self, other: Mapping[str, int]) -> None:
        self.counts.update(other)

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def _ctx(pid: str, title: str, text: str, score: float) -> dict[str, Any]:
    """A DPR hard-negative ctx (title_score 0, as in DPR's files for non-title matches)."""
    return {"title": title, "text": text, "score": round(float(score), 4), "title_score": 0,
            "passage_id": pid}


def select_negatives(ranked: Iterable[tuple[int, float]],
                     lookup: Callable[[int], tuple[str, str, str]], *,
                     answers: Sequence[str], exclude_pids: Collection[str] = (),
                     exclude_keys: Collection[tuple[str, str]] = (), num: int,
                     answer_mode: str = "string", min_score: float | None = None,
                     skip_top: int = 0, stats: Counter | None = None) -> list[dict[str, Any]]:
    """The first ``num`` acceptable passages of ``ranked`` = (corpus row, score), best first.

    ``lookup(row)`` gives (id, title, text). Excluded, counted in ``stats`` under the name in
    brackets: the first ``skip_top`` ranks [skipped_top], rows with score ≤ ``min_score`` when
    given [excluded_low_score], ids in ``exclude_pids`` (normalised) [excluded_id], (title, text)
    keys in ``exclude_keys`` (see :func:`passage_key`) [excluded_text], repeats of an already
    selected text [excluded_duplicate] and answer-bearing texts (docs/method.md §6) [excluded_answer].
    """
    stats = stats if stats is not None else Counter()
    ex_pids = {normalize_pid(p) for p in exclude_pids}
    ex_keys = set(exclude_keys)
    picked: set[tuple[str, str]] = set()
    out: list[dict[str, Any]] = []
    for rank, (row, score) in enumerate(ranked):
        if len(out) >= num:
            break
        if row < 0:  # faiss pads short result lists with -1
            continue
        if rank < skip_top:
            stats["skipped_top"] += 1
            continue
        if min_score is not None and score <= min_score:
            stats["excluded_low_score"] += 1
            continue
        pid, title, text = lookup(int(row))
        key = passage_key(title, text)
        if normalize_pid(pid) in ex_pids:
            stats["excluded_id"] += 1
            continue
        if key in ex_keys:
            stats["excluded_text"] += 1
            continue
        if key in picked:
            stats["excluded_duplicate"] += 1
            continue
        if answers_lib.has_answer(answers, text, answer_mode):
            stats["excluded_answer"] += 1
            continue
        picked.add(key)
        out.append(_ctx(pid, title, text, score))
    return out


def bm25_negatives(index: BM25Index, questions: Sequence[str],
                   answers: Sequence[Sequence[str]], positive_ids: Sequence[Collection[str]], *,
                   num_negatives: int = 30, top_k: int = 100, answer_mode: str = "string",
                   threads: int = 0, batch_size: int = 1024,
                   stats: Counter | None = None) -> list[list[dict[str, Any]]]:
    """BM25 hard negatives (DPR ctx dicts) for in-memory questions; positives given by id."""
    out: list[list[dict[str, Any]]] = []
    for b in range(0, len(questions), batch_size):
        rows, scores = index.search(questions[b:b + batch_size], top_k, threads=threads)
        for i in range(len(rows)):
            q = b + i
            out.append(select_negatives(zip(rows[i].tolist(), scores[i].tolist()),
                                        index.store.get, answers=answers[q],
                                        exclude_pids=positive_ids[q], num=num_negatives,
                                        answer_mode=answer_mode, min_score=0.0, stats=stats))
    return out


# ---------------------------------------------------------------------------------------------
# Mining a biencoder file (shared by BM25 and model mining)

# rank(questions) -> per question a list of (corpus row, score), best first.
RankFn = Callable[[list[str]], list[list[tuple[int, float]]]]


def _exclusions(ex: BiencoderExample, existing: str) -> tuple[set[str], set[tuple[str, str]]]:
    ctxs = list(ex.positive_ctxs)
    if existing == "append":
        ctxs += ex.hard_negative_ctxs  # never mine a passage twice
    pids = {normalize_pid(p.passage_id) for p in ctxs if p.passage_id is not None}
    keys = {passage_key(p.title, p.text) for p in ctxs}
    return pids, keys


def mine_file(input_path: str, output: str, *, rank: RankFn,
              lookup: Callable[[int], tuple[str, str, str]], settings: Mapping[str, Any],
              num_negatives: int, answer_mode: str = "string", existing: str = "replace",
              min_score: float | None = None, skip_top: int = 0, shard_size: int = 5000,
              batch_size: int = 1024, work_dir: str | None = None, keep_parts: bool = False,
              skip_bad: bool = True, writer: bool = True) -> dict[str, Any]:
    """Mines ``hard_negative_ctxs`` for every record of ``input_path`` into ``output``.

    Records are processed in shards of ``shard_size`` (resumable, see :mod:`writers`), questions
    ranked ``batch_size`` at a time by ``rank``. ``existing`` = "replace" drops the input's hard
    negatives; "append" keeps them first and adds up to ``num_negatives`` new ones. ``writer``
    False (non-zero hosts of a multi-host job) computes but writes nothing. Returns the summary.
    """
    if existing not in EXISTING_MODES:
        raise ValueError(f"existing must be one of {EXISTING_MODES}, got {existing!r}")
    if num_negatives < 1 or shard_size < 1 or batch_size < 1:
        raise ValueError("num_negatives, shard_size and batch_size must be >= 1")
    work_dir = work_dir or f"{output}.parts"
    settings = {**dict(settings), "input": os.path.abspath(input_path),
                "input_bytes": os.path.getsize(input_path), "num_negatives": num_negatives,
                "answer_mode": answer_mode, "existing": existing, "skip_top": skip_top,
                "min_score": min_score, "shard_size": shard_size}
    parts = ShardedParts(work_dir, settings, read_only=not writer)
    report = SkipReport()
    stats = MiningStats()
    t0 = time.perf_counter()
    timing = {"mined": 0, "reused_shards": 0}
    # The input is streamed, so the question count (and an ETA) is unknown until the end.
    progress = Progress("mining", unit="questions", enabled=writer,
                        detail=lambda: f"{timing['reused_shards']} shard(s) reused")

    def process(shard: int, records: list[tuple[int, dict, BiencoderExample]]) -> None:
        if parts.is_done(shard):
            stats.add(parts.stats(shard))
            timing["reused_shards"] += 1
            logging.info("shard %d already mined, reused", shard)
            return
        counts: Counter = Counter()
        out: list[dict] = []
        for b in range(0, len(records), batch_size):
            batch = records[b:b + batch_size]
            ranked = rank([ex.question for _, _, ex in batch])
            for (_, raw, ex), cands in zip(batch, ranked):
                pids, keys = _exclusions(ex, existing)
                mined = select_negatives(cands, lookup, answers=ex.answers, exclude_pids=pids,
                                         exclude_keys=keys, num=num_negatives,
                                         answer_mode=answer_mode, min_score=min_score,
                                         skip_top=skip_top, stats=counts)
                rec = dict(raw)
                old = list(raw.get("hard_negative_ctxs") or []) if existing == "append" else []
                rec["hard_negative_ctxs"] = old + mined
                counts["questions"] += 1
                counts["negatives"] += len(mined)
                counts["questions_short"] += len(mined) < num_negatives
                out.append(rec)
            timing["mined"] += len(batch)
            progress.update(len(batch))
        parts.write(shard, out, counts)
        stats.add(counts)
        logging.info("shard %d: %d questions mined", shard, len(records))

    shard, buf, n_records = 0, [], 0
    done = parts.is_done(0)  # a done shard's records are read (for counts) but not kept
    for index, raw, ex in formats.iter_biencoder_records(input_path, skip_bad=skip_bad,
                                                         report=report):
        n_records = index + 1
        while index // shard_size > shard:
            process(shard, buf)
            shard, buf = shard + 1, []
            done = parts.is_done(shard)
        if raw is not None and not done:
            buf.append((index, raw, ex))
    num_shards = -(-n_records // shard_size)
    if shard < num_shards:
        process(shard, buf)
    progress.done()
    if report.total:
        report.log()
    summary = {"input": input_path, "output": output, "records": n_records,
               "skipped_records": report.total,
               "skipped_by_reason": {f"{r}": n for (_, r), n in sorted(report.counts.items())},
               "shards": num_shards, "reused_shards": timing["reused_shards"],
               "mined_this_run": timing["mined"],
               "questions_per_s": timing["mined"] / max(time.perf_counter() - t0, 1e-9),
               "stats": stats.as_dict(), "settings": settings}
    if writer:
        written = parts.assemble(output, num_shards)
        files.write_sidecar(output)  # the trainer checks it before reading the negatives
        summary["written"] = written
        write_meta_json(f"{output}.meta.json", summary)
        if not keep_parts:
            parts.remove()
    logging.info("mined %s -> %s: %s", input_path, output, json.dumps(summary["stats"]))
    return summary


def mine_bm25(input_path: str, corpus: str | None, output: str, *, num_negatives: int = 30,
              top_k: int = 100, answer_mode: str = "string", index_dir: str | None = None,
              existing: str = "replace", threads: int = 0, batch_size: int = 1024,
              shard_size: int = 5000, work_dir: str | None = None, keep_parts: bool = False,
              skip_bad: bool = True, k1: float = ANSERINI["k1"],
              b: float = ANSERINI["b"]) -> dict[str, Any]:
    """BM25 hard negatives for a biencoder file (see the module docstring); returns the summary."""
    if top_k < num_negatives:
        raise ValueError(f"top_k ({top_k}) must be >= num_negatives ({num_negatives})")
    corpus_report = SkipReport()
    index = BM25Index.open(corpus, index_dir, k1=k1, b=b, skip_bad=skip_bad,
                           report=corpus_report)
    if corpus_report.total:
        corpus_report.log()
    if not index_dir:
        logging.warning("no --index_dir: the BM25 index is discarded after this run "
                        "(pass --index_dir to build it once and reuse it)")

    def rank(questions: list[str]) -> list[list[tuple[int, float]]]:
        rows, scores = index.search(questions, top_k, threads=threads)
        return [list(zip(r.tolist(), s.tolist())) for r, s in zip(rows, scores)]

    settings = {"kind": "bm25", "top_k": top_k, "bm25": index.meta["bm25"],
                "tokenizer": index.meta["tokenizer"], "corpus_passages": len(index),
                "corpus": index.meta.get("corpus")}
    summary = mine_file(input_path, output, rank=rank, lookup=index.store.get, settings=settings,
                        num_negatives=num_negatives, answer_mode=answer_mode, existing=existing,
                        min_score=0.0, shard_size=shard_size, batch_size=batch_size,
                        work_dir=work_dir, keep_parts=keep_parts, skip_bad=skip_bad)
    summary["corpus_skipped_rows"] = corpus_report.total
    return summary
