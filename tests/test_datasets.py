"""Named datasets: the mcm87 members, its fixed split, the family builders, determinism."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

import workloads
import workloads.datasets as ds
from workloads import OP_TYPES, Workload, WorkloadError
from workloads.families import FAMILIES, Variant
from workloads.zoo import DATASET_DIR, SUFFIX

NAME = "mcm87"
MEMBERS = ds.members(NAME) if NAME in ds.names() else []
#: zoo workloads built around attention: kept out of the dataset
TRANSFORMERS = {
    "vit-b16",
    "swin-tiny",
    "bert-base",
    "bert-large",
    "distilbert",
    "gpt2",
    "t5-small-encoder",
    "wav2vec2-base",
}


def _depth(value) -> int:
    return sum(value) if isinstance(value, list) else int(value)


def test_dataset_is_listed_and_has_87_unique_members():
    assert NAME in ds.names()
    assert len(MEMBERS) == 87 and len(set(MEMBERS)) == 87
    assert not set(MEMBERS) & TRANSFORMERS


def test_split_is_66_5_16_disjoint_and_covers_the_members():
    parts = ds.split(NAME)
    assert {k: len(v) for k, v in parts.items()} == {"train": 66, "val": 5, "test": 16}
    train, val, test = (set(parts[p]) for p in ("train", "val", "test"))
    assert not (train & val or train & test or val & test)
    assert train | val | test == set(MEMBERS)


def test_split_is_stratified_by_family():
    family_of = ds.families(NAME)
    parts = ds.split(NAME)
    in_part = {p: {family_of[n] for n in names} for p, names in parts.items()}
    families = set(family_of.values())
    assert len(families) >= 8
    assert in_part["train"] == families
    assert len(in_part["test"]) >= 0.8 * len(families)


def test_split_is_read_from_the_file_and_returned_as_a_copy():
    data = json.loads((DATASET_DIR / f"{NAME}.json").read_text())
    parts = ds.split(NAME)
    assert parts == data["split"]
    parts["train"].clear()
    assert len(ds.split(NAME)["train"]) == 66


@pytest.mark.parametrize("name", MEMBERS)
def test_every_member_loads_by_name_without_attention(name):
    w = workloads.load(name)
    assert w.name == name
    assert 10 <= w.num_nodes <= 500  # tens to hundreds of nodes
    assert set(w.op_types) <= set(OP_TYPES)
    assert np.isfinite(w.features).all()
    assert w.macs.sum() > 0 and w.total_weight_bytes > 0
    # no attention: no softmax, and no product of two activations except DLRM's interaction
    assert "softmax" not in w.op_types
    family = ds.families(NAME)[name]
    if family != "recsys":
        assert "matmul" not in w.op_types
    assert not any("attention" in n or "attn" in n for n in w.node_names)


def test_generated_members_are_named_by_their_family_and_parameters():
    data = ds.definition(NAME)
    generated = [m for m in data["members"] if m["source"] == "generated"]
    assert len(generated) >= 70
    for m in generated:
        assert Variant(m["family"], m["params"]).name == m["name"]
        assert workloads.load(m["name"]).meta["params"] == m["params"]
    zoo = [m["name"] for m in data["members"] if m["source"] == "zoo"]
    assert set(zoo) <= set(workloads.names())
    assert Counter(m["family"] for m in data["members"]).keys() <= FAMILIES.keys()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shipped_node_counts_grow_with_depth(family):
    """Within each family, members equal but for the depth parameter get more nodes."""
    depth = FAMILIES[family].depth
    groups: dict[str, list[tuple[int, int]]] = {}
    for m in ds.definition(NAME)["members"]:
        if m["family"] != family or m["source"] != "generated":
            continue
        rest = json.dumps({k: v for k, v in m["params"].items() if k != depth}, sort_keys=True)
        groups.setdefault(rest, []).append(
            (_depth(m["params"][depth]), workloads.load(m["name"]).num_nodes)
        )
    compared = [sorted(g) for g in groups.values() if len(g) > 1]
    assert compared, f"no two {family} members differ only in {depth}"
    for g in compared:
        nodes = [n for _, n in g]
        assert nodes == sorted(nodes) and len(set(nodes)) == len(nodes), g


@pytest.mark.parametrize(
    ("family", "small", "deep"),
    [
        ("lstm", {"layers": 1, "hidden": 8, "steps": 3, "bidirectional": False}, {"steps": 5}),
        ("gru", {"layers": 1, "hidden": 8, "steps": 3, "bidirectional": True}, {"layers": 2}),
        ("mlp", {"depth": 2, "width": 8}, {"depth": 4}),
        ("unet", {"levels": 1, "width": 4, "convs": 1}, {"levels": 2}),
    ],
)
def test_builders_grow_with_depth(family, small, deep):
    a = Variant(family, small).to_workload()
    b = Variant(family, {**small, **deep}).to_workload()
    assert b.num_nodes > a.num_nodes
    assert b.meta["family"] == family and b.meta["params"] == {**small, **deep}


def test_committed_file_matches_a_fresh_build():
    """Rebuilding a small member from its recorded parameters gives the committed file."""
    member = next(m for m in ds.definition(NAME)["members"] if m["name"] == "lstm-l1-h128-t8")
    fresh = Variant(member["family"], member["params"]).to_workload(ds.definition(NAME)["seed"])
    shipped = Workload.load(DATASET_DIR / f"{member['name']}{SUFFIX}")

    def comparable(w: Workload) -> dict:
        data = json.loads(json.dumps(w.to_dict()))
        data["meta"].pop("versions")
        return data

    assert comparable(fresh) == comparable(shipped)
    assert fresh.num_nodes == 17  # embedding, then two linears per step after the first


def test_building_twice_gives_the_same_bytes(tmp_path):
    variant = Variant("mlp", {"depth": 3, "width": 16})
    variant.to_workload().save(tmp_path / "a.json.gz")
    variant.to_workload().save(tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_stratified_split_sizes_coverage_and_seed():
    family_of = {
        f"{f}{i}": f for f, n in (("a", 10), ("b", 6), ("c", 3), ("d", 2)) for i in range(n)
    }
    sizes = {"train": 14, "val": 2, "test": 5}
    one = ds.stratified_split(family_of, sizes, np.random.default_rng(1))
    assert {k: len(v) for k, v in one.items()} == sizes
    assert sorted(sum(one.values(), [])) == sorted(family_of)
    assert {family_of[n] for n in one["train"]} == {"a", "b", "c", "d"}
    assert one == ds.stratified_split(family_of, sizes, np.random.default_rng(1))
    others = [ds.stratified_split(family_of, sizes, np.random.default_rng(s)) for s in range(2, 6)]
    assert any(o != one for o in others)
    with pytest.raises(ValueError, match="add up"):
        ds.stratified_split(family_of, {"train": 1}, np.random.default_rng(0))


def test_unknown_names_are_reported():
    with pytest.raises(WorkloadError, match="unknown dataset"):
        ds.split("mcm9000")
    with pytest.raises(WorkloadError, match="unknown workload 'vgg-d12-w16'"):
        workloads.load("vgg-d12-w16")
    with pytest.raises(WorkloadError, match="unknown part"):
        ds.load_part(NAME, "dev")
    with pytest.raises(KeyError, match="unknown family"):
        Variant("transformer", {})


def test_zoo_names_do_not_list_generated_members():
    assert not set(workloads.names()) & set(workloads.zoo.dataset_member_names())
