"""Pieces that several experiment configs share, written once (docs/method.md §3, §9).

Config files in ``configs/`` import these; nothing here reads flags or files.
"""

from __future__ import annotations

import ml_collections

from dense_cf.configs.base import base_config


def with_method(c: ml_collections.ConfigDict, method: str) -> ml_collections.ConfigDict:
    """Sets ``c.method`` and unsets the loss weights, so the method's own apply (each method
    carries them: ``Method.loss_defaults``, docs/method.md §3)."""
    c.method = method
    c.loss.lam = c.loss.tau1 = c.loss.tau2 = None
    return c


def dpr_files(c: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
    """DPR's public file names of ``dataset`` (nq, trivia, squad1, webq, curatedtrec;
    docs/method.md §8). TriviaQA's qa files are published gzipped."""
    c.data.train_file = f"biencoder-{dataset}-train.json.gz"
    c.data.dev_file = f"biencoder-{dataset}-dev.json.gz"
    c.data.test_file = f"{dataset}-test.qa.csv" + (".gz" if dataset == "trivia" else "")
    return c


def dcsr_config(dataset: str = "nq") -> ml_collections.ConfigDict:
    """DCSR (docs/method.md §4) on one of DPR's datasets: in-passage negatives, sentence index."""
    c = with_method(dpr_files(base_config(), dataset), "dcsr")
    c.data.num_hard = 1
    c.dcsr.negatives = "in_passage"
    # AAR needs passage vectors; DCSR has sentence vectors (docs/dcsr.md): off.
    c.data.gold_file = ""
    return c


def demo_config(method: str = "picl") -> ml_collections.ConfigDict:
    """The embedded default: the synthetic QA benchmark + all-MiniLM-L6-v2 (~10 min on 2 CPU
    cores); the benchmark is generated into data_dir on first use."""
    c = with_method(base_config(), method)
    c.model.name_or_path = "minilm"
    c.data.data_dir = "runs/synthetic"
    c.data.train_file = "biencoder-synth-train.json"
    c.data.dev_file = "biencoder-synth-dev.json"
    c.data.corpus_file = "psgs_synth.tsv"
    c.data.test_file = "synth-test.qa.csv"
    c.data.gold_file = "synth-test_gold_info.json"
    c.eval.after_training = True
    c.eval.embedding_dtype = "float32"
    c.eval.robustness_counts = (0, 1, 2, 5)  # 300 questions x 5 variants: ~1,500 passages
    c.data.synthetic.generate = True
    c.data.synthetic.test_questions = 300     # AAR over 100 triplets is too noisy to compare
    c.data.max_q_len = 32
    c.data.max_p_len = 96
    # In-batch negatives only. The benchmark's BM25 hard negatives are sibling passages of the
    # gold entity without the answer: near-counterfactuals that already teach DPR answer-
    # awareness and contradict L_cpp's pivot premise (docs/replication.md, "Why the demo trains
    # without hard negatives"). Without them the demo isolates what counterfactuals add.
    c.data.num_hard = 0
    c.train.global_batch = 16
    c.train.num_steps = 100
    c.train.log_every = 10
    c.train.checkpoint_every = 50
    c.train.eval_every = 100
    c.train.eval_max_batches = 8
    c.optim.learning_rate = 5e-5
    c.optim.warmup_steps = 10
    for key, value in DEMO_METHOD_OVERRIDES.get(method, {}).items():
        node, leaf = key.rsplit(".", 1)
        c[node][leaf] = value
    return c


# Per-method demo settings. DCSR has sentence vectors (docs/dcsr.md): AAR and robustness are
# passage-level evaluations, so its demo run skips them.
# DCSR's negatives are sentences of the BM25 passage (docs/dcsr.md), so it keeps one.
DEMO_METHOD_OVERRIDES = {"dcsr": {"data.gold_file": "", "eval.robustness_counts": (),
                                  "data.num_hard": 1}}


def mdr_hotpot_config(method: str = "mdr") -> ml_collections.ConfigDict:
    """MDR (docs/multihop.md) on HotpotQA, full size: EADPR App. C (BERT-base, batch 120, 20
    beams) and MDR's lengths (question 70, passage 300, hop-2 query 350), shared encoder, lr
    2e-5, 2 distractor paragraphs as hard negatives, 50 epochs. Files of
    ``python -m dense_cf.cli.prepare_hotpot`` (docs/datasets.md): train v1.1, the distractor
    dev file (both gold paragraphs in context: AAR triplets), the full-wiki abstracts corpus."""
    if method not in ("mdr", "mdr-eadpr"):
        raise ValueError(f"mdr_hotpot_config takes 'mdr' or 'mdr-eadpr', got {method!r}")
    c = with_method(base_config(), method)
    c.model.name_or_path = "bert-base-uncased"
    c.model.shared = True                      # MDR: one encoder for queries and passages
    c.data.data_dir = "data/hotpot"
    c.data.train_file = "hotpot_train_v1.1.json"
    c.data.dev_file = "hotpot_dev_distractor_v1.json"
    c.data.test_file = "hotpot_dev_distractor_v1.json"
    c.data.corpus_file = "hotpot_wiki_abstracts.tsv"   # prepare_hotpot --corpus
    c.data.gold_file = ""                       # AAR per hop comes from the question file
    c.data.max_q_len = 70
    c.data.max_p_len = 300
    c.data.num_hard = 2
    c.data.max_hard_stored = 8
    c.multihop.max_hop2_len = 350
    c.multihop.comparison_order = "random"
    c.multihop.beam_size, c.multihop.hop2_k, c.multihop.top_chains = 20, 20, 20
    c.train.global_batch = 120                  # EADPR App. C (MDR: 150)
    c.train.num_epochs = 50
    c.train.eval_every = 2000
    c.optim.learning_rate = 2e-5
    c.optim.warmup_steps = 1000
    c.eval.after_training = True
    return c


def mdr_demo_config(method: str = "mdr-eadpr") -> ml_collections.ConfigDict:
    """MDR on the synthetic two-hop world (``dense_cf.synthetic.multihop``, generated into
    data_dir on first use) with all-MiniLM-L6-v2, sized for 2 CPU cores (docs/multihop.md)."""
    if method not in ("mdr", "mdr-eadpr"):
        raise ValueError(f"mdr_demo_config takes 'mdr' or 'mdr-eadpr', got {method!r}")
    c = with_method(base_config(), method)
    c.model.name_or_path = "minilm"
    c.model.shared = True
    c.data.data_dir = "runs/synthetic_multihop"
    c.data.train_file, c.data.dev_file = "hotpot_train.json", "hotpot_dev.json"
    c.data.test_file, c.data.corpus_file, c.data.gold_file = "hotpot_test.json", "corpus.tsv", ""
    c.data.synthetic.generate = True
    c.multihop.synthetic_questions = 3000      # train 2,400, dev 300, test 300; 6,000 passages
    c.data.max_q_len = 32
    c.data.max_p_len = 96
    c.data.num_hard = 1
    c.data.max_hard_stored = 8
    c.multihop.max_hop2_len = 128
    c.multihop.beam_size, c.multihop.hop2_k, c.multihop.top_chains = 10, 10, 20
    c.train.global_batch = 16
    c.train.num_steps = 150
    c.train.log_every = 10
    c.train.checkpoint_every = 50
    c.train.eval_every = 150
    c.train.eval_max_batches = 8
    c.optim.learning_rate = 5e-5
    c.optim.warmup_steps = 10
    c.eval.after_training = True
    c.eval.embedding_dtype = "float32"
    return c
def reader_config(dataset: str = "nq") -> ml_collections.ConfigDict:
    """DPR's extractive reader (docs/readers.md) on ``dataset``: BERT-base, 24 passages per
    question (1 positive + 23 negatives), 350 word pieces, answers of at most 10 word pieces,
    batch 16, learning rate 1e-5 (DPR's reader set-up), 16 epochs (DPR's README: best after
    16-18). ``reader.train_file`` /
    ``dev_file`` are a retriever's results on the train/dev questions (``python -m
    dense_cf.cli.reader_data``)."""
    c = dpr_files(base_config(), dataset)
    c.method = "reader"
    c.reader.train_file = c.reader.dev_file = ""  # set on the command line (configs/reader_nq.py)
    c.data.answer_mode = "regex" if dataset == "curatedtrec" else "string"
    c.train.global_batch = 16
    c.train.num_epochs = 16
    c.train.eval_every = 2000
    c.train.eval_max_batches = 100
    c.optim.learning_rate = 1e-5
    c.optim.warmup_steps = 0
    return c


def reader_demo_config() -> ml_collections.ConfigDict:
    """The demo's reader (docs/readers.md, "Demo"): MiniLM's first 3 layers, 4 passages per
    question, 128 word pieces (the synthetic passages fit), trained on the demo DPR run's
    results on 400 train questions for 300 steps of 4 questions (2-3 minutes on 2 CPU cores)."""
    c = base_config()
    c.method = "reader"
    c.model.name_or_path = "minilm"
    # MiniLM's [CLS] output is the same vector for every row (it was trained for mean pooling):
    # the selection head reads the mean of the row instead (docs/readers.md).
    c.model.pooling = "mean"
    c.reader.passages = 4
    c.reader.max_len = 128
    c.reader.max_q_len = 32
    c.reader.num_layers = 3
    c.reader.max_retrieved = 20
    # The selection head learns late: at 150 steps it picks the answer passage among 4 for half
    # the dev questions (EM then falls with k), at 300 for three quarters (docs/readers.md).
    # Few steps: a high rate (1e-4 barely moves the selection head).
    return _demo_reader_training(c)


def _demo_reader_training(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The demo readers' training (docs/readers.md): the demo DPR run's results, 300 steps of 4
    questions at 3e-4 after 15 warm-up steps, linear decay."""
    c.reader.train_file = "runs/demo/dpr/reader_data/step_100/train/retrieval.json"
    c.reader.dev_file = "runs/demo/dpr/reader_data/step_100/dev/retrieval.json"
    c.train.global_batch = 4
    c.train.num_steps = 300
    c.train.log_every = 10
    c.train.checkpoint_every = 100
    c.train.eval_every = 300
    c.train.eval_max_batches = 8
    c.optim.learning_rate = 3e-4
    c.optim.warmup_steps = 15
    c.optim.decay = "linear"
    return c


def mdr_reader_config() -> ml_collections.ConfigDict:
    """The multi-hop benchmark's reader (docs/multihop.md, "Reader"): the demo's reader
    (MiniLM's first 3 layers, 4 passages, 300 steps of 4 questions) over MDR's top chains, each
    chain one passage of two synthetic paragraphs (about 170 word pieces, 212 at the 90th
    percentile), hence 256 word pieces; ``reader.train_file`` / ``dev_file`` are set by
    ``dense_cf.studies.multihop``."""
    c = reader_demo_config()
    c.reader.train_file = c.reader.dev_file = ""
    c.reader.max_len = 256
    c.reader.max_retrieved = 20   # chains read per training question
    return c


# What the multi-hop benchmark's reader reads (dense_cf.studies.multihop; docs/multihop.md).
MDR_READER = {"train_questions": 400, "dev_questions": 64, "k": 20, "eval_ks": (1, 5, 10)}

# What the demo's reader stage reads and writes (dense_cf.demo; docs/readers.md, "Demo").
DEMO_READER = {"train_questions": 400, "dev_questions": 64, "k": 20, "eval_ks": (1, 5, 20)}


def fid_config(dataset: str = "nq") -> ml_collections.ConfigDict:
    """Fusion-in-Decoder base (Izacard & Grave 2021, §4; docs/readers.md) on ``dataset``: T5-base
    (``model.name_or_path``: a local HF T5 directory, given on the command line), 100 passages
    per question of 250 pieces, dropout 0.1, Adam at a constant 1e-4, batch 64, 10k steps,
    validation every 500. ``reader.train_file`` / ``dev_file`` are a retriever's results on the
    train/dev questions (``python -m dense_cf.cli.reader_data``), as the extractive reader's."""
    c = dpr_files(base_config(), dataset)
    c.method = "fid"
    c.model.name_or_path = "t5-base"
    c.model.dropout = 0.1
    c.reader.train_file = c.reader.dev_file = ""  # set on the command line (configs/fid_nq.py)
    c.data.answer_mode = "regex" if dataset == "curatedtrec" else "string"
    c.fid.n_passages, c.fid.max_len = 100, 250
    c.fid.max_answer_len, c.fid.decode_len = 32, 50
    c.train.global_batch = 64
    c.train.num_steps = 10_000
    c.train.checkpoint_every = 500
    c.train.eval_every = 500
    c.train.eval_max_batches = 50
    c.optim.learning_rate = 1e-4
    c.optim.warmup_steps = 0
    c.optim.decay = "constant"
    c.optim.grad_clip = 1.0   # FiD's code clips at 1.0 (the paper does not say)
    return c


def fid_demo_config() -> ml_collections.ConfigDict:
    """A CPU-sized FiD (docs/readers.md, "Fusion-in-Decoder"): T5-small (a local HF directory on
    the command line), 4 passages of 128 pieces per question, batch 4, 300 steps, on the demo DPR
    run's results (the extractive demo reader's files)."""
    c = fid_config("nq")
    c.model.name_or_path = "t5-small"
    c.fid.n_passages, c.fid.max_len = 4, 128
    c.fid.max_answer_len, c.fid.decode_len = 16, 16
    return _demo_reader_training(c)
