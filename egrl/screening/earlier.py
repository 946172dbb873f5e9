"""``screen.init_from``: the paid measurements of earlier runs on the same target.

A learned cost model of one chip carries across workloads where a map does not: the
chip's physics (what a byte in the wrong level costs, which chip is the bottleneck) are
the same for every program it runs (TenSet; Kaufman et al., *A Learned Performance Model
for Tensor Processing Units*, MLSys 2021). ``screen.init_from=[RUN_DIR, ...]`` reads what
earlier runs of the same target on other workloads measured, and the screen fits its
model on them beside the run's own measurements.

What is read of a run: its ``config.yaml`` (which hardware model, workload and reward)
and its newest checkpoint's replay buffer: every map the run was answered, as proposed,
with the reward it earned (repeats dropped). The earlier run's workload is bound to the
same target again (nothing is measured) so that a model can read its maps.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from egrl.checkpoint import load_state
from egrl.env import env_from_config, reward_of
from egrl.ledger import record_state
from egrl.rundir import RunDir
from egrl.screening.base import Domain, Measured

log = logging.getLogger(__name__)

#: config keys two runs must share for one's measurements to teach the other's screen
SAME_TARGET_KEYS = ("hwmodel", "reward", "invalid_reward_scale")


class EarlierRunError(ValueError):
    """An ``init_from`` run that cannot teach this run's screen (names it and why)."""


def as_paths(value: str | Sequence[str] | None) -> list[Path]:
    """``screen.init_from`` as a list of paths (one path, a list, or None)."""
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [Path(value)]
    return [Path(v) for v in value]


def _target_of(config: dict) -> dict:
    """The part of a run's config that says what was measured and how it was scored."""
    hw = dict(config.get("hwmodel") or {})
    return {
        "hwmodel": {"name": hw.get("name"), "params": dict(hw.get("params") or {})},
        "reward": reward_of(config),
        "invalid_reward_scale": float(config.get("invalid_reward_scale", 1.0)),
    }


def foreign_problem(path: Path, config: dict, own: dict) -> str | None:
    """Why the run at ``path`` (its resolved ``config``) is not of the target ``own`` (the
    run's resolved config), or None when it is."""
    theirs, mine = _target_of(config), _target_of(own)
    for key in SAME_TARGET_KEYS:
        if theirs[key] != mine[key]:
            return (
                f"screen.init_from={path} is invalid: that run's {key} is {theirs[key]}, "
                f"this run's is {mine[key]} (a screen learns from runs of its own target)"
            )
    return None


def read_config(path: Path) -> dict:
    """The resolved config of the run directory ``path``.

    Raises:
        EarlierRunError: no such directory, or not a run directory.
    """
    files = RunDir(path)
    if not path.is_dir():
        raise EarlierRunError(f"screen.init_from={path} is invalid: no such directory")
    if not files.is_run_dir():
        raise EarlierRunError(f"screen.init_from={path} is invalid: not a run directory")
    return files.resolved_config()


def load_measured(path: Path, prior: str | None = None) -> Measured:
    """The maps the run at ``path`` was answered and their rewards, bound again.

    Raises:
        EarlierRunError: the run has no checkpoint or answered nothing.
    """
    config = read_config(path)
    files = RunDir(path)
    checkpoint = files.latest_checkpoint()
    if checkpoint is None:
        raise EarlierRunError(f"screen.init_from={path} is invalid: the run has no checkpoint")
    buffer = record_state(load_state(checkpoint))
    size = int(buffer.get("size", 0))
    if size == 0:
        raise EarlierRunError(f"screen.init_from={path} is invalid: the run measured nothing")
    maps = np.asarray(buffer["actions"][:size], dtype=np.int64)
    rewards = np.asarray(buffer["rewards"][:size], dtype=np.float64)
    _, first = np.unique(maps.reshape(size, -1), axis=0, return_index=True)
    first = np.sort(first)
    finite = first[np.isfinite(rewards[first])]
    env = env_from_config(config)
    domain = Domain.of(env, make_prior(prior, env))
    log.info("screen: %d maps of %s from %s", len(finite), domain.name, path)
    return Measured(domain, maps[finite].astype(np.int16), rewards[finite])


def make_prior(name: str | None, env):
    """The free prior ``screen.prior`` of ``env``'s target (None: none).

    ``nnpi``: the NNP-I model's description of the target's maps
    (:func:`hwmodels.external.nnpi_prior`), for a chip with the NNP-I heads.

    Raises:
        ValueError: an unknown prior, or a target it cannot read.
    """
    if name is None:
        return None
    if name != "nnpi":
        raise ValueError(f"screen.prior={name} is invalid: expected nnpi or null")
    from hwmodels.external import nnpi_prior

    try:
        return nnpi_prior(env.target)
    except ValueError as exc:
        raise ValueError(f"screen.prior=nnpi is invalid: {exc}") from None
