"""policies.snapshot: the policy snapshot file, read back as written."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from policies import GraphUNetActor, seeded_init
from policies.snapshot import (
    PolicyError,
    StoredPolicy,
    load_actor,
    read_snapshot,
    read_weights,
    write_snapshot,
)

SIZES = {"hidden": 8, "out": 8, "depth": 1, "heads": 2}


def tiny_actor(seed: int = 0) -> GraphUNetActor:
    return seeded_init(seed, lambda: GraphUNetActor(5, [3, 2], **SIZES))


def test_a_snapshot_is_read_back_as_written(tmp_path):
    learner, champion = tiny_actor(0), tiny_actor(1)
    path = write_snapshot(
        tmp_path / "policies" / "iter_000012.safetensors",
        {"learner": learner, "champion": champion.state_dict()},
        iterations=12,
        generation=3,
        workload="a+b",
        sizes=SIZES,
        in_dim=5,
        num_choices=[3, 2],
    )
    snap = read_snapshot(path)
    assert (snap.path, snap.iterations, snap.generation, snap.workload) == (path, 12, 3, "a+b")
    assert (snap.policy, snap.in_dim, snap.num_choices) == (SIZES, 5, (3, 2))
    assert snap.kinds == ("learner", "champion")
    weights = read_weights(snap)
    for kind, actor in (("learner", learner), ("champion", champion)):
        loaded = load_actor(snap, kind)
        for key, value in actor.state_dict().items():
            assert torch.equal(loaded.state_dict()[key], value)
            assert torch.equal(weights[kind][key], value)
    stored = StoredPolicy.from_snapshot(snap)
    assert (stored.source, stored.in_dim, stored.num_choices, stored.sizes) == (
        path,
        5,
        (3, 2),
        SIZES,
    )
    # the same layout, read off the weights alone (a checkpoint's actors)
    bare = StoredPolicy.from_weights(tmp_path, {"champion": champion.state_dict()})
    assert (bare.in_dim, bare.num_choices, bare.sizes) == (5, (3, 2), SIZES)
    assert bare.actor_state("learner") is bare.weights["champion"]


def test_what_cannot_be_read_is_a_policy_error_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match="must be among"):
        write_snapshot(
            tmp_path / "x.safetensors",
            {"critic": tiny_actor()},
            iterations=1,
            sizes=SIZES,
            in_dim=5,
            num_choices=[3, 2],
        )
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a snapshot")
    with pytest.raises(PolicyError, match="cannot read policy snapshot .*bad.safetensors") as err:
        read_snapshot(bad)
    assert err.value.path == bad
    bare = tmp_path / "bare.safetensors"
    save_file({"learner.w": torch.zeros(1)}, str(bare), {"iterations": "1"})
    with pytest.raises(PolicyError, match=r"bare.safetensors lacks metadata \['policy'"):
        read_snapshot(bare)
    meta = {"iterations": "1", "policy": json.dumps({"hidden": 8}), "in_dim": "5"}
    save_file({"w": torch.zeros(1)}, str(bare), {**meta, "num_choices": "[3]"})
    with pytest.raises(PolicyError, match="bare.safetensors has malformed metadata"):
        read_snapshot(bare)
    with pytest.raises(PolicyError, match=r"the weights in .* are not a Graph U-Net actor's"):
        StoredPolicy.from_weights(tmp_path, {"learner": {"w": torch.zeros(1)}})
