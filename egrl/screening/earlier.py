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
same hardware model again (nothing is measured: the earlier chip need not answer) so
that a model can read its maps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import hwmodels
from egrl import distinct
from egrl.checkpoint import load_state
from egrl.env import reward_of, target_from_config
from egrl.ledger import archive_state
from egrl.rundir import RunDir
from egrl.screening.base import Domain, Measured
from hwmodels.nnpi.prior import NNPIPrior, nnpi_prior

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
    """The part of a run's config that says what was measured and how it was scored (the
    hardware model's parameters without those that only say how its chip is read)."""
    hw = dict(config.get("hwmodel") or {})
    reading = set(hwmodels.reading_params(hw.get("name")))
    params = {k: v for k, v in (hw.get("params") or {}).items() if k not in reading}
    return {
        "hwmodel": {"name": hw.get("name"), "params": params},
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
    config, maps, rewards = read_measured(path)
    return bind_measured(config, maps, rewards, prior, path)


def read_measured(path: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    """The resolved config of the run at ``path``, the distinct maps it was answered, int16
    ``[M, N, H]`` in the order first answered, and their finite rewards float64 ``[M]``.

    Raises:
        EarlierRunError: no run there, no checkpoint, or it answered nothing.
    """
    config = read_config(path)
    files = RunDir(path)
    checkpoint = files.latest_checkpoint()
    if checkpoint is None:
        raise EarlierRunError(f"screen.init_from={path} is invalid: the run has no checkpoint")
    buffer = archive_state(load_state(checkpoint))
    size = int(buffer.get("size", 0))
    if size == 0:
        raise EarlierRunError(f"screen.init_from={path} is invalid: the run measured nothing")
    maps = np.asarray(buffer["actions"][:size], dtype=np.int64)
    rewards = np.asarray(buffer["rewards"][:size], dtype=np.float64)
    first = distinct.first_rows(maps)
    finite = first[np.isfinite(rewards[first])]
    return config, maps[finite].astype(np.int16), rewards[finite]


def bind_measured(
    config: dict, maps: np.ndarray, rewards: np.ndarray, prior: str | None, source: Path
) -> Measured:
    """Measurements of the run ``config`` as a model reads them: its workload bound to its
    hardware model again, and nothing measured (the earlier run's chip need not answer,
    nor even exist any more; a chip's description of a map is its own, free)."""
    target, workload = target_from_config(config)
    domain = Domain.of_target(target, workload.name, make_prior(prior, target))
    log.info("screen: %d maps of %s from %s", len(rewards), domain.name, source)
    return Measured(domain, np.asarray(maps, dtype=np.int16), np.asarray(rewards, np.float64))


# ------------------------------------------------------------- chip data files
#: the format of a chip data file (``egrl-chip-data``)
CHIP_DATA_FORMAT = "egrl-chip-data/1"
#: what a chip data file keeps of each run's config
_KEPT = ("hwmodel", "workload", "reward", "invalid_reward_scale")


def is_chip_data(path: Path) -> bool:
    """``path`` names a chip data file (a ``.npz``) rather than a run directory."""
    return Path(path).suffix == ".npz"


def save_chip_data(runs: Sequence[Path], out: Path) -> int:
    """Write the measurements of the runs ``runs`` (run directories of one target, on any
    workloads) to the chip data file ``out`` (``.npz``), which ``screen.init_from`` reads
    as it would read the runs, without their checkpoints. Returns the maps written.

    Raises:
        EarlierRunError: a run that is missing, measured nothing, or is of another
            target than the first.
    """
    meta, arrays = [], {}
    for i, path in enumerate(runs):
        config, maps, rewards = read_measured(Path(path))
        kept = {k: config[k] for k in _KEPT if k in config}
        kept["reward"] = reward_of(config)
        if meta:
            line = foreign_problem(Path(path), kept, meta[0]["config"])
            if line is not None:
                raise EarlierRunError(line)
        meta.append({"source": str(path), "config": kept})
        arrays[f"maps_{i}"], arrays[f"rewards_{i}"] = maps, rewards
    head = {"format": CHIP_DATA_FORMAT, "runs": meta}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, meta=np.array(json.dumps(head)), **arrays)
    return sum(len(arrays[f"rewards_{i}"]) for i in range(len(runs)))


def _read_chip_data(path: Path) -> tuple[list[dict], np.lib.npyio.NpzFile]:
    if not path.is_file():
        raise EarlierRunError(f"screen.init_from={path} is invalid: no such file")
    try:
        data = np.load(path, allow_pickle=False)
        head = json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError) as exc:
        raise EarlierRunError(
            f"screen.init_from={path} is invalid: not a chip data file ({exc})"
        ) from None
    if head.get("format") != CHIP_DATA_FORMAT:
        raise EarlierRunError(
            f"screen.init_from={path} is invalid: format {head.get('format')!r}, "
            f"expected {CHIP_DATA_FORMAT}"
        )
    return head["runs"], data


def read_configs(path: Path) -> list[dict]:
    """The configs of what ``path`` holds: one run directory's, or every run of a chip
    data file (what :func:`foreign_problem` compares)."""
    path = Path(path)
    if is_chip_data(path):
        return [run["config"] for run in _read_chip_data(path)[0]]
    return [read_config(path)]


def load_earlier(path: Path, prior: str | None = None) -> list[Measured]:
    """The measurements ``screen.init_from`` names with ``path``: a run directory's
    (:func:`load_measured`), or every run of a chip data file (:func:`save_chip_data`)."""
    path = Path(path)
    if not is_chip_data(path):
        return [load_measured(path, prior)]
    runs, data = _read_chip_data(path)
    return [
        bind_measured(run["config"], data[f"maps_{i}"], data[f"rewards_{i}"], prior, path)
        for i, run in enumerate(runs)
    ]


def make_prior(name: str | None, target):
    """The free prior ``screen.prior`` of the bound ``target`` (None: none).

    ``nnpi``: the NNP-I model's description of the target's maps
    (:func:`hwmodels.nnpi.prior.nnpi_prior`), for a chip with the NNP-I heads: with the
    chip's datasheet figures where it has them (``hwmodel.params.prior``, the target's
    ``prior``), else with NNP-I's defaults.

    Raises:
        ValueError: an unknown prior, or a target it cannot read.
    """
    if name is None:
        return None
    if name != "nnpi":
        raise ValueError(f"screen.prior={name} is invalid: expected nnpi or null")
    sheet = getattr(target, "prior", None)
    if isinstance(sheet, NNPIPrior):
        return sheet
    try:
        return nnpi_prior(target)
    except ValueError as exc:
        raise ValueError(f"screen.prior=nnpi is invalid: {exc}") from None
