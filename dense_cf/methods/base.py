"""What a retrieval method is: one registry entry (docs/ARCHITECTURE.md, "The method seam").

A :class:`Method` names everything that differs between methods and nothing else:
- ``embed``: per-example embeddings of a (device-local) batch, as an :class:`Embeddings`
  pytree that carries its own validity masks;
- ``loss``: a pure function of GLOBAL-batch :class:`Embeddings` (the train step gathers them
  over every device and host first, docs/method.md §1) returning ``(loss, metrics)``;
- ``loss_hparams``: the static loss keyword arguments read from ``config.loss``;
- ``inputs``: how training files become batches (:class:`Inputs`);
- ``unit``: what is exported and indexed for retrieval, ``"passage"`` or ``"sentence"``;
- ``added_tokens``: tokens appended to the pretrained vocabulary, in id order;
- ``model``: how the network is built, initialised and given pretrained weights
  (:class:`ModelSpec`; default the BERT :class:`~dense_cf.models.dual_encoder.DualEncoder`);
- ``kind``: ``"retriever"`` (exported, indexed, evaluated by retrieval) or ``"reader"`` (a
  model trained by the same loop whose outputs are not vectors: the end-to-end QA readers);
- ``gather``: whether the step all-gathers ``embed``'s outputs before the loss (in-batch
  negatives need it; a per-example loss does not);
- ``hops``: retrieval hops per question: 1, or 2 for multi-hop retrievers (MDR,
  docs/multihop.md), which after-training evaluation sends to the multi-hop evaluator.
- ``predict``: a reader's answers to questions given ranked passages (:data:`PredictFn`), what
  ``python -m dense_cf.eval.e2e`` calls; None for retrievers.
- ``loss_defaults``: the method's own ``config.loss`` weights; a weight the config leaves unset
  (None) takes them (docs/method.md §3, "A method owns its weights").
- ``config_block``: the config node the method reads (``"dcsr"``, ``"multihop"``...; "" for none);
  ``config_problems(config)``: what is wrong with it and with ``config.loss`` for this method
  (the start-up check, ``train.validate``, asks the method; it never reads a method's block).
- ``sentence_index(config)``: how a sentence-unit method exports and searches sentences
  (:class:`SentenceIndex`); None for passage-unit methods.

The train step, export, retrieval and evaluation read these fields; no module outside
``dense_cf.methods`` branches on a method's name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp

from dense_cf.inputs import dpr as dpr_inputs
from dense_cf.models import dual_encoder as de
from dense_cf.models.bert import axis_rules_for
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer

__all__ = ["DPR_LENGTH_GROUPS", "DUAL_ENCODER", "Embeddings", "Inputs", "KINDS", "Method", "ModelSpec",
           "Prediction", "PredictFn", "SentenceIndex", "embed_passages", "predict_ks"]

KINDS = ("retriever", "reader")


@flax.struct.dataclass
class Embeddings:
    """Embeddings of one batch; every row belongs to one example.

    ``q`` [B, D] questions, ``pos`` [B, D] positives, ``neg`` [B, M, D] the example's own
    negatives (hard passages, or negative sentences) with ``neg_valid`` [B, M] bool, and
    optionally ``cf`` [B, D] counterfactual positives with ``cf_valid`` [B] bool.
    """

    q: jax.Array
    pos: jax.Array
    neg: jax.Array
    neg_valid: jax.Array
    cf: jax.Array | None = None
    cf_valid: jax.Array | None = None


EmbedFn = Callable[..., Embeddings]
LossFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A reader's answer to one question from its first k passages (docs/readers.md).

    ``passage_rank`` (0-based, in the retriever's order) and ``passage_id`` name the passage the
    answer was read from (-1 / None for a reader that reads all passages at once, e.g. FiD);
    ``score`` is the reader's own answer score (extractive: start + end logit; a generator: its
    sequence log-probability; None when there is no answer, ``text == ""``); ``passage_score``
    the passage's selection logit where there is one.
    """

    text: str
    score: float | None
    passage_rank: int = -1
    passage_id: str | None = None
    passage_score: float | None = None


# predict(run, questions, contexts, ks, *, batch_size, cache) -> {k: [Prediction per question]}:
# ``contexts[i]`` is question i's ranked passages (objects with ``id``, ``title``, ``text``);
# the prediction at k reads the first k of them. ``cache`` (a dict the caller keeps across calls,
# or None) lets a reader reuse per-passage work when several retrievers' lists are read.
PredictFn = Callable[..., dict[int, list[Prediction]]]


def predict_ks(questions: Sequence[str], contexts: Sequence[Sequence[Any]], ks: Sequence[int]) -> list[int]:
    """The sorted distinct ``ks`` of a :data:`PredictFn` call, after the checks every reader's
    ``predict`` makes: one host, one passage list per question, positive ks."""
    if jax.process_count() > 1:
        raise NotImplementedError("reader prediction runs on one host (jax.process_count() > 1)")
    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} passage lists")
    out = sorted({int(k) for k in ks})
    if not out or out[0] < 1:
        raise ValueError(f"ks must be positive integers, got {out}")
    return out


def embed_passages(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
                   rngs: dict[str, jax.Array] | None = None) -> Embeddings:
    """DPR-format batches: q [B,D], pos [B,D], hard negatives [B,h,D] and, when the batch has
    them, counterfactual positives [B,D].

    The passages of an example are stacked as [B, 1 + h (+1), L] and flattened, so each device
    encodes the passages of its own examples in one encoder call. A packed batch
    (``inputs.packing.pack_batch`` over ``DPR_LENGTH_GROUPS``: ``packed_q_*``, ``packed_pos_*``;
    ``data.pack_row_len``) holds the same rows in that order, packed per data shard.
    """
    b, h = batch["hard_valid"].shape[:2]
    has_cf = "cf_valid" in batch
    n = 1 + h + int(has_cf)

    def apply(fn, *args) -> jax.Array:
        return model.apply({"params": params}, *args, deterministic=deterministic, rngs=rngs,
                           method=fn)

    def packed(key: str) -> tuple[jax.Array, ...]:
        return tuple(batch[f"packed_{key}_{f}"] for f in PACKED_FIELDS)

    if "packed_q_ids" in batch:
        q = apply(model.encode_question_packed, *packed("q"))
    else:
        q = apply(model.encode_question, batch["q_ids"], batch["q_mask"])
    if "packed_pos_ids" in batch:
        p = apply(model.encode_passage_packed, *packed("pos"))
    else:
        parts_ids = [batch["pos_ids"][:, None], batch["hard_ids"]]
        parts_mask = [batch["pos_mask"][:, None], batch["hard_mask"]]
        if has_cf:
            parts_ids.append(batch["cf_ids"][:, None])
            parts_mask.append(batch["cf_mask"][:, None])
        ids = jnp.concatenate(parts_ids, axis=1)
        mask = jnp.concatenate(parts_mask, axis=1)
        p = apply(model.encode_passage, ids.reshape(b * n, -1), mask.reshape(b * n, -1))
    p = p.reshape(b, n, -1)
    return Embeddings(q=q, pos=p[:, 0], neg=p[:, 1:1 + h], neg_valid=batch["hard_valid"],
                      cf=p[:, 1 + h] if has_cf else None,
                      cf_valid=batch["cf_valid"] if has_cf else None)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """How a method's training files become batches.

    ``load(config, tokenizer, key, max_examples)`` reads the split ``config.data.<key>``
    (``"train_file"``/``"dev_file"``; None when the config names no file; the loop calls it on
    host 0 first, so it may write caches); ``prepare(config, tokenizer, data)`` turns a loaded
    split (or None) into the method's data; ``spec(config, tokenizer, shuffle=...,
    counterfactual=...)`` builds its batch spec (a dataclass with ``global_batch`` and
    ``shuffle``); ``make_dataset(data, spec, repeat=..., process_index=..., process_count=...)``
    and ``batch_iterator(data, spec, process_index=..., process_count=..., pipeline=...,
    grain_options=...)`` (``next``,
    ``get_state``/``set_state`` for exact resume) are the tf.data dataset and the resumable
    iterator over it. Loaded data has ``num_examples`` and a ``stats`` dict. ``file_problems(config)``
    lists what is wrong with the files ``load`` will read (missing, a directory...), for the
    config check at start-up. ``length_groups``: prefixes of the batch's ``<prefix>_ids`` /
    ``_mask`` arrays that share one padded length and may be cut to a length bucket
    (``data.length_buckets``, ``inputs.buckets.trim_batch``): every index into them must stay
    within a row's tokens; () = the batches are never cut.
    """

    prepare: Callable[..., Any]
    spec: Callable[..., Any]
    make_dataset: Callable[..., Any]
    batch_iterator: type
    load: Callable[..., Any] = dpr_inputs.load_config_split
    file_problems: Callable[[Any], list[str]] = dpr_inputs.file_problems
    length_groups: tuple[tuple[str, ...], ...] = ()


# Questions alone; passages together (embed_passages stacks pos, hard and cf in one call).
DPR_LENGTH_GROUPS = (("q",), ("pos", "hard", "cf"))
# The arrays of a packed group, in DualEncoder.encode_*_packed's argument order.
PACKED_FIELDS = ("ids", "mask", "segment_ids", "position_ids", "starts")
# An embed function that reads packed batches says which groups (Method.pack_groups).
embed_passages.pack_groups = DPR_LENGTH_GROUPS
DPR_INPUTS = Inputs(prepare=lambda config, tokenizer, data: data, spec=dpr_inputs.spec_from_config,
                    make_dataset=dpr_inputs.make_dataset, batch_iterator=dpr_inputs.BatchIterator,
                    length_groups=DPR_LENGTH_GROUPS)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How a method's network is built (docs/ARCHITECTURE.md, "The method seam").

    ``build(method, config, load_pretrained)`` -> ``(model, pretrained params or None, tokenizer
    directory)``; ``dummy_inputs(config)`` -> the positional arrays ``model.init`` takes;
    ``place_pretrained(model, pretrained)`` -> the unboxed param tree; ``axis_rules(model,
    model_axis_size, rules)`` -> the logical axis rules (``rules``: ``config.mesh.logical_axis_rules``
    or None).
    """

    build: Callable[..., tuple[Any, Any, str]]
    dummy_inputs: Callable[[Any], tuple[jax.Array, ...]]
    place_pretrained: Callable[[Any, Any], Any]
    axis_rules: Callable[..., Any]


def build_dual_encoder(method: Method, config, load_pretrained: bool = True):
    """The BERT dual encoder of ``config.model``; HF weights plus rows for the method's added
    tokens when it names a checkpoint (``(model, None, tok_dir)`` for ``tiny``)."""
    sources = de.tower_sources(config.model)
    if config.model.tokenizer:
        tok_dir = resolve_model_dir(config.model.tokenizer)
    elif sources:  # the towers of DPR checkpoints share BERT's vocabulary: the passage tower's
        tok_dir = sources["passage"].tokenizer_dir or sources["passage"].model_dir
    else:  # a random "tiny" model borrows MiniLM's uncased vocabulary
        tok_dir = resolve_model_dir("minilm")
    extra = method.added_tokens
    if sources and extra:  # a checkpoint exported by a run of this method has them already
        base = load_tokenizer(tok_dir)
        extra = tuple(t for t in extra if base.token_to_id(t) is None)
    model, sources = de.model_from_config(config, num_added_tokens=len(extra))
    hf_params = None
    if sources and load_pretrained:  # HF weights + rows for the method's added tokens
        hf_params = de.load_pretrained(model, sources, tok_dir, extra=extra,
                                       init=method.added_token_init(config), seed=config.seed)
    return model, hf_params, tok_dir


def _dual_encoder_dummies(config) -> tuple[jax.Array, ...]:
    q = jnp.ones((1, config.data.max_q_len), jnp.int32)
    p = jnp.ones((1, config.data.max_p_len), jnp.int32)
    return q, q, p, p


DUAL_ENCODER = ModelSpec(
    build=build_dual_encoder, dummy_inputs=_dual_encoder_dummies,
    place_pretrained=lambda model, hf: de.pretrained_params(model, hf, boxed=False),
    axis_rules=lambda model, size, rules=None: axis_rules_for(model.config, size, rules))


@dataclasses.dataclass(frozen=True)
class SentenceIndex:
    """What export, retrieval and evaluation need of a sentence-unit method (docs/dcsr.md).

    ``token``: the marker before each sentence (its output is the sentence vector);
    ``question_prefix``: questions start with ``token`` too; ``title``: passages keep their
    title; ``max_sents``: sentence vectors per passage at export; ``retrieve_sentences``:
    sentences retrieved per question (0: ``ceil(k * mean sentences per passage)``).
    """

    token: str
    question_prefix: bool
    title: bool
    max_sents: int
    retrieve_sentences: int


def default_evaluators(method: "Method") -> tuple[str, ...]:
    """What applies to a method of this kind: a passage retriever gets retrieval, AAR and
    robustness (the last two run when the config has a gold file / distractor counts); a
    sentence-unit retriever retrieval alone (AAR is defined over passage vectors, docs/dcsr.md);
    a two-hop retriever the multi-hop evaluation (AAR per hop inside it); a reader none."""
    if method.kind != "retriever":
        return ()
    if method.hops == 2:
        return ("multihop",)
    return ("retrieval",) if method.unit == "sentence" else ("retrieval", "aar", "robustness")


@dataclasses.dataclass(frozen=True)
class Method:
    """One method (module docstring)."""

    name: str
    loss: LossFn
    loss_hparams: Callable[[Any], dict[str, Any]] = lambda loss_config: {}
    embed: EmbedFn = embed_passages
    inputs: Inputs = DPR_INPUTS
    unit: str = "passage"
    added_tokens: tuple[str, ...] = ()
    # Whether batches carry counterfactual passages, given config.loss (docs/method.md §2).
    needs_counterfactual: Callable[[Any], bool] = lambda loss_config: False
    # How the rows of added tokens start, given the run config ("mean" when it has no say).
    added_token_init: Callable[[Any], str] = lambda config: "mean"
    model: ModelSpec = DUAL_ENCODER
    kind: str = "retriever"
    gather: bool = True
    hops: int = 1
    predict: PredictFn | None = None
    loss_defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    config_block: str = ""
    config_problems: Callable[[Any], list[str]] = lambda config: []
    sentence_index: Callable[[Any], SentenceIndex | None] = lambda config: None
    # The evaluations a run gets after training unless config.eval.evaluators names others
    # (eval.evaluators); None: what applies to its kind (default_evaluators).
    evaluators: tuple[str, ...] | None = None

    @property
    def pack_groups(self) -> tuple[tuple[str, ...], ...]:
        """The batch groups ``data.pack_row_len`` packs (``inputs.packing.pack_batch``): those
        the embed function declares it reads packed (its ``pack_groups`` attribute); () = this
        method's batches are never packed."""
        return tuple(getattr(self.embed, "pack_groups", ()))

    def __post_init__(self) -> None:
        if self.evaluators is None:
            object.__setattr__(self, "evaluators", default_evaluators(self))
        if self.hops not in (1, 2):
            raise ValueError(f"method {self.name}: hops must be 1 or 2, got {self.hops!r}")
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.predict is not None and self.kind != "reader":
            raise ValueError(f"method {self.name}: only a reader has a predict function")
        if self.unit not in ("passage", "sentence"):
            raise ValueError(f"method {self.name}: unit must be 'passage' or 'sentence', "
                             f"got {self.unit!r}")
