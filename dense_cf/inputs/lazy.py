"""TensorFlow, imported on first use.

The training input pipeline is tf.data, but the train step, export and the accelerator
benchmark must run on hosts without TensorFlow (docs/ARCHITECTURE.md, "TF-free core"). The
method registry names its input pipelines, so their modules are imported on such hosts; they
reach TensorFlow through :data:`tf`, which imports it only when a pipeline is actually built,
and then keeps it off the GPUs (``console.tensorflow_for_host``). This is the one way in: a
binary that never builds a tf.data pipeline (the evaluators, a refused config) never pays for
importing TensorFlow.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

from dense_cf.console import tensorflow_for_host

__all__ = ["tf"]


class _LazyModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._module: types.ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._module is None:
            self._module = (tensorflow_for_host() if self.__name__ == "tensorflow"
                            else importlib.import_module(self.__name__))
        return getattr(self._module, attr)


tf: Any = _LazyModule("tensorflow")
