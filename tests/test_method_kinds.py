"""The method seam beyond retrievers: a method with its own network, inputs and per-example loss.

``PARITY`` is a toy reader-kind method defined in this file alone: its own model (``ModelSpec``),
its own data files (``Inputs.load``) and a loss that needs no all-gather (``gather=False``).
The shared training loop trains it on 2 simulated devices, checkpoints it, resumes it exactly,
and ``load_run`` restores it; the retrieval evaluators refuse it.
"""

import dataclasses
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import apply_overrides

from dense_cf.configs.base import base_config
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.methods import Inputs, Method, ModelSpec
from dense_cf.models.hf import resolve_model_dir
from dense_cf.retrieval.export import Encoder
from dense_cf.train.loop import train
from dense_cf.train.run import load_run

SEQ = 6


class Classifier(nn.Module):
    """Bag of embeddings → one logit: is token 1 in the sequence?"""

    @nn.compact
    def __call__(self, ids):
        e = nn.Embed(4, 8)(ids).mean(axis=1)
        return nn.Dense(1)(nn.relu(nn.Dense(16)(e)))[:, 0]


def _build(method, config, load_pretrained=True):
    return Classifier(), None, resolve_model_dir("minilm")


SPEC = ModelSpec(build=_build, dummy_inputs=lambda config: (jnp.zeros((1, SEQ), jnp.int32),),
                 place_pretrained=lambda model, p: p,
                 axis_rules=lambda model, size, rules=None: ())


@dataclasses.dataclass
class Data:
    ids: np.ndarray
    labels: np.ndarray

    @property
    def num_examples(self) -> int:
        return len(self.ids)

    @property
    def stats(self) -> dict:
        return {"positives": int(self.labels.sum())}


@dataclasses.dataclass(frozen=True)
class Spec:
    global_batch: int
    shuffle: bool = True


def _load(config, tokenizer, key, max_examples=0):
    path = resolve_data_file(config.data, key, required=False)
    if path is None:
        return None
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return Data(np.array([r["ids"] for r in rows], np.int32),
                np.array([r["label"] for r in rows], np.float32))


def _batches(data, spec, start, process_index, process_count):
    n, b = data.num_examples, spec.global_batch
    local = b // process_count
    step = start
    while True:
        rows = (np.arange(step * b, (step + 1) * b) % n)[process_index * local:(process_index + 1) * local]
        yield {"ids": data.ids[rows], "labels": data.labels[rows]}
        step += 1


class Iterator:
    def __init__(self, data, spec, *, process_index=0, process_count=1, pipeline="tfdata",
                 grain_options=None):
        self.data, self.spec, self.pi, self.pc, self.step = data, spec, process_index, process_count, 0
        self._it = None

    def __next__(self):
        if self._it is None:
            self._it = _batches(self.data, self.spec, self.step, self.pi, self.pc)
        self.step += 1
        return next(self._it)

    def get_state(self):
        return {"step": self.step}

    def set_state(self, state):
        self.step, self._it = int(state["step"]), None


def _embed(model, params, batch, *, deterministic, rngs=None):
    return {"logits": model.apply({"params": params}, batch["ids"]), "labels": batch["labels"]}


def _loss(out):
    loss = jnp.mean(optax_bce(out["logits"], out["labels"]))
    acc = jnp.mean((out["logits"] > 0) == (out["labels"] > 0.5))
    return loss, {"loss": loss, "accuracy": acc}


def optax_bce(logits, labels):
    return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))


PARITY = Method(
    name="parity", loss=_loss, embed=_embed, model=SPEC, kind="reader", gather=False,
    inputs=Inputs(load=_load, prepare=lambda config, tokenizer, data: data,
                  spec=lambda config, tokenizer, shuffle=True, counterfactual=False:
                  Spec(int(config.train.global_batch), shuffle),
                  make_dataset=None, batch_iterator=Iterator))


def _config(data_dir, **overrides):
    rng = np.random.default_rng(0)
    with open(os.path.join(data_dir, "train.jsonl"), "w") as f:
        for _ in range(64):
            ids = rng.integers(0, 4, SEQ)
            f.write(json.dumps({"ids": ids.tolist(), "label": int(1 in ids)}) + "\n")
    c = base_config()
    c.method = "test_method_kinds:PARITY"
    c.model.name_or_path = "tiny"
    c.data.data_dir, c.data.train_file, c.data.dev_file = str(data_dir), "train.jsonl", ""
    c.train.global_batch, c.train.log_every, c.train.eval_every = 16, 5, 0
    c.train.num_steps, c.train.checkpoint_every = 60, 20
    c.optim.learning_rate, c.optim.warmup_steps = 3e-2, 1
    c.mesh.data = 2
    return apply_overrides(c, overrides)


def test_reader_kind_trains_resumes_and_is_refused_by_retrieval(tmp_path):
    whole, wd = tmp_path / "whole", tmp_path / "cut"
    summary, run = train(_config(tmp_path), str(whole))
    with open(tmp_path / "train.jsonl") as f:
        positives = sum(json.loads(line)["label"] for line in f)
    assert summary["step"] == 60 and summary["data"] == {"positives": positives}
    assert summary["train"]["train/accuracy"] > 0.9  # learnt "is token 1 present"

    train(_config(tmp_path, **{"train.stop_at_step": 20}), str(wd))  # killed at a checkpoint
    _, resumed = train(_config(tmp_path), str(wd))
    a, b = jax.device_get(run.params), jax.device_get(resumed.params)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7), a, b)

    loaded = load_run(str(whole))
    assert loaded.step == 60 and loaded.method.kind == "reader"
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), a,
                 jax.device_get(loaded.params))
    with pytest.raises(ValueError, match="is a reader, not a retriever"):
        Encoder(loaded, batch_size=8)


def test_kind_is_checked():
    with pytest.raises(ValueError, match="kind must be one of"):
        Method(name="x", loss=_loss, kind="ranker")
