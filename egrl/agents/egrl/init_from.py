"""Fine-tuning: a trained Graph U-Net policy to start a run's GNN policies from (``init_from=``).

``init_from`` names one of:

* a policy snapshot ``RUN/policies/iter_XXXXXX.safetensors`` (:func:`egrl.agents.egrl.transfer.write_snapshot`,
  written by ``egrl``, ``pg`` and ``egrl-transfer pretrain`` runs);
* a run directory: its newest snapshot, or, when it has none, its newest intact checkpoint;
* a checkpoint directory ``RUN/checkpoints/gen_XXXXXX`` of an ``egrl``/``ea``/``pg`` run
  (the first learner's actor and the fittest GNN member; the sizes are read off the
  weights, :func:`actor_layout`).

:func:`read_policy` gives a :class:`TrainedPolicy`; :func:`check_fits` says whether it fits a
decision graph (feature width, choices of every head) and the run's policy sizes. A
missing or unfit policy is a :class:`egrl.agents.egrl.transfer.SnapshotError` that names it and the
mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from egrl import rundir
from egrl.agents.egrl.transfer import POLICY_SIZE_KEYS, SnapshotError
from egrl.checkpoint import CheckpointError


@dataclass(frozen=True)
class TrainedPolicy:
    """A trained policy's weights and what they fit.

    Attributes:
        source: the snapshot file or checkpoint directory it was read from.
        in_dim: node feature width ``F`` of the decision graph it was trained on.
        num_choices: choices of each decision head.
        sizes: Graph U-Net sizes ``{"hidden", "out", "depth", "heads"}``.
        weights: actor state dicts by kind (``"learner"``, ``"champion"``; at least one).
    """

    source: Path
    in_dim: int
    num_choices: tuple[int, ...]
    sizes: dict
    weights: dict[str, dict[str, Tensor]]

    def actor_state(self, prefer: str) -> dict[str, Tensor]:
        """The ``prefer`` kind's weights, or the other kind's when it lacks them."""
        if prefer in self.weights:
            return self.weights[prefer]
        return next(iter(self.weights.values()))


def read_policy(path: str | Path) -> TrainedPolicy:
    """The trained policy ``path`` names (see the module docstring).

    Raises:
        SnapshotError: nothing there, no snapshot or checkpoint in it, or one that cannot
            be read.
    """
    path = Path(path)
    where = f"init_from={path} is invalid"
    try:
        stored = rundir.read_policy(path)
    except FileNotFoundError as exc:
        raise SnapshotError(f"{where}: no such file or directory") from exc
    except LookupError as exc:
        raise SnapshotError(
            f"{where}: no policy snapshot ({rundir.POLICIES_DIR}/{rundir.SNAPSHOT_GLOB}) "
            "or checkpoint in it"
        ) from exc
    except rundir.PolicyError as exc:
        raise SnapshotError(f"init_from={exc.path} is invalid: {exc.problem}") from exc
    except CheckpointError as exc:
        raise SnapshotError(f"{where}: {exc}") from exc
    if stored.snapshot is not None:
        snap = stored.snapshot
        return TrainedPolicy(
            stored.source, snap.in_dim, snap.num_choices, snap.policy, stored.weights
        )
    in_dim, num_choices, sizes = actor_layout(next(iter(stored.weights.values())), stored.source)
    return TrainedPolicy(stored.source, in_dim, num_choices, sizes, stored.weights)


def actor_layout(state: Mapping[str, Tensor], source: Path) -> tuple[int, tuple[int, ...], dict]:
    """Feature width, choices per head and sizes of a Graph U-Net actor, read off its weights.

    ``embed.weight`` is ``[hidden, F]``, ``project.weight`` ``[out, hidden]``, there is one
    ``pools.i`` per level of ``depth``, ``up.0.att`` is ``[1, heads, hidden // heads]`` and
    ``heads.h.weight`` is ``[choices of head h, out]``.
    """
    try:
        depth = len({k.split(".")[1] for k in state if k.startswith("pools.")})
        choices = tuple(
            int(state[f"heads.{h}.weight"].shape[0])
            for h in range(sum(1 for k in state if k.startswith("heads.") and k.endswith("weight")))
        )
        sizes = {
            "hidden": int(state["embed.weight"].shape[0]),
            "out": int(state["project.weight"].shape[0]),
            "depth": depth,
            "heads": int(state["up.0.att"].shape[1]),
        }
        return int(state["embed.weight"].shape[1]), choices, sizes
    except (KeyError, IndexError) as exc:
        raise SnapshotError(
            f"init_from={source} is invalid: its weights are not a Graph U-Net actor's "
            f"(missing {exc})"
        ) from exc


def check_fits(
    policy: TrainedPolicy, in_dim: int, num_choices: Sequence[int], sizes: Mapping[str, int]
) -> None:
    """Raise :class:`SnapshotError` unless ``policy`` reads this decision graph with these sizes.

    Args:
        in_dim: the run's decision-graph feature width.
        num_choices: the run's choices per head.
        sizes: the run's ``policy`` sizes (``hidden``, ``out``, ``depth``, ``heads``).
    """
    where = f"init_from={policy.source} is invalid"
    if int(in_dim) != policy.in_dim:
        raise SnapshotError(
            f"{where}: it reads decision graphs with {policy.in_dim} features, this run's "
            f"have {in_dim}"
        )
    if tuple(int(c) for c in num_choices) != policy.num_choices:
        raise SnapshotError(
            f"{where}: its decision heads have {list(policy.num_choices)} choices, this "
            f"run's {[int(c) for c in num_choices]}"
        )
    mine = {k: int(sizes[k]) for k in POLICY_SIZE_KEYS}
    if mine != policy.sizes:
        args = " ".join(f"policy.{k}={v}" for k, v in policy.sizes.items())
        raise SnapshotError(
            f"{where}: its Graph U-Net has sizes {policy.sizes}, this run {mine} (add {args})"
        )


def load_into(actor: torch.nn.Module, state: Mapping[str, Tensor], source: Path) -> None:
    """Load ``state`` into ``actor`` (strict), naming ``source`` if it does not fit."""
    try:
        actor.load_state_dict(dict(state), strict=True)
    except RuntimeError as exc:
        raise SnapshotError(
            f"init_from={source} is invalid: its weights do not fit: {exc}"
        ) from exc


__all__ = ["TrainedPolicy", "check_fits", "load_into", "read_policy"]
