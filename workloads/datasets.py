"""Named datasets of workloads with fixed train / validation / test splits.

A dataset is a JSON file ``zoo/dataset/<name>.json`` written by
``scripts/build_dataset.py``: its members (zoo workloads and generated variants of
:mod:`workloads.families`, each with its family and parameters) and its split, drawn once
with a seeded generator and then kept as written. Every member loads by name with
:func:`workloads.load`.

>>> import workloads.datasets as ds
>>> ds.names()
['mcm87']
>>> parts = ds.split("mcm87")  # {"train": [...66], "val": [...5], "test": [...16]}
>>> [w.num_nodes for w in ds.load_part("mcm87", "test")]
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from workloads.errors import WorkloadError
from workloads.ir import Workload
from workloads.zoo import DATASET_DIR, load

FORMAT = "egrl-dataset/1"
#: the parts of a split, in order
PARTS = ("train", "val", "test")


def names() -> list[str]:
    """Names of the datasets shipped under ``zoo/dataset/``."""
    return sorted(p.name[: -len(".json")] for p in DATASET_DIR.glob("*.json"))


@lru_cache(maxsize=8)
def _read(name: str) -> dict:
    path = DATASET_DIR / f"{name}.json"
    if not path.is_file():
        raise WorkloadError(f"unknown dataset {name!r}; known: {', '.join(names())}")
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise WorkloadError(f"dataset file {str(path)!r} is not in format {FORMAT!r}")
    return data


def definition(name: str) -> dict:
    """The dataset file's content: ``name``, ``description``, ``seed``, ``members`` (each
    ``{"name", "family", "source", "params"}``) and ``split``. A copy: changing it changes
    nothing on disk."""
    return copy.deepcopy(_read(name))


def members(name: str) -> list[str]:
    """Workload names of the dataset, in the file's order."""
    return [m["name"] for m in _read(name)["members"]]


def families(name: str) -> dict[str, str]:
    """Member name -> family name."""
    return {m["name"]: m["family"] for m in _read(name)["members"]}


def split(name: str) -> dict[str, list[str]]:
    """``{"train": [...], "val": [...], "test": [...]}``: workload names of each part."""
    parts = _read(name)["split"]
    return {part: list(parts[part]) for part in PARTS}


def load_part(name: str, part: str) -> list[Workload]:
    """The workloads of one part (``"train"``, ``"val"`` or ``"test"``) of a dataset."""
    if part not in PARTS:
        raise WorkloadError(f"unknown part {part!r}; expected one of {', '.join(PARTS)}")
    return [load(member) for member in split(name)[part]]


def stratified_split(
    family_of: Mapping[str, str], sizes: Mapping[str, int], rng: np.random.Generator
) -> dict[str, list[str]]:
    """Split ``family_of``'s keys into parts of the given ``sizes``, stratified by family.

    Each part other than ``train`` receives from each family a share proportional to the
    family's size (largest remainders, ties broken by ``rng``), capped so that every
    family keeps at least one member in ``train``; which members go where is drawn by
    ``rng``. Names within each part are sorted.

    Args:
        family_of: member name -> family.
        sizes: part -> number of members, e.g. ``{"train": 66, "val": 5, "test": 16}``;
            they must add up to the number of members.
        rng: the generator that draws the split.
    """
    total = len(family_of)
    if sum(sizes.values()) != total:
        raise ValueError(f"part sizes {dict(sizes)} do not add up to {total} members")
    groups: dict[str, list[str]] = {}
    for member in sorted(family_of):
        groups.setdefault(family_of[member], []).append(member)
    spare = {f: len(g) - 1 for f, g in groups.items()}  # one member always stays in train
    quota: dict[str, dict[str, int]] = {}
    # smaller parts first, so that they are not starved by the caps
    for part in sorted((p for p in sizes if p != "train"), key=lambda p: sizes[p]):
        exact = {f: sizes[part] * len(g) / total for f, g in groups.items()}
        share = {f: min(int(exact[f]), spare[f]) for f in groups}
        tie = dict(zip(sorted(groups), rng.random(len(groups))))
        order = sorted(groups, key=lambda f: (int(exact[f]) - exact[f], tie[f]))
        missing = sizes[part] - sum(share.values())
        while missing > 0:
            candidates = [f for f in order if share[f] < spare[f]]
            if not candidates:
                raise ValueError(f"cannot fill part {part!r} and keep every family in train")
            for f in candidates[:missing]:
                share[f] += 1
            missing = sizes[part] - sum(share.values())
        for f in groups:
            spare[f] -= share[f]
        quota[part] = share
    parts: dict[str, list[str]] = {part: [] for part in sizes}
    for family, group in groups.items():
        shuffled = [group[i] for i in rng.permutation(len(group))]
        start = 0
        for part in quota:
            parts[part] += shuffled[start : start + quota[part][family]]
            start += quota[part][family]
        parts["train"] += shuffled[start:]
    return {part: sorted(parts[part]) for part in sizes}
