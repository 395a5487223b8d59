"""One batch source, two pipelines: tf.data (the default) and Grain (TensorFlow-free).

Every training method builds its host-local batch for global step ``k`` with one numpy function
(:class:`BatchSource`), a pure function of ``(seed, k, hosts)``:

* epoch ``e = k // steps_per_epoch`` visits :func:`epoch_order` ``(n, seed, e)`` (a numpy
  permutation; the identity without shuffling); its first ``steps_per_epoch * B`` indices form
  global batches ``[steps, hosts, B / hosts]`` and host ``h`` reads its column, so global batch
  ``k`` holds the same examples for any host count (the tail of an epoch is dropped);
* the method's ``batch_fn(epoch, indices)`` turns those example indices into arrays (for
  DPR/PiCL/EADPR, DCSR and MDR, :func:`stack_examples` of a per-example function; the readers
  build whole batches), with every random draw seeded by ``(seed, epoch, example)``.

The two pipelines only schedule that function: ``tfdata`` maps it over a ``Dataset.range`` of
steps through ``tf.numpy_function``; ``grain`` maps it over a ``grain.MapDataset.range`` read by
threads, whose iterator state is saved with the run. Their batches are therefore the same arrays,
element for element, and a run may change pipeline on resume. docs/method.md §8 (input format),
docs/scale.md "Input pipelines".
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import gc
import importlib
import weakref
from typing import Any, Callable, Iterator

import numpy as np
from absl import logging

from dense_cf.inputs.lazy import tf

PIPELINES = ("tfdata", "grain")
# Far beyond any run's steps: a "repeat" pipeline is a range this long (both are lazy).
_FOREVER = 1 << 40

Batch = dict[str, np.ndarray]


def import_grain() -> Any:
    """``grain`` (PyPI ``grain``), with a clear error where it is not installed."""
    try:
        return importlib.import_module("grain")
    except ImportError as e:
        raise ImportError("config.data.pipeline='grain' needs the grain package: "
                          "pip install 'grain>=0.2.12,<0.3'") from e


def check_pipeline(name: str) -> str:
    if name not in PIPELINES:
        raise ValueError(f"config.data.pipeline={name!r} is not one of {', '.join(PIPELINES)}")
    return name


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The order in which epoch ``epoch`` visits ``range(n)`` (int64)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng((seed, epoch)).permutation(n).astype(np.int64)


def example_rng(seed: int, epoch: int, i: int, salt: int = 0) -> np.random.Generator:
    """The generator of example ``i``'s random draws in ``epoch`` (``salt`` tells draws apart)."""
    return np.random.default_rng((seed, epoch, i, salt))


def fix_len(ids: np.ndarray, length: int, pad_id: int, sep_id: int | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Truncate (keeping room for a final [SEP] when given) and pad to ``length``: (ids, mask)."""
    ids = np.asarray(ids, np.int32)
    if sep_id is not None:
        ids = np.concatenate([ids[:length - 1], np.asarray([sep_id], np.int32)])
    else:
        ids = ids[:length]
    out = np.full(length, pad_id, np.int32)
    mask = np.zeros(length, np.int32)
    out[:len(ids)] = ids
    mask[:len(ids)] = 1
    return out, mask


def fix_rows(rows: list[np.ndarray], length: int, pad_id: int, sep_id: int | None
             ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fix_len` of each row, stacked: ``[len(rows), length]`` ids and mask."""
    ids = np.full((len(rows), length), pad_id, np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for r, row in enumerate(rows):
        ids[r], mask[r] = fix_len(row, length, pad_id, sep_id)
    return ids, mask


def stack_examples(example_fn: Callable[[int, int], Batch]) -> Callable[[int, np.ndarray], Batch]:
    """A ``batch_fn`` stacking ``example_fn(epoch, i)`` over the batch's examples."""
    def batch_fn(epoch: int, indices: np.ndarray) -> Batch:
        rows = [example_fn(epoch, int(i)) for i in indices]
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return batch_fn


@dataclasses.dataclass(frozen=True)
class BatchSource:
    """Host-local batch of global step ``k`` (module docstring): ``source(k)``."""

    num_examples: int
    global_batch: int
    seed: int
    shuffle: bool
    batch_fn: Callable[[int, np.ndarray], Batch]
    process_index: int = 0
    process_count: int = 1

    def __post_init__(self) -> None:
        if self.global_batch % self.process_count:
            raise ValueError(f"global_batch {self.global_batch} not divisible by "
                             f"{self.process_count} hosts")
        if self.steps_per_epoch == 0:
            raise ValueError(f"{self.num_examples} examples are fewer than one global batch of "
                             f"{self.global_batch}")

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.global_batch

    @property
    def local_batch(self) -> int:
        return self.global_batch // self.process_count

    def indices(self, step: int) -> tuple[int, np.ndarray]:
        """(epoch, this host's example indices) of global step ``step``."""
        epoch, offset = divmod(int(step), self.steps_per_epoch)
        lo = offset * self.global_batch + self.process_index * self.local_batch
        return epoch, self._order(epoch)[lo:lo + self.local_batch]

    def _order(self, epoch: int) -> np.ndarray:
        return _cached_order(self.num_examples, self.seed, epoch, self.shuffle)

    def __call__(self, step: int) -> Batch:
        epoch, idx = self.indices(step)
        return self.batch_fn(epoch, idx)

    def stop_step(self, start_step: int, repeat: bool) -> int:
        """The end of the step range: forever, or the end of ``start_step``'s epoch."""
        if repeat:
            return _FOREVER
        return (start_step // self.steps_per_epoch + 1) * self.steps_per_epoch


@functools.lru_cache(maxsize=4)  # reader threads ask for the same epoch's order many times
def _cached_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    order = epoch_order(n, seed, epoch, shuffle)
    order.setflags(write=False)
    return order


# --------------------------------------------------------------------------- the two pipelines


def tfdata_dataset(source: BatchSource, *, start_step: int = 0, repeat: bool = True):
    """``tf.data``: the steps from ``start_step`` mapped through ``source`` (numpy), prefetched."""
    sample = source(start_step)
    keys = sorted(sample)
    dtypes = [tf.as_dtype(sample[k].dtype) for k in keys]

    def py(step):
        batch = source(int(step))
        return [batch[k] for k in keys]

    def call(step):
        out = tf.numpy_function(py, [step], dtypes, stateful=False)
        return {k: tf.ensure_shape(x, sample[k].shape) for k, x in zip(keys, out)}

    ds = tf.data.Dataset.range(start_step, source.stop_step(start_step, repeat))
    ds = ds.map(call, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    options = tf.data.Options()
    # No autotuning thread. An iterator's destructor waits for it, and where the thread misses
    # the cancellation it sleeps out its optimisation period, which doubles up to 60 s: after
    # the demo reader's 300 steps the process stood 40 s in that destructor (gdb: ~RootDataset::
    # Iterator waiting on Model::OptimizeLoop) in 2 of 14 runs, and in 3 of 4 demos. Without
    # it the map runs as many calls as there are CPUs, and the prefetch buffer keeps its own
    # (legacy) size tuner; the batches are the same.
    options.autotune.enabled = False
    return TfDataBatches(ds.prefetch(tf.data.AUTOTUNE).with_options(options))


class TfDataBatches:
    """A tf.data dataset whose numpy iterators are closed at exit. A tf.data iterator whose
    map calls Python still alive when the interpreter finalises deadlocks (its threads wait for
    the GIL, its destructor for them); :func:`_close_tf_iterators` drops them first."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def as_numpy_iterator(self) -> Iterator[Batch]:
        it = _TfIterator(self.dataset.as_numpy_iterator())
        _LIVE_TF_ITERATORS.add(it)
        return it


class _TfIterator:
    def __init__(self, it: Iterator[Batch]) -> None:
        self._it: Iterator[Batch] | None = it

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self._it is None:
            raise StopIteration
        return next(self._it)

    def close(self) -> None:
        self._it = None


_LIVE_TF_ITERATORS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_tf_iterators() -> None:
    for it in list(_LIVE_TF_ITERATORS):
        it.close()
    gc.collect()


@dataclasses.dataclass(frozen=True)
class GrainOptions:
    """Grain's read threads and prefetch depth (``config.data.grain_threads`` /
    ``grain_prefetch``): threads run ``source`` on several steps at once."""

    threads: int = 8
    prefetch: int = 16


def grain_dataset(source: BatchSource, *, start_step: int = 0, repeat: bool = True,
                  options: GrainOptions = GrainOptions()):
    """A Grain ``IterDataset`` of the steps from ``start_step`` mapped through ``source``.

    The range starts at step 0 and the iterator is moved to ``start_step`` through Grain's own
    state (:class:`GrainBatches`), so the saved Grain state is what resumes a run.
    """
    grain = import_grain()
    stop = source.stop_step(start_step, repeat)
    ds = grain.MapDataset.range(0, stop).map(source)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=options.threads,
                                                prefetch_buffer_size=options.prefetch))


class GrainBatches:
    """``as_numpy_iterator()`` over :func:`grain_dataset`, started at ``start_step`` by
    ``set_state``; like the tf.data datasets the loop's evaluation takes."""

    def __init__(self, source: BatchSource, *, start_step: int = 0, repeat: bool = True,
                 options: GrainOptions = GrainOptions()) -> None:
        self.source, self.start_step = source, start_step
        self.dataset = grain_dataset(source, start_step=start_step, repeat=repeat, options=options)

    def as_numpy_iterator(self) -> Iterator[Batch]:
        it = iter(self.dataset)
        if self.start_step:
            state = it.get_state()
            it.set_state(grain_state_at(state, self.start_step))
        return it


def grain_state_at(state: dict[str, Any], step: int) -> dict[str, Any]:
    """Grain's iterator state moved to position ``step`` (the next element it returns)."""
    if "next_index" not in state:
        raise ValueError(f"unexpected Grain iterator state {state!r} (grain version?)")
    return {**state, "next_index": int(step)}


def make_dataset(source: BatchSource, *, start_step: int = 0, repeat: bool = True,
                 pipeline: str = "tfdata", grain_options: GrainOptions = GrainOptions()):
    """Host-local batches of ``source`` from ``start_step`` through ``pipeline``; the result has
    ``as_numpy_iterator()``."""
    if check_pipeline(pipeline) == "grain":
        return GrainBatches(source, start_step=start_step, repeat=repeat, options=grain_options)
    return tfdata_dataset(source, start_step=start_step, repeat=repeat)


class BatchIterator:
    """Numpy batches of one host with a resumable state (the global step, plus Grain's own
    iterator state under ``grain``). Subclasses set :meth:`_source` (the method's
    :class:`BatchSource` builder)."""

    def __init__(self, data: Any, spec: Any, *, start_step: int = 0, process_index: int = 0,
                 process_count: int = 1, pipeline: str = "tfdata",
                 grain_options: GrainOptions = GrainOptions()) -> None:
        self.data, self.spec = data, spec
        self.process_index, self.process_count = process_index, process_count
        self.pipeline = check_pipeline(pipeline)
        self.grain_options = grain_options
        self.step = start_step
        self._it = None

    @staticmethod
    def _source(data: Any, spec: Any, process_index: int, process_count: int) -> BatchSource:
        raise NotImplementedError

    def source(self) -> BatchSource:
        return self._source(self.data, self.spec, self.process_index, self.process_count)

    def _fingerprint(self) -> dict[str, Any]:
        # The host count is not part of it: global batch k holds the same examples for any number
        # of hosts (each host reads a column of it), so a run may resume on another host count.
        return {"num_examples": self.data.num_examples, "global_batch": self.spec.global_batch,
                "seed": self.spec.seed}

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self._it is None:
            ds = make_dataset(self.source(), start_step=self.step, pipeline=self.pipeline,
                              grain_options=self.grain_options)
            self._it = ds.as_numpy_iterator()
        batch = next(self._it)
        self.step += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        state = {"step": self.step, "process_count": self.process_count, **self._fingerprint()}
        if self.pipeline == "grain" and self._it is not None:
            state["grain"] = self._it.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        mine = self._fingerprint()
        diff = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if diff:
            raise ValueError(f"data-iterator state does not match this run (saved, now): {diff}")
        saved_hosts = state.get("process_count", self.process_count)
        if saved_hosts != self.process_count:
            logging.info("resuming a run saved on %s hosts on %d hosts (same global batches)",
                         saved_hosts, self.process_count)
        self.step = int(state["step"])
        self._it = None
        grain_state = state.get("grain")
        if self.pipeline == "grain" and grain_state is not None:
            if int(grain_state.get("next_index", -1)) != self.step:
                raise ValueError(f"data-iterator state: Grain's next_index "
                                 f"{grain_state.get('next_index')} != saved step {self.step}")
            it = iter(grain_dataset(self.source(), options=self.grain_options))
            it.set_state(grain_state)
            self._it = it


# Eval order: every example once, in order, tail included.
def eval_batches(example_fn: Callable[[int, int], Batch], num_examples: int,
                 batch_size: int = 256) -> Iterator[Batch]:
    """Every example once, in order, in batches of ``batch_size`` (the last may be short)."""
    batch = stack_examples(example_fn)
    for lo in range(0, num_examples, batch_size):
        yield batch(0, np.arange(lo, min(lo + batch_size, num_examples)))
