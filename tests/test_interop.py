"""Interop with the PyTorch world (docs/interop.md): checkpoint layouts in and out, export_hf,
``--model`` evaluation of untrained encoders, and the TREC files under ir_measures.

Fixtures are tiny random weights written in each layout (never downloads); MiniLM checks use
the offline package's real weights.
"""

from __future__ import annotations

import importlib.util
import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from helpers import tiny_synthetic_config
from safetensors.numpy import load_file, save_file

from dense_cf.cli import compare, eval_aar, eval_retrieval, export_hf
from dense_cf.configs.base import base_config
from dense_cf.files import UserError
from dense_cf.models import checkpoints, hf
from dense_cf.models import dual_encoder as de
from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.retrieval import export as export_lib
from dense_cf.retrieval.model_export import write_export
from dense_cf.synthetic import generate as synthetic
from dense_cf.train.run import load_run, pretrained_run

TINY = BertConfig.tiny(vocab_size=30522, hidden=16, layers=2, heads=2)
MINILM_TOK = hf.resolve_model_dir("minilm")
QUESTIONS = ["who built tower 3?", "when was the bridge opened?"]
PASSAGES = [("Tower 3", "The tower 3 was built by Ann in 1820."), ("", "A bridge opened in 1901.")]


def _random_bert(seed: int, config: BertConfig = TINY) -> dict:
    ids = np.ones((1, 4), np.int32)
    abstract = jax.eval_shape(BertEncoder(config).init, jax.random.key(0), ids, ids)["params"]
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda b: rng.normal(0, 0.02, b.value.shape).astype(np.float32),
                        abstract, is_leaf=lambda x: isinstance(x, nn.Partitioned))


def _tokenizer_files(d: str) -> None:
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(MINILM_TOK, name)
        if os.path.isfile(src):
            with open(src, "rb") as f, open(os.path.join(d, name), "wb") as g:
                g.write(f.read())


def _save(params, d, *, layout="hf", role="passage", config=TINY) -> str:
    tok_json = load_tokenizer(MINILM_TOK).to_str()
    return checkpoints.save_tower(params, config, d, layout=layout, role=role,
                                  tokenizer_json=tok_json, tokenizer_dir=MINILM_TOK)


def _equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(np.testing.assert_array_equal, a, b)


def _model_cfg(**model):
    c = base_config()
    c.data.max_q_len, c.data.max_p_len = 16, 32
    c.model.update(model)
    return c


# ----------------------------------------------------------------------------- layouts in


def test_dpr_layout_keys_config_and_roles(tmp_path):
    q, p = _random_bert(1), _random_bert(2)
    qd = _save(q, str(tmp_path / "q"), layout="dpr", role="question")
    pd = _save(p, str(tmp_path / "p"), layout="dpr", role="passage")
    keys = set(load_file(os.path.join(qd, "model.safetensors")))
    assert keys and all(k.startswith("question_encoder.bert_model.") for k in keys)
    assert all(k.startswith("ctx_encoder.bert_model.") for k in load_file(os.path.join(pd, "model.safetensors")))
    cfg = json.load(open(os.path.join(pd, "config.json")))
    assert cfg["model_type"] == "dpr" and cfg["architectures"] == ["DPRContextEncoder"]
    assert cfg["projection_dim"] == 0
    src = checkpoints.tower_source(qd, "question")
    assert (src.layout, src.prefix) == ("dpr", "question_encoder.bert_model.")
    _equal(checkpoints.load_tower(src, TINY), q)
    # Separate towers from separate DPR directories (DPR's question and ctx checkpoints).
    c = _model_cfg(name_or_path="", question_path=qd, passage_path=pd)
    model, sources = de.model_from_config(c)
    loaded = de.load_pretrained(model, sources, qd)
    _equal(loaded["question"], q)
    _equal(loaded["passage"], p)
    assert model.pooling == "cls" and not model.normalize


def test_combined_dpr_state_dict_gives_each_tower_its_prefix(tmp_path):
    """The original DPR BiEncoder keys (question_model./ctx_model.) in one checkpoint."""
    q, p = _random_bert(3), _random_bert(4)
    d = tmp_path / "biencoder"
    hf.save_hf_bert(q, TINY, str(d / "q"))
    hf.save_hf_bert(p, TINY, str(d / "p"))
    tensors = {f"question_model.{k}": v for k, v in load_file(str(d / "q" / "model.safetensors")).items()}
    tensors.update({f"ctx_model.{k}": v for k, v in load_file(str(d / "p" / "model.safetensors")).items()})
    save_file(tensors, str(d / "model.safetensors"))
    os.rename(d / "q" / "config.json", d / "config.json")
    _tokenizer_files(str(d))
    model, sources = de.model_from_config(_model_cfg(name_or_path=str(d)))
    assert sources["question"].prefix == "question_model." and sources["passage"].prefix == "ctx_model."
    loaded = de.load_pretrained(model, sources, str(d))
    _equal(loaded["question"], q)
    _equal(loaded["passage"], p)


def _sentence_transformers_dir(root, params, pooling_cfg, normalize=True, extra_modules=()):
    root.mkdir()
    bert = _save(params, str(root / "0_Transformer"))
    modules = [{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    modules.extend(extra_modules)
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling_cfg))
    return bert


def test_sentence_transformers_pooling_is_read(tmp_path):
    params = _random_bert(5)
    mean = {"word_embedding_dimension": 16, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}
    _sentence_transformers_dir(tmp_path / "st", params, mean)
    src = checkpoints.tower_source(str(tmp_path / "st"), "passage")
    assert (src.layout, src.pooling, src.normalize) == ("sentence_transformers", "mean", True)
    assert src.model_dir == str(tmp_path / "st" / "0_Transformer")
    model, sources = de.model_from_config(_model_cfg(name_or_path=str(tmp_path / "st"), pooling="auto"))
    assert (model.pooling, model.normalize) == ("mean", True)
    _equal(de.load_pretrained(model, sources, src.tokenizer_dir)["passage"], params)
    # An explicit pooling wins over the checkpoint's (DPR-style training from an ST model).
    model, _ = de.model_from_config(_model_cfg(name_or_path=str(tmp_path / "st"), pooling="cls"))
    assert (model.pooling, model.normalize) == ("cls", False)
    cls = dict(mean, pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    _sentence_transformers_dir(tmp_path / "st_cls", params, cls, normalize=False)
    src = checkpoints.tower_source(str(tmp_path / "st_cls"), "question")
    assert (src.pooling, src.normalize) == ("cls", False)


@pytest.mark.parametrize("pooling_cfg,extra,match", [
    ({"pooling_mode_max_tokens": True}, (), "not supported"),
    ({"pooling_mode_mean_tokens": True}, ({"path": "2_Dense", "type": "sentence_transformers.models.Dense"},),
     "Dense"),
])
def test_unsupported_sentence_transformers_modules_are_refused(tmp_path, pooling_cfg, extra, match):
    _sentence_transformers_dir(tmp_path / "st", _random_bert(6), pooling_cfg, extra_modules=extra)
    with pytest.raises(checkpoints.ModelLayoutError, match=match):
        checkpoints.tower_source(str(tmp_path / "st"), "passage")


def test_minilm_is_read_as_sentence_transformers_with_its_own_pooling():
    model, sources = de.model_from_config(_model_cfg(name_or_path="minilm", pooling="auto"))
    assert sources["passage"].layout == "sentence_transformers"
    assert (model.pooling, model.normalize) == ("mean", True)
    model, _ = de.model_from_config(_model_cfg(name_or_path="minilm"))  # base config: DPR's cls
    assert (model.pooling, model.normalize) == ("cls", False)


def test_tower_mismatches_are_one_clear_error(tmp_path):
    a = _save(_random_bert(7), str(tmp_path / "a"))
    small = BertConfig.tiny(vocab_size=30522, hidden=8, layers=1, heads=2)
    b = _save(_random_bert(8, small), str(tmp_path / "b"), config=small)
    with pytest.raises(checkpoints.ModelLayoutError, match="different architectures"):
        de.model_from_config(_model_cfg(name_or_path=a, question_path=b))
    c = _save(_random_bert(9), str(tmp_path / "c"))
    with pytest.raises(checkpoints.ModelLayoutError, match="shared=True needs one checkpoint"):
        de.model_from_config(_model_cfg(name_or_path=a, question_path=c, shared=True))
    with pytest.raises(checkpoints.ModelLayoutError, match="no config.json"):
        checkpoints.tower_source(str(tmp_path), "passage")
    with pytest.raises(checkpoints.ModelLayoutError, match="does not exist"):
        checkpoints.tower_source(str(tmp_path / "nope"), "passage")


def test_normalize_gives_unit_vectors():
    ids = np.array([[101, 2054, 2003, 102, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    params = {"shared": _random_bert(10)}
    plain = de.DualEncoder(TINY, shared=True, pooling="mean")
    unit = de.DualEncoder(TINY, shared=True, pooling="mean", normalize=True)
    v = np.asarray(plain.apply({"params": params}, ids, mask, method=plain.encode_passage))
    u = np.asarray(unit.apply({"params": params}, ids, mask, method=unit.encode_passage))
    np.testing.assert_allclose(u, v / np.linalg.norm(v, axis=-1, keepdims=True), rtol=1e-6)


# ----------------------------------------------------------------------------- export + back


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=200, seed=3)
    workdir = str(tmp_path_factory.mktemp("run"))
    cfg = tiny_synthetic_config(data_dir, **{"train.num_steps": 2, "eval.after_training": True,
                                             "eval.aar_strategies": ("sentence",)})
    train_and_evaluate(cfg, workdir)
    return workdir, str(data_dir)


@pytest.mark.parametrize("fmt", ["hf", "dpr"])
def test_export_reloads_to_the_same_embeddings(trained, tmp_path, fmt):
    workdir, _ = trained
    out = str(tmp_path / "export")
    manifest = export_hf.run_cli([f"--workdir={workdir}", f"--out={out}", f"--format={fmt}"])
    assert manifest["towers"] == {"question": "question_encoder", "passage": "passage_encoder"}
    for sub in ("question_encoder", "passage_encoder"):
        files = set(os.listdir(os.path.join(out, sub)))
        assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= files
    card = open(os.path.join(out, "README.md")).read()
    assert "[CLS] token's last hidden state" in card and '"method": "picl"' in card
    assert "## Evaluation: Retrieval" in card and "## Evaluation: Answer-awareness" in card
    run = load_run(workdir)
    back = pretrained_run(_model_cfg(name_or_path=out, pooling="auto") if fmt == "hf" else
                          _model_cfg(name_or_path="", question_path=os.path.join(out, "question_encoder"),
                                     passage_path=os.path.join(out, "passage_encoder")))
    assert (back.model.pooling, back.model.normalize) == (run.model.pooling, run.model.normalize)
    want, got = jax.device_get(run.params), jax.device_get(back.params)
    _equal(got, want)
    q_want = export_lib.encode_questions(run, QUESTIONS)
    q_got = export_lib.encode_questions(back, QUESTIONS)
    np.testing.assert_allclose(q_got, q_want, rtol=1e-5, atol=1e-6)


def test_export_refuses_to_overwrite_and_dpr_needs_cls(trained, tmp_path):
    workdir, _ = trained
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        export_hf.run_cli([f"--workdir={workdir}", f"--out={out}"])
    assert (out / "keep.txt").read_text() == "mine"
    export_hf.run_cli([f"--workdir={workdir}", f"--out={out}", "--overwrite"])
    assert not (out / "keep.txt").exists() and (out / "export.json").exists()
    assert not [n for n in os.listdir(tmp_path) if ".new-" in n or ".old-" in n]
    run = load_run(workdir)
    mean_run = run.__class__(**{**run.__dict__, "model": run.model.clone(pooling="mean")})
    with pytest.raises(UserError, match="--format hf"):
        write_export(mean_run, str(tmp_path / "dpr"), fmt="dpr")
    assert not (tmp_path / "dpr").exists()


def test_minilm_shaped_export_round_trip(tmp_path):
    """Real MiniLM weights (12 heads, hidden 384) through an hf export and back, with its own
    mean pooling + normalisation carried by the sentence-transformers files we write."""
    run = pretrained_run(_model_cfg(name_or_path="minilm", pooling="auto"))
    write_export(run, str(tmp_path / "minilm"))
    modules = json.load(open(tmp_path / "minilm" / "encoder" / "modules.json")) \
        if os.path.isdir(tmp_path / "minilm" / "encoder") else \
        json.load(open(tmp_path / "minilm" / "passage_encoder" / "modules.json"))
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    back = pretrained_run(_model_cfg(name_or_path=str(tmp_path / "minilm"), pooling="auto"))
    assert (back.model.pooling, back.model.normalize) == ("mean", True)
    _equal(jax.device_get(back.params), jax.device_get(run.params))
    np.testing.assert_allclose(export_lib.encode_questions(back, QUESTIONS),
                               export_lib.encode_questions(run, QUESTIONS), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None
                    or importlib.util.find_spec("transformers") is None,
                    reason="torch and transformers are not installed (the optional PyTorch peer); "
                           "docs/interop.md has the manual check")
def test_transformers_loads_the_exports(trained, tmp_path):
    import torch
    import transformers
    workdir, _ = trained
    run = load_run(workdir)
    want = export_lib.encode_questions(run, QUESTIONS)
    for fmt in ("hf", "dpr"):
        out = str(tmp_path / fmt)
        export_hf.run_cli([f"--workdir={workdir}", f"--out={out}", f"--format={fmt}"])
        tok = transformers.AutoTokenizer.from_pretrained(os.path.join(out, "question_encoder"))
        x = tok(QUESTIONS, return_tensors="pt", padding=True)
        with torch.no_grad():
            if fmt == "hf":
                enc = transformers.BertModel.from_pretrained(os.path.join(out, "question_encoder"))
                got = enc(**x).last_hidden_state[:, 0].numpy()
            else:
                enc = transformers.DPRQuestionEncoder.from_pretrained(os.path.join(out, "question_encoder"))
                got = enc(**x).pooler_output.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- --model evaluation


def _same_data_config(tmp_path, workdir) -> str:
    """A config file that reads a run's own config.json: --model on the run's data."""
    path = tmp_path / "same_data.py"
    saved = os.path.join(workdir, "config.json")
    path.write_text("import json\nfrom dense_cf.configs.base import merge_over_base\n\n\n"
                    f"def get_config():\n    return merge_over_base(json.load(open({saved!r})))\n")
    return str(path)


def test_model_flag_evaluates_an_export_like_its_run(trained, tmp_path):
    """AAR and retrieval of the exported encoder, untrained, equal those of the run itself."""
    workdir, _ = trained
    out = str(tmp_path / "export")
    export_hf.run_cli([f"--workdir={workdir}", f"--out={out}"])
    cfg_file = _same_data_config(tmp_path, workdir)
    root = str(tmp_path / "model_eval")
    argv = [f"--model={out}", f"--config={cfg_file}", f"--out_root={root}"]
    via_model = eval_aar.run_cli(argv + ["--strategies=sentence"])
    via_run = eval_aar.run_cli([f"--workdir={workdir}", "--strategies=sentence"])
    assert via_model["strategies"]["sentence"]["aar"] == via_run["strategies"]["sentence"]["aar"]
    out_dir = via_model["out_dir"]
    assert out_dir.startswith(os.path.join(root, "export-auto-")) and out_dir.endswith("step_0")
    assert os.path.isfile(os.path.join(out_dir, "aar.md"))
    table = compare.run_cli([workdir, os.path.dirname(os.path.dirname(out_dir)),
                             "--names=trained run,its export untrained", f"--out={tmp_path / 'cmp.md'}"])
    assert table is None
    md = (tmp_path / "cmp.md").read_text()
    assert "| trained run | its export untrained |" in md and "(0 vs 0 discordant)" in md
    r_model = eval_retrieval.run_cli(argv)
    r_run = eval_retrieval.run_cli([f"--workdir={workdir}"])
    assert r_model["top_k"] == r_run["top_k"] and r_model["mrr"] == pytest.approx(r_run["mrr"])


def test_model_flag_needs_exactly_one_of_workdir_and_model(trained):
    workdir, data_dir = trained
    with pytest.raises(UserError, match="exactly one"):
        eval_aar.run_cli([])
    with pytest.raises(UserError, match="exactly one"):
        eval_aar.run_cli([f"--workdir={workdir}", "--model=minilm"])
    with pytest.raises(UserError, match="only go with --model"):
        eval_aar.run_cli([f"--workdir={workdir}", f"--data_dir={data_dir}"])


# ----------------------------------------------------------------------------- TREC files


def test_trec_files_agree_with_ir_measures(trained):
    """DPR's top-k accuracy is ir_measures' Success@k and our MRR its RR@k over the run."""
    ir_measures = pytest.importorskip("ir_measures")
    workdir, _ = trained
    report = json.load(open(os.path.join(workdir, "eval", "step_2", "report.json")))
    ev = os.path.join(workdir, "eval", "step_2")
    qrels = list(ir_measures.read_trec_qrels(os.path.join(ev, "qrels.trec")))
    run = list(ir_measures.read_trec_run(os.path.join(ev, "run.trec")))
    ks = [int(k) for k in report["top_k"]]
    got = ir_measures.calc_aggregate([ir_measures.RR @ 100] + [ir_measures.Success @ k for k in ks],
                                     qrels, run)
    assert got[ir_measures.RR @ 100] == pytest.approx(report["mrr"], abs=1e-9)
    for k in ks:
        assert 100 * got[ir_measures.Success @ k] == pytest.approx(report["top_k"][str(k)], abs=1e-9)


def test_retrieval_report_counts_duplicate_ids_and_empty_answers(trained, tmp_path):
    """Issue 15 §4 through the binary: a repeated passage id is skipped and counted by reason,
    a question with no answers stays in the denominator, and both are in the report."""
    workdir, data_dir = trained
    cfg = json.load(open(os.path.join(workdir, "config.json")))["data"]
    with open(os.path.join(data_dir, cfg["corpus_file"]), encoding="utf-8") as f:
        corpus = f.read()
    first = corpus.splitlines()[1].split("\t")[0]
    (tmp_path / "c.tsv").write_text("\ufeff" + corpus + f"{first}\tanother passage\tDup\n", encoding="utf-8")
    with open(os.path.join(data_dir, cfg["test_file"]), encoding="utf-8") as f:
        qa = f.read()
    (tmp_path / "qa.csv").write_text(qa + "a question nobody can answer\t[]\n", encoding="utf-8")
    s = eval_retrieval.run_cli([f"--workdir={workdir}", f"--corpus={tmp_path / 'c.tsv'}",
                                f"--qa={tmp_path / 'qa.csv'}"])
    assert s["corpus_rows_skipped"] == {"duplicate id": 1} and s["empty_answers"] == 1
    assert s["n_questions"] == len(qa.splitlines()) + 1 and s["corpus_size"] == 200
    md = open(os.path.join(s["out_dir"], "report.md")).read()
    assert "1 with an empty answer list" in md and "corpus rows skipped: 1 duplicate id" in md
