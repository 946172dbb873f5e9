"""Hardware models and their registry.

>>> import hwmodels
>>> hwmodels.names()
['external', 'mcm', 'nnpi']
>>> hw = hwmodels.make("nnpi", sram_mib=4)

A new model registers itself with :func:`register` (a decorator on the class or a
factory); ``make(name, **params)`` builds it with those parameters. A model that lives
outside this package is loaded by naming its module: ``make("mychip",
module="mypkg.mychip")`` (a dotted module name) or ``module="path/to/mychip.py"`` (a
file), imported before the name is looked up, so registering needs no edit here. In an
``egrl-train`` config that is the ``module`` key of ``hwmodel.params``
(``docs/hwmodels.md``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from hwmodels.base import Check, HardwareModel, Measurement, OptimumResult, Target, workload_graph

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
_BUILTIN_MODULES = (
    "hwmodels.nnpi",
    "hwmodels.external",
    "hwmodels.mcm",
    "hwmodels.banked",
    "hwmodels.tpu",
)


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def import_module(module: str) -> ModuleType:
    """Import a user's hardware-model module: a dotted name, or the path of a ``.py`` file.

    A file is imported once per resolved path (importing it again would register its
    model twice).

    Raises:
        ImportError: the module cannot be found or fails to import (named in the message).
    """
    if not module.endswith(".py"):
        try:
            return importlib.import_module(module)
        except ImportError as err:
            raise ImportError(
                f"hardware-model module {module!r} cannot be imported ({err}); give a dotted "
                "name on the Python path or the path of a .py file"
            ) from err
    path = Path(module).expanduser().resolve()
    if not path.is_file():
        raise ImportError(f"hardware-model module file {module!r} does not exist ({path})")
    name = f"_hwmodel_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[name]
        raise
    return loaded


def default_reward(name: str) -> str:
    """The reward of a run of the hardware model ``name`` that names none (its class's
    ``default_reward``; ``egrl`` for a factory that declares none)."""
    _load_builtins()
    return getattr(_REGISTRY.get(name), "default_reward", "egrl")


def reading_params(name: str) -> tuple[str, ...]:
    """The parameters of the hardware model ``name`` that say how its chip is read rather
    than what a map costs (its class's ``reading_params``; none for a factory that
    declares none)."""
    _load_builtins()
    return tuple(getattr(_REGISTRY.get(name), "reading_params", ()))


def names() -> list[str]:
    """Names of the registered hardware models."""
    _load_builtins()
    return sorted(_REGISTRY)


def make(name: str, module: str | None = None, **params) -> HardwareModel:
    """Build the hardware model ``name`` with ``params``.

    Args:
        name: a registered name.
        module: imported first (see :func:`import_module`) so that it can register
            ``name``; never passed to the model.
        **params: the model's parameters.
    """
    _load_builtins()
    if module:
        import_module(str(module))
    if name not in _REGISTRY:
        hint = "" if module else "; a model outside hwmodels needs its module (module=...)"
        raise KeyError(f"unknown hardware model {name!r}; registered: {names()}{hint}")
    return _REGISTRY[name](**params)


__all__ = [
    "Check",
    "HardwareModel",
    "Measurement",
    "OptimumResult",
    "Target",
    "import_module",
    "make",
    "names",
    "reading_params",
    "register",
    "workload_graph",
]
