"""Flags shared by the two negative miners (``cli.mine_bm25``, ``cli.mine_model``)."""

from __future__ import annotations

from absl import flags

from dense_cf.mining.negatives import EXISTING_MODES


def define_common_flags(flag_values: flags.FlagValues) -> None:
    """Input/output, selection and sharding flags of a mining binary, in ``flag_values``."""
    fv = {"flag_values": flag_values}
    flags.DEFINE_string("input", None, "DPR biencoder JSON[.gz] whose questions are mined for.",
                        **fv)
    flags.DEFINE_string("corpus", None, "Corpus TSV[.gz] (id, text, title), e.g. psgs_w100.tsv.",
                        **fv)
    flags.DEFINE_string("output", None, "Output biencoder JSON[.gz] with hard_negative_ctxs.", **fv)
    flags.DEFINE_integer("num_negatives", 30, "Hard negatives kept per question.", **fv)
    flags.DEFINE_enum("answer_mode", "string", ["string", "regex"],
                      "DPR has_answer mode (regex for CuratedTREC).", **fv)
    flags.DEFINE_enum("existing", "replace", list(EXISTING_MODES),
                      "Input hard negatives: replace them, or keep them and append mined ones.",
                      **fv)
    flags.DEFINE_integer("batch_size", 1024, "Questions ranked per batch.", **fv)
    flags.DEFINE_integer("shard_size", 5000, "Input records per resumable output shard.", **fv)
    flags.DEFINE_string("work_dir", None, "Shard directory (default: <output>.parts).", **fv)
    flags.DEFINE_bool("keep_parts", False, "Keep the shard directory after assembly.", **fv)
    flags.DEFINE_bool("strict", False, "Raise on the first bad input record instead of skipping.",
                      **fv)
    flags.mark_flags_as_required(["input", "output"], flag_values=flag_values)
