"""Fine-tuning: a trained Graph U-Net policy to start a run's GNN policies from (``init_from=``).

``init_from`` names one of:

* a policy snapshot ``RUN/policies/iter_XXXXXX.safetensors`` (:mod:`policies.snapshot`,
  written by ``egrl``, ``pg`` and ``egrl-transfer pretrain`` runs);
* a run directory: its newest snapshot, or, when it has none, its newest intact checkpoint;
* a checkpoint directory ``RUN/checkpoints/gen_XXXXXX`` of an ``egrl``/``ea``/``pg`` run
  (the first learner's actor and the fittest GNN member, :func:`checkpoint_weights`; the
  sizes are read off the weights, :meth:`policies.snapshot.StoredPolicy.from_weights`).

:func:`read_policy` gives a :class:`policies.snapshot.StoredPolicy`; :func:`check_fits` says
whether it fits a decision graph (feature width, choices of every head) and the run's
policy sizes. A missing or unfit policy is a :class:`policies.snapshot.PolicyError` that
names it and the mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from egrl.checkpoint import CheckpointError, load_state
from egrl.rundir import POLICIES_DIR, SNAPSHOT_GLOB, RunDir, is_checkpoint
from policies.snapshot import POLICY_SIZE_KEYS, PolicyError, Snapshot, StoredPolicy, read_snapshot


def list_snapshots(run_dir: str | Path) -> list[Snapshot]:
    """Every snapshot under ``run_dir/policies``, by training iterations."""
    files = RunDir(run_dir)
    folder, paths = files.policies, files.snapshots()
    if not paths:
        raise PolicyError(
            f"no policy snapshots ({SNAPSHOT_GLOB}) in {folder}: train a GNN agent (egrl, pg) "
            "or run egrl-transfer pretrain first",
            folder,
        )
    return sorted((read_snapshot(p) for p in paths), key=lambda s: s.iterations)


def read_policy(path: str | Path) -> StoredPolicy:
    """The trained policy ``path`` names (see the module docstring).

    Raises:
        PolicyError: nothing there, no snapshot or checkpoint in it, or one that cannot
            be read (the message starts ``init_from=PATH is invalid:``).
    """
    path = Path(path)
    try:
        return _read_policy(path)
    except PolicyError as exc:
        raise PolicyError(f"init_from={exc.path} is invalid: {exc}", exc.path) from exc
    except CheckpointError as exc:
        raise PolicyError(f"init_from={path} is invalid: {exc}", exc.path) from exc


def _read_policy(path: Path) -> StoredPolicy:
    """:func:`read_policy`, its errors not yet prefixed with ``init_from=``."""
    if path.is_file():
        return StoredPolicy.from_snapshot(read_snapshot(path))
    if not path.is_dir():
        raise PolicyError("no such file or directory", path)
    if is_checkpoint(path):
        return _checkpoint_policy(path, load_state(path))
    files = RunDir(path)
    if files.snapshots():
        return StoredPolicy.from_snapshot(list_snapshots(path)[-1])
    found = files.load_latest_checkpoint() if files.checkpoints.is_dir() else None
    if found is None:
        raise PolicyError(
            f"no policy snapshot ({POLICIES_DIR}/{SNAPSHOT_GLOB}) or checkpoint in it", path
        )
    return _checkpoint_policy(*found)


def _checkpoint_policy(ckpt: Path, state: Any) -> StoredPolicy:
    """The GNN policies in the state of the checkpoint ``ckpt``."""
    try:
        weights = checkpoint_weights(state)
    except ValueError as exc:
        raise PolicyError(str(exc), ckpt) from exc
    return StoredPolicy.from_weights(ckpt, weights)


def checkpoint_weights(state: Any) -> dict[str, dict[str, Tensor]]:
    """The GNN policies in the state of an ``egrl``/``ea``/``pg`` run's checkpoint
    (:meth:`egrl.agents.egrl.agent.EGRLAgent.agent_state` under ``"agent"``).

    Returns:
        actor state dicts by kind: ``"learner"`` (the first learner's actor) and
        ``"champion"`` (the fittest GNN member of the population), those the run has.

    Raises:
        ValueError: not the checkpoint of such a run, or it holds no GNN policy.
    """
    agent = state.get("agent") if isinstance(state, Mapping) else None
    if not isinstance(agent, Mapping) or not ({"learners", "population"} & set(agent)):
        raise ValueError("not a checkpoint of an egrl, ea or pg run")
    weights: dict[str, dict[str, Tensor]] = {}
    if agent.get("learners"):
        weights["learner"] = dict(agent["learners"][0]["actor"])
    population = agent.get("population")
    if population and population.get("gnn"):
        gnn = np.flatnonzero(np.asarray(population["kinds"]) == "gnn")
        fitness = np.asarray(population["fitness"], dtype=np.float64)[gnn]
        best = int(np.argmax(np.nan_to_num(fitness, nan=-np.inf)))
        weights["champion"] = dict(population["gnn"][best])
    if not weights:
        raise ValueError("the checkpoint holds no GNN policy")
    return weights


def check_fits(
    policy: StoredPolicy, in_dim: int, num_choices: Sequence[int], sizes: Mapping[str, int]
) -> None:
    """Raise :class:`PolicyError` unless ``policy`` reads this decision graph with these sizes.

    Args:
        in_dim: the run's decision-graph feature width.
        num_choices: the run's choices per head.
        sizes: the run's ``policy`` sizes (``hidden``, ``out``, ``depth``, ``heads``).
    """
    where = f"init_from={policy.source} is invalid"
    if int(in_dim) != policy.in_dim:
        raise PolicyError(
            f"{where}: it reads decision graphs with {policy.in_dim} features, this run's "
            f"have {in_dim}",
            policy.source,
        )
    if tuple(int(c) for c in num_choices) != policy.num_choices:
        raise PolicyError(
            f"{where}: its decision heads have {list(policy.num_choices)} choices, this "
            f"run's {[int(c) for c in num_choices]}",
            policy.source,
        )
    mine = {k: int(sizes[k]) for k in POLICY_SIZE_KEYS}
    if mine != policy.sizes:
        args = " ".join(f"policy.{k}={v}" for k, v in policy.sizes.items())
        raise PolicyError(
            f"{where}: its Graph U-Net has sizes {policy.sizes}, this run {mine} (add {args})",
            policy.source,
        )


def load_into(actor: torch.nn.Module, state: Mapping[str, Tensor], source: Path) -> None:
    """Load ``state`` into ``actor`` (strict), naming ``source`` if it does not fit."""
    try:
        actor.load_state_dict(dict(state), strict=True)
    except RuntimeError as exc:
        raise PolicyError(
            f"init_from={source} is invalid: its weights do not fit: {exc}", source
        ) from exc


__all__ = ["check_fits", "checkpoint_weights", "load_into", "read_policy"]
