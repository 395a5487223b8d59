"""Named entries with ``package.module:ATTRIBUTE`` plug-ins: the one resolver behind the method
registry (``config.method``) and the evaluator registry (``config.eval.evaluators``).

A name is either registered (:meth:`Registry.register`, by the code that defines the entry) or
written as ``"package.module:ATTRIBUTE"``, which is imported on first use, so an entry defined
outside dense_cf works with every binary (big_vision-style). The entry must be an instance of
the registry's class; errors name the config key, the module and what was found.
"""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Generic[T]):
    """Entries of class ``cls`` by their ``name``; ``where`` is how a user names one in errors
    (``"config.method"``, ``"evaluator"``)."""

    def __init__(self, cls: type[T], where: str):
        self.cls, self.where = cls, where
        self._entries: dict[str, T] = {}

    def register(self, entry: T, *, replace: bool = False) -> T:
        """Adds ``entry`` under ``entry.name`` (a second entry of that name is refused unless
        ``replace``); returns it."""
        name = entry.name  # type: ignore[attr-defined]
        if name in self._entries and not replace:
            raise ValueError(f"{self.cls.__name__.lower()} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def get(self, name: str) -> T:
        """The entry called ``name``: a registered name or ``"package.module:ATTRIBUTE"``."""
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            module, attr = name.split(":", 1)
            try:
                found = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                raise ValueError(f"{self.where} {name!r}: cannot load {attr} from {module}: {e}"
                                 ) from e
            if not isinstance(found, self.cls):
                kind = self.cls.__name__
                article = "an" if kind[0] in "AEIOU" else "a"
                raise ValueError(f"{self.where} {name!r} is a {type(found).__name__}, not "
                                 f"{article} {kind}")
            return found
        raise ValueError(f"unknown {self.where} {name!r}; registered: {', '.join(self.names())} "
                         f"(or 'package.module:ATTRIBUTE' for a plug-in)")
