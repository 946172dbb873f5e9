"""The shared replay buffer: every map any policy ever proposed, with its reward.

In EGRL every episode is one step (Table 2): the state is the workload's decision graph,
which is the same for every transition of a run, the action is a whole map ``[N, H]`` and
the episode ends with the reward. The buffer therefore stores no states: only actions,
rewards, the ``done`` flag and the kind of policy that produced each transition (its
*source*: ``"gnn"``, ``"boltzmann"``, ``"learner"``, or an agent's own name).

Storage is cyclic (Algorithm 2, line 2): once ``capacity`` transitions are held, each new
one overwrites the oldest. Arrays are numpy; :meth:`ReplayBuffer.state_dict` returns only
arrays, ints and a list of names, so checkpoints need no pickle.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_INT8_MAX = np.iinfo(np.int8).max
_INT16_MAX = np.iinfo(np.int16).max
_SOURCE_DTYPE = np.int8
_MAX_SOURCES = np.iinfo(_SOURCE_DTYPE).max + 1


class ReplayBuffer:
    """Cyclic buffer of one-step transitions ``(map, reward, done, source)``.

    Args:
        capacity: most transitions held (EGRL Table 2: 100000).
        num_units: decision units ``N`` of a map.
        num_heads: decision heads ``H`` of a map.
        max_choices: largest number of choices of any head; maps are stored as int8 when
            every choice index fits (``max_choices <= 128``), else int16.
    """

    def __init__(self, capacity: int, num_units: int, num_heads: int, max_choices: int = 128):
        for name, value in (("capacity", capacity), ("num_units", num_units)):
            if int(value) < 1:
                raise ValueError(f"ReplayBuffer {name} must be >= 1, got {value}")
        if int(num_heads) < 1:
            raise ValueError(f"ReplayBuffer num_heads must be >= 1, got {num_heads}")
        if not 1 <= int(max_choices) <= _INT16_MAX + 1:
            raise ValueError(f"ReplayBuffer max_choices must be in 1..{_INT16_MAX + 1}")
        self.capacity = int(capacity)
        self.num_units = int(num_units)
        self.num_heads = int(num_heads)
        self.max_choices = int(max_choices)
        dtype = np.int8 if self.max_choices <= _INT8_MAX + 1 else np.int16
        self.actions = np.zeros((self.capacity, self.num_units, self.num_heads), dtype=dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.done = np.zeros(self.capacity, dtype=bool)
        self.source = np.zeros(self.capacity, dtype=_SOURCE_DTYPE)
        self.source_names: list[str] = []
        self._size = 0
        self._cursor = 0  # next slot to write
        self.num_added = 0  # transitions ever added (including overwritten ones)

    # ----------------------------------------------------------------- writing
    def __len__(self) -> int:
        return self._size

    def source_id(self, source: str) -> int:
        """Small-int tag of ``source``, registering the name on first use."""
        if not isinstance(source, str) or not source:
            raise ValueError(f"source must be a non-empty string, got {source!r}")
        if source not in self.source_names:
            if len(self.source_names) >= _MAX_SOURCES:
                raise ValueError(f"more than {_MAX_SOURCES} distinct sources: {source!r}")
            self.source_names.append(source)
        return self.source_names.index(source)

    def add(self, actions, rewards, source: str, done=True) -> np.ndarray:
        """Append a batch of transitions.

        The maps are stored as given: they are the maps an environment evaluated, which
        :meth:`egrl.env.Env.check_maps` has validated (shape, integer choices in range).

        Args:
            actions: int ``[B, N, H]``: the maps as evaluated.
            rewards: float ``[B]`` (or a scalar for one map).
            source: name of the policy that produced every map of the batch.
            done: bool ``[B]`` or a scalar; ``True`` for EGRL's one-step episodes.

        Returns:
            int64 ``[B]``: the slots written.
        """
        acts = np.asarray(actions)
        if acts.size and int(acts.max()) >= self.max_choices:
            raise ValueError(
                f"choice {int(acts.max())} does not fit max_choices={self.max_choices}"
            )
        batch = len(acts)
        rews = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if rews.size == 1 and batch > 1:
            raise ValueError(f"got {batch} maps but a single reward")
        if rews.shape != (batch,):
            raise ValueError(f"rewards must have shape [{batch}], got {list(np.shape(rewards))}")
        if not np.all(np.isfinite(rews)):
            bad = int(np.flatnonzero(~np.isfinite(rews))[0])
            raise ValueError(f"reward of map {bad} from {source!r} is not finite: {rews[bad]}")
        dones = np.broadcast_to(np.asarray(done, dtype=bool), (batch,))
        tag = self.source_id(source)
        slots = (self._cursor + np.arange(batch)) % self.capacity
        if batch > self.capacity:  # only the last `capacity` maps survive
            acts, rews, dones, slots = (
                acts[-self.capacity :],
                rews[-self.capacity :],
                dones[-self.capacity :],
                slots[-self.capacity :],
            )
        self.actions[slots] = acts
        self.rewards[slots] = rews
        self.done[slots] = dones
        self.source[slots] = tag
        self._cursor = int((self._cursor + batch) % self.capacity)
        self._size = min(self.capacity, self._size + batch)
        self.num_added += batch
        return slots.astype(np.int64)

    # ----------------------------------------------------------------- reading
    def in_order(self) -> np.ndarray:
        """int64 ``[len(self)]``: the slots held, oldest first (once the buffer has wrapped
        the oldest is the slot the next map overwrites)."""
        if self._size < self.capacity:
            return np.arange(self._size, dtype=np.int64)
        return (self._cursor + np.arange(self.capacity, dtype=np.int64)) % self.capacity

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Draw ``batch_size`` transitions uniformly (with replacement) from filled slots.

        Returns:
            ``actions`` int64 ``[B, N, H]``, ``rewards`` float32 ``[B]``, ``done`` bool
            ``[B]``, ``source`` int64 ``[B]`` (index into :attr:`source_names`), ``index``
            int64 ``[B]`` (the slots drawn).
        """
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        index = rng.integers(0, self._size, size=int(batch_size))
        return self.gather(index)

    def gather(self, index: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """The transitions in slots ``index`` (int ``[B]``), as :meth:`sample` returns them."""
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(f"slots must be in 0..{self._size - 1}, got {idx.min()}..{idx.max()}")
        return {
            "actions": self.actions[idx].astype(np.int64),
            "rewards": self.rewards[idx].copy(),
            "done": self.done[idx].copy(),
            "source": self.source[idx].astype(np.int64),
            "index": idx,
        }

    def reward_stats(self) -> tuple[float, float]:
        """Mean and standard deviation of the rewards held (the filled slots only).

        The learner's ``reward_norm="buffer"`` standardises minibatch rewards with them.
        """
        if self._size == 0:
            raise ValueError("an empty replay buffer has no reward statistics")
        held = self.rewards[: self._size].astype(np.float64)
        return float(held.mean()), float(held.std())

    def counts_by_source(self) -> dict[str, int]:
        """Number of held transitions produced by each source."""
        counts = np.bincount(self.source[: self._size], minlength=len(self.source_names))
        return {name: int(counts[i]) for i, name in enumerate(self.source_names)}

    # ------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """Plain arrays (only the filled slots), ints and the list of source names."""
        n = self._size
        return {
            "capacity": self.capacity,
            "num_units": self.num_units,
            "num_heads": self.num_heads,
            "max_choices": self.max_choices,
            "size": n,
            "cursor": self._cursor,
            "num_added": self.num_added,
            "source_names": list(self.source_names),
            "actions": self.actions[:n].copy(),
            "rewards": self.rewards[:n].copy(),
            "done": self.done[:n].copy(),
            "source": self.source[:n].copy(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` taken from a buffer of the same shape."""
        for key in ("capacity", "num_units", "num_heads", "max_choices"):
            if int(state[key]) != getattr(self, key):
                raise ValueError(
                    f"replay checkpoint has {key}={int(state[key])}, this buffer has "
                    f"{getattr(self, key)}"
                )
        n = int(state["size"])
        cursor = int(state["cursor"])
        if not 0 <= n <= self.capacity or not 0 <= cursor < self.capacity:
            raise ValueError(f"replay checkpoint has size={n}, cursor={cursor} out of range")
        for key in ("actions", "rewards", "done", "source"):
            if len(state[key]) != n:
                raise ValueError(f"replay checkpoint {key!r} holds {len(state[key])} rows, not {n}")
        self.actions[:n] = np.asarray(state["actions"])
        self.rewards[:n] = np.asarray(state["rewards"])
        self.done[:n] = np.asarray(state["done"])
        self.source[:n] = np.asarray(state["source"])
        self.source_names = [str(s) for s in state["source_names"]]
        self._size, self._cursor = n, cursor
        self.num_added = int(state["num_added"])
