"""Reading ``egrl-train``'s command-line overrides before and after Hydra composes them.

* :func:`rewrite_workload_paths` lets ``workload=path/to/model.onnx`` name a file: Hydra
  reads ``workload=VALUE`` as an option of the ``configs/workload/`` group, so a value
  that is not one becomes ``workload.name=VALUE`` before Hydra sees it.
* :func:`typed_keys` and :func:`swept_values` parse overrides with Hydra's own parser:
  the keys the user typed, and every value a sweep (``-m budget=100,200``) will take.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

import configs
from egrl.agents import config_class, names

WORKLOAD_GROUP = "workload"


def group_options(group: str) -> set[str]:
    """Names of the options of a config group (``configs/<group>/*.yaml``)."""
    return {p.stem for p in (Path(configs.__file__).resolve().parent / group).glob("*.yaml")}


def group_path(group: str, option: str) -> Path:
    """The file of one option of a config group, ``configs/<group>/<option>.yaml``."""
    return Path(configs.__file__).resolve().parent / group / f"{option}.yaml"


def rewrite_workload_paths(args: Sequence[str], options: set[str] | None = None) -> list[str]:
    """``args`` with each ``workload=VALUE`` that is not a group option as ``workload.name=VALUE``.

    ``VALUE`` may be a comma-separated sweep (``workload=resnet50,model.onnx``): it is
    rewritten if any of its values is not an option of ``configs/workload/`` (a zoo name
    given as ``workload.name`` selects the same workload as its group option).
    """
    options = group_options(WORKLOAD_GROUP) if options is None else options
    prefix = f"{WORKLOAD_GROUP}="
    out = []
    for arg in args:
        if arg.startswith(prefix):
            values = arg[len(prefix) :].split(",")
            if any(v not in options and v != "null" for v in values):
                arg = f"{WORKLOAD_GROUP}.name={arg[len(prefix) :]}"
        out.append(arg)
    return out


def _parse(overrides: Iterable[str]) -> list:
    return OverridesParser.create().parse_overrides(list(overrides))


def typed_keys(overrides: Iterable[str]) -> list[str]:
    """The keys (or groups) of the overrides as typed, ``+``/``++``/``~`` stripped, in order."""
    keys = []
    for o in _parse(overrides):
        if o.key_or_group not in keys:
            keys.append(o.key_or_group)
    return keys


def swept_values(overrides: Iterable[str]) -> list[tuple[str, Any]]:
    """``(key, value)`` for every value of every sweep override (``seed=0,1`` -> two); an
    interval sweep (Optuna's ``interval(a, b)``) gives its two ends."""
    pairs = []
    for o in _parse(overrides):
        if o.is_interval_sweep():
            pairs.extend((o.key_or_group, v) for v in (o.value().start, o.value().end))
        elif o.is_sweep_override():
            pairs.extend((o.key_or_group, v) for v in o.sweep_iterator())
    return pairs


def section_owners() -> dict[str, list[str]]:
    """The agents that own each section of a run's config that an agent owns (EGRL's
    ``policy``, ``population`` and ``learner``: ``ea``, ``egrl``, ``pg``)."""
    owners: dict[str, list[str]] = {}
    for name in names():
        for section in config_class(name).SECTIONS:
            owners.setdefault(section, []).append(name)
    return owners


def override_section(arg: str) -> str:
    """The top-level key an override sets: ``learner`` of ``learner.batch_size=8``,
    ``+learner=sac`` or ``learner@x=sac``."""
    return arg.split("=", 1)[0].lstrip("+~").split(".", 1)[0].split("@", 1)[0]


def typed_agents(args: Sequence[str]) -> str | None:
    """The value of the last ``agent=`` argument (``egrl,sa`` for a sweep), None if none."""
    agents = [a.split("=", 1)[1] for a in args if a.startswith("agent=")]
    return agents[-1] if agents else None


def own_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` without those of sections the agent they choose (``agent=NAME``, the
    last one; ``egrl`` by default) does not own: ``learner=sac-table2`` or
    ``population.size=4`` for an agent without EGRL's sections (a study's overrides for
    every run, whatever its agent)."""
    agent = typed_agents(overrides) or "egrl"
    owners = section_owners()
    return [
        o
        for o in overrides
        if override_section(o) not in owners or agent in owners[override_section(o)]
    ]


def forced_section_values(args: Sequence[str]) -> list[str]:
    """``args`` of a sweep over several agents (``agent=egrl,sa``) or with a preset (which
    may choose the agents) with each value of an agent-owned section (``population.size=6``)
    forced (``++population.size=6``): a run of an agent without that section gets it and
    ignores it (its ``config.yaml`` does not carry it), where Hydra would refuse the key.
    Other commands are returned as they are."""
    presets = any(a.startswith(("experiment=", "hparams_search=")) for a in args)
    if not presets and "," not in (typed_agents(args) or ""):
        return list(args)  # one agent, typed or the default: Hydra checks its keys
    owners = section_owners()
    out = []
    for arg in args:
        key = arg.split("=", 1)[0]
        plain = "=" in arg and not arg.startswith(("+", "~")) and "." in key
        out.append(f"++{arg}" if plain and override_section(arg) in owners else arg)
    return out
