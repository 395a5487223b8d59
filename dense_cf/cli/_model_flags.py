"""``--workdir RUN`` or ``--model CHECKPOINT``: what the evaluation binaries evaluate.

With ``--model`` (any checkpoint :mod:`dense_cf.models.checkpoints` reads: "minilm", an HF BERT,
DPR or sentence-transformers directory, an ``export_hf`` directory, a hub name) nothing is
trained: the encoder is evaluated as it is, in ``--out_root/<model name>-<pooling>-<hash>/``
(which holds its ``config.json`` like a run directory, so exports and indexes are reused).
The data come from ``--config`` (e.g. ``configs/demo.py``; default: the base config) with
``--data_dir`` and the file flags of each binary on top (:func:`define_data_flags`: ``--gold``,
``--qa``, ``--corpus``, ``--index``, one definition for every evaluation binary).
"""

from __future__ import annotations

import os
from typing import Any

from absl import flags, logging
from ml_collections import config_flags

from dense_cf.configs.base import base_config, merge_over_base, resolve_paths
from dense_cf.files import UserError, read_json
from dense_cf.index import kinds as index_kinds
from dense_cf.models.checkpoints import EXPORT_MANIFEST
from dense_cf.models.dual_encoder import AUTO, POOLINGS
from dense_cf.train.run import Run, model_workdir, pretrained_run

DEFAULT_OUT_ROOT = "model_eval"


def define_model_flags(fv: flags.FlagValues) -> None:
    """``--workdir`` | ``--model`` (+ ``--question_model``, ``--pooling``, ``--normalize``,
    ``--config``, ``--data_dir``, ``--out_root``) in ``fv``."""
    kw = {"flag_values": fv}
    flags.DEFINE_string("workdir", None, "Run directory (trained with dense_cf.main); or --model.", **kw)
    flags.DEFINE_string("model", None, "Evaluate this checkpoint untrained instead of a run: "
                        "'minilm', an HF BERT / DPR / sentence-transformers / export_hf directory, "
                        "or a hub name (both towers; see --question_model).", **kw)
    flags.DEFINE_string("question_model", None, "With --model: the question tower's checkpoint "
                        "(e.g. a DPR question encoder beside a --model ctx encoder).", **kw)
    flags.DEFINE_enum("pooling", AUTO, [AUTO, *POOLINGS], "With --model: 'auto' takes a "
                      "sentence-transformers model's own pooling (and normalisation), else cls.", **kw)
    flags.DEFINE_bool("normalize", False, "With --model and --pooling cls|mean: unit-length "
                      "embeddings.", **kw)
    config_flags.DEFINE_config_file("config", None, "With --model: a config file whose data and "
                                    "eval settings apply (e.g. configs/demo.py); default: the base "
                                    "config. Overrides as --config.data.max_p_len=128.", **kw)
    flags.DEFINE_string("data_dir", None, "With --model: the data directory (config.data.data_dir).", **kw)
    flags.DEFINE_string("out_root", DEFAULT_OUT_ROOT, "With --model: reports go to "
                        "OUT_ROOT/<model>-<pooling>-<hash>/.", **kw)


def index_help(default: str) -> str:
    """``--index``'s help: the registered index kinds (index/kinds.py) and ``default``."""
    return f"{' | '.join(index_kinds.names())} (default: {default})."


# The evaluation binaries' data flags: name -> default help (a binary may reword one).
DATA_FLAGS = {
    "gold": "Gold passages info JSON (default: config).",
    "qa": "Test qa CSV with the answers (default: config).",
    "corpus": "Corpus TSV (default: the run's config).",
    "index": index_help("config"),
}


def define_data_flags(fv: flags.FlagValues, *names: str, **helps: str
                      ) -> dict[str, flags.FlagHolder]:
    """The data flags ``names`` (of :data:`DATA_FLAGS`; ``gold`` also as ``--gold_file``) in
    ``fv``, strings defaulting to None (the run's config); ``helps`` rewords a flag's help."""
    unknown = sorted(set(names) - set(DATA_FLAGS)) + sorted(set(helps) - set(names))
    if unknown:
        raise ValueError(f"define_data_flags: unknown or undefined flags {unknown}; "
                         f"data flags: {sorted(DATA_FLAGS)}")
    out = {}
    for name in names:
        out[name] = flags.DEFINE_string(name, None, helps.get(name, DATA_FLAGS[name]),
                                        flag_values=fv)
        if name == "gold":
            flags.DEFINE_alias("gold_file", "gold", flag_values=fv)
    return out


def model_config(fv: flags.FlagValues) -> Any:
    """The config that evaluates ``--model``: data and eval from ``--config``, the model from
    the flags; the method is the exporting run's (``export.json``) or plain DPR."""
    cfg = merge_over_base(fv["config"].value.to_dict()) if fv["config"].value is not None else base_config()
    if fv["data_dir"].value:
        cfg.data.data_dir = fv["data_dir"].value
    m = cfg.model
    m.name_or_path = fv["model"].value
    m.question_path = fv["question_model"].value or ""
    m.passage_path = ""
    m.pooling, m.normalize = fv["pooling"].value, bool(fv["normalize"].value)
    m.shared = False
    m.tokenizer = ""
    manifest = read_json(os.path.join(os.path.expanduser(m.name_or_path), EXPORT_MANIFEST)) \
        if os.path.isdir(os.path.expanduser(m.name_or_path)) else None
    method = (manifest or {}).get("method", "dpr")
    if cfg.method != method:
        logging.info("--model: evaluating as method %s (%s), not the config's %s", method,
                     "from its export.json" if manifest else "an untrained encoder", cfg.method)
    cfg.method = method
    if manifest and manifest["towers"]["question"] == manifest["towers"]["passage"] \
            and not m.question_path:
        m.shared = True
    cfg.train.num_steps = 0
    return resolve_paths(cfg)


def workdir_and_run(fv: flags.FlagValues) -> tuple[str, Run | None]:
    """(run directory, None: load it there) for ``--workdir``; (model directory, the untrained
    :class:`Run`) for ``--model``. Exactly one of the two is required."""
    workdir, model = fv["workdir"].value, fv["model"].value
    if bool(workdir) == bool(model):
        raise UserError("pass exactly one of --workdir (a trained run) and --model (a checkpoint "
                        "evaluated untrained)")
    model_only = [n for n in ("question_model", "data_dir") if fv[n].value] + \
        (["config"] if fv["config"].value is not None else [])
    if workdir:
        if model_only:
            raise UserError(f"--{', --'.join(model_only)} only go with --model; a run directory "
                            "has its own config")
        if not os.path.isdir(workdir):  # say so before the workdir lock would create it
            raise UserError(f"--workdir {workdir}: no such directory (expected a dense_cf run "
                            "directory)")
        return workdir, None
    cfg = model_config(fv)
    run = pretrained_run(cfg)
    workdir = model_workdir(cfg, fv["out_root"].value)
    logging.info("evaluating %s untrained (pooling %s%s) in %s", model, run.model.pooling,
                 " + normalize" if run.model.normalize else "", workdir)
    return workdir, run
