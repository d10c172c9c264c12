"""Deferred imports: modules above the foundation describe kernels (tiles, shared memory,
tensor maps, parameters) without MLIR, and import MLIR only when they emit IR. This keeps
``GemmConfig`` and cached launches working on a GPU machine that has no MLIR installed."""
from __future__ import annotations

import importlib


class LazyModule:
    """A module proxy that imports ``name`` on first attribute access."""

    __slots__ = ("_name", "_mod")

    def __init__(self, name: str):
        self._name = name
        self._mod = None

    def __getattr__(self, attr):
        if self._mod is None:
            self._mod = importlib.import_module(self._name)
        return getattr(self._mod, attr)


def lazy(name: str) -> LazyModule:
    return LazyModule(name)
