"""The default experiment config; files in ``configs/`` start from it and change what differs.

Every field is data: an experiment is a config file (or ``--config.x.y=`` overrides), never a
code branch. Defaults follow docs/method.md §9 (DPR's NQ set-up) unless noted.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Mapping

import ml_collections


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.method = "dpr"
    c.seed = 0

    c.model = ml_collections.ConfigDict()
    c.model.name_or_path = "bert-base-uncased"  # "minilm", a local HF dir, a hub name, or "tiny"
    c.model.shared = False                      # separate question/passage towers (docs/method.md §9)
    c.model.question_path = ""                  # per-tower checkpoints (e.g. DPR's question and
    c.model.passage_path = ""                   # ctx encoders); "" = name_or_path (docs/interop.md)
    c.model.pooling = "cls"                     # DPR's [CLS] without pooler; mean | auto (the
    c.model.normalize = False                   # checkpoint's sentence-transformers pooling + norm)
    c.model.dtype = "float32"                   # compute dtype; "bfloat16" on accelerators
    c.model.remat = False
    c.model.remat_policy = "nothing_saveable"  # or dots_with_no_batch_dims_saveable | dots_saveable
    #                                            | matmul_outputs (MaxText's "minimal")
    # Training levers (docs/feasibility.md "Switches"; issue 47), off until a device run adopts one:
    c.model.layer_norm_remat = False            # LayerNorm recomputed from its bf16 input
    c.model.fused_qkv = False                   # one QKV matmul (same params)
    c.model.hidden_act = ""                     # "": the checkpoint's; gelu_new = tanh GELU (opt-in)
    c.model.dropout = 0.1
    c.model.attention_dropout = ml_collections.config_dict.placeholder(float)  # None: = dropout
    # einsum | dot_product | xla | cudnn. dot_product: jax.nn.dot_product_attention, cuDNN on GPU
    # in half precision, else XLA's; with attention dropout the einsum path (it has no dropout).
    # Export at 96-256 tokens on CPU: 1.3-1.5x faster than einsum (docs/scale.md "The PyTorch peer").
    c.model.attention_impl = "dot_product"
    # Matmul operands rounded to this dtype, products summed in model.dtype ("" = model.dtype).
    # "bfloat16" on a CPU with AVX512_BF16 (Zen 4, Sapphire Rapids): GEMMs ~1.6x float32, and the
    # metrics within their intervals (docs/scale.md "bfloat16 operands on the CPU"). Off by
    # default: results stay bit-identical across machines; slower on CPUs without AVX512_BF16.
    c.model.matmul_dtype = ""
    c.model.tiny_hidden = 32                    # only for name_or_path="tiny" (random init)
    c.model.tiny_layers = 2
    c.model.tiny_heads = 2
    c.model.tiny_vocab = 30522                  # MiniLM's uncased vocabulary (the tokenizer used)
    c.model.tokenizer = ""                      # defaults to the model's own; "tiny" needs one

    c.data = ml_collections.ConfigDict()
    c.data.data_dir = "data/dpr"
    c.data.train_file = "biencoder-nq-train.json.gz"
    c.data.dev_file = "biencoder-nq-dev.json.gz"
    c.data.cache_dir = ""                       # default: <data_dir>/.cache
    c.data.pipeline = "tfdata"                  # tfdata | grain (TensorFlow-free); the same batches
    c.data.grain_threads = 8                    # grain: threads building batches in parallel
    c.data.grain_prefetch = 16                  # grain: batches read ahead
    c.data.max_q_len = 64
    c.data.max_p_len = 256
    c.data.length_buckets = ()                  # training: pad each batch to the smallest of these
                                                # that fits (e.g. (64, 96, ..., 256)); () = off,
                                                # every batch at max_q_len / max_p_len (docs/scale.md)
    c.data.pack_row_len = 0                     # training: pack questions and passages into rows of
                                                # this many tokens, several per row (block-diagonal
                                                # attention; inputs/packing.py); 0 = off
    c.data.pack_rows_multiple = 2               # packed row counts round up to a multiple of this
                                                # (fewer distinct shapes, so fewer compiles)
    c.data.num_hard = 1                         # hard negatives per question in a batch
    c.data.max_hard_stored = 5                  # sampled from (DPR shuffles hard negatives)
    c.data.counterfactual = "sentence"          # sentence | window | answer | evidence
    c.data.window = 5
    c.data.evidence_file = ""
    c.data.answer_mode = "string"               # "regex" for CuratedTREC
    c.data.max_train_examples = 0               # 0 = all
    c.data.train_fraction = 1.0                 # uniform seeded subset of train (docs/method.md §7 data-efficiency)
    c.data.train_fraction_seed = 0              # = `python -m dense_cf.cli.stats --seed`
    c.data.max_dev_examples = 0
    # Evaluation files (docs/method.md §8): corpus TSV, test qa CSV, gold passages info (AAR triplets).
    c.data.corpus_file = "psgs_w100.tsv.gz"
    c.data.test_file = "nq-test.qa.csv"
    c.data.gold_file = "nq-test_gold_info.json.gz"
    c.data.synthetic = ml_collections.ConfigDict(
        {"generate": False, "num_passages": 2000, "seed": 0, "test_questions": 0,  # 0: default share
         "questions_per_passage": 1,  # k > 1: questions on k sentences of a positive (DCSR)
         "world": "entity",  # "mixed": every sentence of a passage about another entity (SQuAD-like)
         # BM25 hard negatives: "sibling" (the gold entity's other passages, the former and
         # default files) | "other_entity" (other entities' passages only, as on NQ)
         "hard_negatives": "sibling"})

    # Loss weights (docs/method.md §3). None: the method's own (Method.loss_defaults: DPR 0, PiCL
    # 0.2/1/1, EADPR 1/1/1), filled in when training starts; weights that contradict the
    # method are refused there.
    c.loss = ml_collections.ConfigDict()
    c.loss.use_dpr = True
    c.loss.lam = ml_collections.config_dict.placeholder(float)
    c.loss.tau1 = ml_collections.config_dict.placeholder(float)
    c.loss.tau2 = ml_collections.config_dict.placeholder(float)

    # DCSR (docs/method.md §4; read by the dcsr method and its inputs; docs/dcsr.md).
    c.dcsr = ml_collections.ConfigDict()
    c.dcsr.negatives = "in_passage"             # Table 4: in_passage | bm25 | bm25x2 | in_batch
    c.dcsr.question_prefix = True               # "[CLS] <sent> q [SEP]" (the authors' code)
    c.dcsr.title = True                         # "[CLS] title [SEP] <sent> s1 ..."; False: no title
    # <sent> embedding row: normal (an untrained row, as the authors' [unused0]) | mean | sep |
    # cls (a [CLS] copy: every marker output then equals [CLS]'s on MiniLM; docs/dcsr.md)
    c.dcsr.sent_init = "normal"
    c.dcsr.max_sents = 32                       # sentence vectors per passage at export (rest counted)
    c.dcsr.retrieve_sentences = 0               # 0: ceil(eval.k * mean sentences/passage) (paper)

    # Multi-hop retrieval (MDR, docs/multihop.md): read by the mdr methods and eval.multihop.
    c.multihop = ml_collections.ConfigDict()
    c.multihop.max_hop2_len = 350               # "[CLS] q [SEP] title [SEP] text [SEP]" (MDR's max_q_sp_len)
    c.multihop.comparison_order = "random"      # random (per epoch, MDR) | dataset | both
    c.multihop.beam_size = 20                   # hop-1 passages expanded (EADPR App. C: 20 beams)
    c.multihop.hop2_k = 20                      # hop-2 passages retrieved per beam
    c.multihop.top_chains = 20                  # passage chains kept, best chain score first
    c.multihop.ks = (2, 10, 20)                 # chain R@k reported (EADPR Table 4)
    c.multihop.synthetic_questions = 0          # > 0 with data.synthetic.generate: the two-hop world
    # The extractive reader (method "reader"; docs/readers.md). Defaults: DPR's reader set-up.
    c.reader = ml_collections.ConfigDict()
    c.reader.train_file = ""                    # retrieval.json of a retriever on the TRAIN
    c.reader.dev_file = ""                      # (dev) questions: python -m dense_cf.cli.reader_data
    c.reader.passages = 24                      # per question in a batch: 1 positive + 23 negatives
    c.reader.max_len = 350                      # [CLS] q [SEP] title [SEP] text [SEP] word pieces
    c.reader.max_q_len = 64                     # question part, incl. [CLS] and [SEP]
    c.reader.max_answer_len = 10                # word pieces of a predicted span
    c.reader.max_spans = 10                     # gold occurrences marginalised per positive
    c.reader.max_positives = 20                 # positives kept per question (rank order)
    c.reader.max_negatives = 50                 # negatives kept per question (rank order)
    c.reader.max_retrieved = 0                  # passages read per training question; 0 = all
    c.reader.num_layers = 0                     # keep the first N encoder layers; 0 = all
    # The Fusion-in-Decoder reader (method "fid"; docs/readers.md): it reads reader.train_file /
    # dev_file too. Defaults: FiD's NQ set-up (Izacard & Grave 2021).
    c.fid = ml_collections.ConfigDict()
    c.fid.n_passages = 100                      # retrieved passages read jointly per question
    c.fid.max_len = 250                         # T5 pieces per "question: q title: t context: c" row
    c.fid.max_answer_len = 32                   # training target pieces, </s> included
    c.fid.decode_len = 50                       # greedy decoding steps at prediction (FiD's 50)

    c.optim = ml_collections.ConfigDict()
    c.optim.learning_rate = 2e-5
    c.optim.warmup_steps = 1237                 # DPR's NQ setting
    c.optim.decay = "linear"                    # after warm-up: linear to 0 (DPR), or "constant" (FiD)
    c.optim.grad_clip = 2.0
    c.optim.b1 = 0.9
    c.optim.b2 = 0.999
    c.optim.eps = 1e-8
    c.optim.weight_decay = 0.0

    c.train = ml_collections.ConfigDict()
    c.train.global_batch = 128                  # 8 devices x 16 (docs/method.md §9)
    c.train.num_epochs = 40
    c.train.num_steps = 0                       # overrides num_epochs when > 0
    c.train.stop_at_step = 0                    # stop early (resumable) without changing the schedule
    c.train.dropout = True
    c.train.grad_cache_chunks = 1               # >1: GradCache, encode global_batch/chunks at a time
    c.train.log_every = 50
    c.train.checkpoint_every = 1000
    c.train.keep_checkpoints = 3
    c.train.async_checkpoint = True
    c.train.eval_every = 2000
    c.train.eval_max_batches = 0

    c.eval = ml_collections.ConfigDict()
    c.eval.after_training = False               # run retrieval + AAR evaluation when training ends
    c.eval.evaluators = ""                      # comma-separated eval.evaluators names (or
                                                # "pkg.module:ATTR"); "": the method's own set
    c.eval.index = "flat"                       # flat | hnsw | ivfpq | sq8 | ivfsq (faiss) | jax
    # eval.index=jax: search in JAX on the device mesh (index/jax_search.py, docs/scale.md).
    c.eval.jax = ml_collections.ConfigDict()
    c.eval.jax.dtype = "float32"                # float32 | bfloat16 | float16: corpus dtype on the devices
    c.eval.jax.approx = False                   # jax.lax.approx_max_k (approximate on TPU only)
    c.eval.jax.recall_target = 0.95             # approx_max_k's recall target
    c.eval.jax.query_batch_size = 256           # queries per jitted search call; 0: sized to the device
    c.eval.jax.block_rows = 65_536              # corpus rows scored at once per device
    c.eval.jax.select = "auto"                  # auto | bmc | chunked | sort: exact top-k per block
    c.eval.jax.bin_rows = 0                     # bmc: rows per bin; 0: the platform's (jax_search.AUTO_SELECT)
    c.eval.jax.prune_bins = 0                   # bmc: carry-threshold pruning to this many bins; 0: off
    c.eval.jax.chunk_rows = 1024                # chunked: rows per chunk (whole chunks per block)
    c.eval.jax.chunk_k = 16                     # chunked: candidates per chunk (GPU fast top-k: <= 16)
    c.eval.jax.rescan_chunks = 4                # chunked: unsafe chunks re-scanned per query by gathering
    c.eval.index_nlist = 0                      # IVF lists; 0 = auto (4 sqrt(N)), docs/scale.md
    c.eval.index_pq_m = 0                       # ivfpq bytes per code; 0 = default_pq_m(D)
    c.eval.index_train_size = 262_144           # IVF/PQ training sample (float32 in RAM at build)
    c.eval.index_nprobe = 32                    # IVF lists searched (search-time: no rebuild)
    c.eval.rerank = 0                           # >0: re-rank this many candidates exactly from
                                                # the memory-mapped export (docs/scale.md)
    c.eval.corpus_store = ""                    # passage store of the corpus ("": in the run
                                                # dir); one directory can serve many runs
    c.eval.k = 100                              # passages retrieved per question
    c.eval.ks = (1, 5, 20, 100)
    c.eval.batch_size = 128                     # encoding batch (questions and passages)
    c.eval.embedding_dtype = "float16"          # export dtype on disk
    c.eval.shard_size = 100_000                 # passages per export shard
    # Export / question encoding: each batch of rows sorted by length is padded to the smallest
    # of these that fits (one compile each); lengths >= max_len are dropped, max_len is added.
    # () = every row at max_len. Vectors equal within float tolerance (docs/scale.md).
    c.eval.length_buckets = (32, 64, 96, 128, 160, 192, 224, 256)
    # Export / question encoding: rows packed several to a row of min(this, 2 x max_len) tokens
    # (block-diagonal attention; rows longer than that stay padded as above); 0 = off. Vectors
    # equal within float tolerance; an opt-in lever (docs/scale.md "Packed export").
    c.eval.pack_row_len = 0
    # On a CPU backend: at most this many token slots per device in one encoder call (rows =
    # this // the bucket's length, at most batch_size); 0 = batch_size rows. Accelerators ignore
    # it. ~1,000-token calls stay in the caches (docs/scale.md "Inference calls on the CPU").
    # The extractive reader's inference (DPR reader, end-to-end EM) follows it too.
    c.eval.cpu_call_tokens = 1024
    c.eval.aar_strategies = ("sentence", "answer")  # AAR (PiCL Def. 3) and EADPR's AA score
    c.eval.robustness_counts = ()               # e.g. (0, 1, 2, 5, 10, 20): EADPR Fig. 5; () = off
    c.eval.robustness_heldout = False           # also held-out distractors (value swaps,
                                                # paraphrases, namesakes) beside the p*-style ones
    # Held-out kinds and their round-robin order (synthetic.distractors.KINDS); the default is
    # today's (K=5 = value swap, paraphrase, namesake, value swap, paraphrase). Issue 50's
    # "rule_paraphrase" is opt-in: appending it would change what a K holds.
    c.eval.robustness_heldout_kinds = ("value_swap", "paraphrase", "namesake")

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1                            # all devices not used by `model`
    c.mesh.model = 1
    c.mesh.logical_axis_rules = ml_collections.config_dict.placeholder(tuple)
    return c


def merge_over_base(saved: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """``saved`` (a run's config.json, or a partial config) over :func:`base_config`.

    Fields added since a run was saved take their defaults here, so call sites (the model
    builder, the loaders) never carry defaults of their own. Lists become tuples.
    """

    def merge(base: ml_collections.ConfigDict, over: Mapping[str, Any]) -> None:
        for k, v in over.items():
            nested = isinstance(v, (Mapping, ml_collections.ConfigDict))
            if k in base and isinstance(base[k], ml_collections.ConfigDict) and nested:
                merge(base[k], v)
            else:
                with base.ignore_type():
                    base[k] = tuple(v) if isinstance(v, list) else v

    cfg = base_config()
    merge(cfg, saved)
    return cfg


# Config fields that name local paths. Relative values mean "relative to the directory the
# command was started in" (README, "Paths"); resolve_paths fixes them at launch.
PATH_FIELDS: tuple[str, ...] = ("data.data_dir", "data.cache_dir", "data.evidence_file",
                                "reader.train_file", "reader.dev_file")


def resolve_paths(config: ml_collections.ConfigDict, cwd: str | None = None
                  ) -> ml_collections.ConfigDict:
    """A copy of ``config`` whose relative :data:`PATH_FIELDS` are absolute (against ``cwd``,
    default the current directory), so the ``config.json`` a run saves finds its data from any
    directory later. Data file names (``data.train_file``...) stay relative to ``data_dir``;
    a model name that is a local directory relative to ``cwd`` becomes absolute too."""
    cwd = cwd or os.getcwd()
    out = copy.deepcopy(config)
    for dotted in PATH_FIELDS:
        section, key = dotted.split(".")
        value = out[section].get(key)
        if value and not os.path.isabs(value):
            out[section][key] = os.path.normpath(os.path.join(cwd, value))
    for key in ("name_or_path", "question_path", "passage_path"):
        name = out.model.get(key)
        if name and not os.path.isabs(name) and os.path.isdir(os.path.join(cwd, name)):
            out.model[key] = os.path.normpath(os.path.join(cwd, name))
    return out
