"""The shared replay buffer: cyclic storage, sampling, sources, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.checkpoint import load_state, save_state
from egrl.replay import ReplayBuffer


def _maps(values: list[int], num_units: int = 3, num_heads: int = 2) -> np.ndarray:
    """One map per value, every entry equal to it: int ``[B, N, H]``."""
    return np.stack([np.full((num_units, num_heads), v) for v in values])


def test_wraps_around_and_keeps_the_newest():
    buf = ReplayBuffer(capacity=5, num_units=3, num_heads=2)
    buf.add(_maps([0, 1, 2]), [0.0, 1.0, 2.0], source="gnn")
    slots = buf.add(_maps([3, 4, 5, 6]), [3.0, 4.0, 5.0, 6.0], source="boltzmann")
    assert len(buf) == 5
    assert slots.tolist() == [3, 4, 0, 1]
    # slot order after two wraps: 5, 6, 2, 3, 4
    assert buf.rewards.tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buf.actions[:, 0, 0].tolist() == [5, 6, 2, 3, 4]
    assert buf.num_added == 7
    assert buf.counts_by_source() == {"gnn": 1, "boltzmann": 4}


def test_in_order_gives_the_slots_oldest_first_before_and_after_a_wrap():
    buf = ReplayBuffer(capacity=5, num_units=3, num_heads=2)
    buf.add(_maps([0, 1, 2]), [0.0, 1.0, 2.0], source="gnn")
    assert buf.in_order().tolist() == [0, 1, 2]
    buf.add(_maps([3, 4, 5, 6]), [3.0, 4.0, 5.0, 6.0], source="gnn")
    assert buf.actions[buf.in_order(), 0, 0].tolist() == [2, 3, 4, 5, 6]


def test_a_batch_larger_than_capacity_keeps_its_last_maps():
    buf = ReplayBuffer(capacity=3, num_units=3, num_heads=2)
    buf.add(_maps([1]), [1.0], source="gnn")
    buf.add(_maps([10, 11, 12, 13, 14]), np.arange(10.0, 15.0), source="boltzmann")
    assert sorted(buf.rewards.tolist()) == [12.0, 13.0, 14.0]
    assert len(buf) == 3


def test_samples_only_filled_slots():
    buf = ReplayBuffer(capacity=100, num_units=3, num_heads=2)
    buf.add(_maps([0, 1, 2]), [10.0, 11.0, 12.0], source="learner-noisy", done=[True, False, True])
    batch = buf.sample(2000, np.random.default_rng(0))
    assert batch["index"].max() < 3
    assert set(batch["rewards"].tolist()) == {10.0, 11.0, 12.0}
    assert batch["actions"].shape == (2000, 3, 2) and batch["actions"].dtype == np.int64
    # the fields of a transition stay together
    assert np.array_equal(batch["rewards"] - 10.0, batch["actions"][:, 0, 0])
    assert np.array_equal(batch["done"], batch["rewards"] != 11.0)
    assert buf.source_names[batch["source"][0]] == "learner-noisy"


def test_sampling_is_reproducible_from_the_generator():
    buf = ReplayBuffer(capacity=50, num_units=3, num_heads=2)
    buf.add(_maps(list(range(20))), np.arange(20.0), source="gnn")
    a = buf.sample(24, np.random.default_rng(7))
    b = buf.sample(24, np.random.default_rng(7))
    assert np.array_equal(a["index"], b["index"])


def test_int8_storage_and_int16_when_needed():
    assert ReplayBuffer(4, 3, 2).actions.dtype == np.int8
    assert ReplayBuffer(4, 3, 2, max_choices=300).actions.dtype == np.int16


@pytest.mark.parametrize(
    "actions, rewards, message",
    [
        (np.zeros((2, 4, 2), dtype=int), [0.0, 0.0], "shape"),
        (np.full((1, 3, 2), 128), [0.0], "choice 128 does not fit max_choices=128"),
        (np.zeros((2, 3, 2), dtype=int), [0.0, np.nan], "not finite"),
        (np.zeros((2, 3, 2), dtype=int), [0.0], "single reward"),
    ],
)
def test_bad_input_is_named_and_nothing_is_stored(actions, rewards, message):
    buf = ReplayBuffer(capacity=4, num_units=3, num_heads=2)
    with pytest.raises(ValueError, match=message):
        buf.add(actions, rewards, source="gnn")
    assert len(buf) == 0 and buf.num_added == 0


def test_empty_buffer_cannot_be_sampled():
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(4, 3, 2).sample(1, np.random.default_rng(0))


def test_state_round_trip_through_a_checkpoint(tmp_path):
    buf = ReplayBuffer(capacity=4, num_units=3, num_heads=2)
    buf.add(_maps([0, 1, 2]), [0.5, 1.5, 2.5], source="gnn")
    buf.add(_maps([3, 4]), [3.5, 4.5], source="learner-clean", done=False)
    save_state(buf.state_dict(), tmp_path / "replay")
    restored = ReplayBuffer(capacity=4, num_units=3, num_heads=2)
    restored.load_state_dict(load_state(tmp_path / "replay"))
    assert len(restored) == 4 and restored.num_added == 5
    assert restored.source_names == ["gnn", "learner-clean"]
    for key in ("actions", "rewards", "done", "source"):
        assert np.array_equal(getattr(restored, key), getattr(buf, key))
    # the cursor survives: the next map overwrites the same slot in both
    assert (
        restored.add(_maps([9]), [9.0], "gnn").tolist()
        == buf.add(_maps([9]), [9.0], "gnn").tolist()
    )


def test_state_of_another_shape_is_refused():
    buf = ReplayBuffer(capacity=4, num_units=3, num_heads=2)
    with pytest.raises(ValueError, match="num_units"):
        ReplayBuffer(capacity=4, num_units=5, num_heads=2).load_state_dict(buf.state_dict())
