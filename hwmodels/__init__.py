"""Hardware models and their registry.

>>> import hwmodels
>>> hwmodels.names()
['external', 'nnpi']
>>> hw = hwmodels.make("nnpi", sram_mib=4)

A new model registers itself with :func:`register` (a decorator on the class or a
factory); ``make(name, **params)`` builds it with those parameters.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from hwmodels.base import HardwareModel, Measurement, OptimumResult, Target

_REGISTRY: dict[str, Callable[..., HardwareModel]] = {}


def register(name: str) -> Callable:
    """Register a hardware-model class or factory under ``name``."""

    def deco(factory: Callable[..., HardwareModel]) -> Callable[..., HardwareModel]:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"hardware model {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return deco


#: modules of the built-in models; each registers itself when imported
_BUILTIN_MODULES = ("hwmodels.nnpi", "hwmodels.external")


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def names() -> list[str]:
    """Names of the registered hardware models."""
    _load_builtins()
    return sorted(_REGISTRY)


def make(name: str, **params) -> HardwareModel:
    """Build the hardware model ``name`` with ``params``."""
    _load_builtins()
    if name not in _REGISTRY:
        raise KeyError(f"unknown hardware model {name!r}; registered: {names()}")
    return _REGISTRY[name](**params)


__all__ = ["HardwareModel", "Measurement", "OptimumResult", "Target", "make", "names", "register"]
