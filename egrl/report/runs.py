"""Load a run directory: its config, every evaluated map (re-evaluated), and its best map.

A run directory (written by every agent, see :mod:`egrl.agents.base`; its files are named
by :mod:`egrl.rundir`) holds ``config.yaml`` (the resolved config),
``checkpoints/gen_XXXXXX/`` (whose ``record`` holds every map the run evaluated:
:func:`egrl.ledger.archive_state`) and ``best_mapping.json``. :func:`load_artifacts` rebuilds the environment
from the config and evaluates every map again, so the report's speedups and validity
come from the hardware model, not from stored rewards alone (a stored reward that
disagrees is logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from egrl import distinct
from egrl.checkpoint import load_state
from egrl.env import Env, env_from_config
from egrl.ledger import archive_state
from egrl.replay import ReplayBuffer
from egrl.rundir import BEST_FILE, CHECKPOINTS_DIR, RunDir

log = logging.getLogger(__name__)

#: maps evaluated per call when re-evaluating a run (bounds the memory of rectified maps)
EVAL_CHUNK = 4096


@dataclass
class RunArtifacts:
    """What a run directory holds for a report: its config, every map its last checkpoint
    buffered (re-evaluated) and its best map.

    Attributes:
        run_dir: the directory.
        config: the resolved config (plain nested dict).
        env: the environment rebuilt from the config.
        checkpoint: the checkpoint the maps were read from.
        maps: int64 ``[M, N, H]``: every evaluated map still in the buffer, oldest first.
        iteration: int64 ``[M]``: the paid measurements made when each map was answered
            (:func:`paid_iterations`; a map answered from the cache shares the iteration
            of the last paid one).
        source: int64 ``[M]``: index into ``source_names`` of the policy behind each map.
        source_names: names of the policies (``"gnn"``, ``"boltzmann"``, ``"learner"``).
        stored_reward: float32 ``[M]``: the reward the run recorded.
        reward: float64 ``[M]``: the reward re-evaluated now.
        speedup: float64 ``[M]``: re-evaluated speedup over the compiler (0 if invalid).
        valid: bool ``[M]``: re-evaluated validity.
        best_mapping: int64 ``[N, H]``: the run's best valid map, or None if it found none.
        best_info: ``best_mapping.json`` without its mapping (empty if the file is absent).
        rows: the metrics rows saved with the checkpoint.
    """

    run_dir: Path
    config: dict
    env: Env
    checkpoint: Path
    maps: np.ndarray
    iteration: np.ndarray
    source: np.ndarray
    source_names: list[str]
    stored_reward: np.ndarray
    reward: np.ndarray
    speedup: np.ndarray
    valid: np.ndarray
    best_mapping: np.ndarray | None
    best_info: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)

    @property
    def workload(self) -> str:
        return self.env.workload.name

    @property
    def agent(self) -> str:
        return str(self.config.get("agent", {}).get("name", "?"))

    @property
    def seed(self):
        return self.config.get("seed", "?")

    @property
    def label(self) -> str:
        """Short title: workload, agent and seed."""
        return f"{self.workload} / {self.agent} / seed {self.seed}"

    @property
    def compiler_mapping(self) -> np.ndarray:
        """int64 ``[N, H]``: the native compiler's map."""
        return self.env.baseline_mapping

    @property
    def best_speedup(self) -> float:
        """Re-evaluated speedup of :attr:`best_mapping` (0 if there is none)."""
        if self.best_mapping is None:
            return 0.0
        return float(self.env.evaluate(self.best_mapping).speedup[0])

    @property
    def num_reward_mismatches(self) -> int:
        """Maps whose stored reward differs from the re-evaluated one."""
        return int((~reward_matches(self.stored_reward, self.reward)).sum())


def reward_matches(stored: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """bool ``[M]``: stored (float32) and re-evaluated rewards agree."""
    return np.isclose(fresh, stored.astype(np.float64), rtol=1e-5, atol=1e-6)


def _require(path: Path, run_dir: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"run directory {run_dir}: {what} {path.name} is missing ({path})")
    return path


def read_config(run_dir: Path) -> dict:
    """The resolved config of ``run_dir`` as a plain dict; checks the keys a report needs."""
    files = RunDir(run_dir)
    path = _require(files.config, run_dir, "the resolved config")
    cfg = files.resolved_config()
    for key in ("hwmodel", "workload"):
        if not isinstance(cfg.get(key), dict) or not cfg[key].get("name"):
            raise ValueError(f"{path}: the config has no {key}.name")
    return cfg


def last_checkpoint(run_dir: Path) -> Path:
    """The newest complete ``checkpoints/gen_XXXXXX`` of ``run_dir``."""
    found = RunDir(run_dir).latest_checkpoint()
    if found is None:
        ckpt_dir = run_dir / CHECKPOINTS_DIR
        raise FileNotFoundError(
            f"run directory {run_dir}: no checkpoint ({ckpt_dir}/gen_XXXXXX/state.json is missing)"
        )
    return found


def paid_iterations(
    maps: np.ndarray,
    first: int,
    deterministic: bool,
    native: np.ndarray | None = None,
    paid: int | None = None,
) -> np.ndarray:
    """int64 ``[M]``: the paid measurements made when each buffered map was answered.

    On a deterministic target whose buffer holds the whole run (``first == 0``) a map was
    paid at its first occurrence only (the agent's cache answered its repeats), so the
    count is the number of distinct maps so far. The compiler's map ``native`` (``[N, H]``)
    is not counted where the run got it for free (it was measured when the target was
    bound): its distinct maps are then one more than its ``paid`` measurements, where a
    run made before paid for it once. Otherwise (a non-deterministic target, or a buffer that dropped its oldest maps)
    every map counts as paid from ``first`` on. A run whose cache forgot maps
    (``cache_size`` below its distinct maps) paid some repeats again; they are counted
    once here.
    """
    if not deterministic or first:
        return first + np.arange(len(maps), dtype=np.int64) + 1
    flat = maps.reshape(len(maps), -1)
    new = np.zeros(len(maps), dtype=np.int64)
    first = distinct.first_rows(maps)
    new[first] = 1
    if native is not None and paid is not None and len(first) == paid + 1:
        new[(flat == np.asarray(native).reshape(1, -1)).all(axis=1)] = 0
    return np.cumsum(new)


def paid_once(env: Env, cfg: dict) -> bool:
    """Whether the run paid each map once: on a deterministic target, and on a noisy one
    since runs confirm their best (their config has ``confirm``) and answer repeats from
    the first reading; earlier runs on a noisy target paid every proposal."""
    return env.deterministic or "confirm" in cfg


def buffer_in_order(state: dict) -> tuple[dict[str, np.ndarray], list[str], int]:
    """A replay buffer ``state_dict`` as arrays in insertion order (oldest first).

    Returns:
        ``(arrays, source_names, first)``: ``arrays`` as :meth:`ReplayBuffer.gather`
        returns them, ``source_names``, and ``first``, the 0-based position of the
        oldest held map among all maps ever added (non-zero once the buffer wrapped).
    """
    buf = ReplayBuffer(
        int(state["capacity"]),
        int(state["num_units"]),
        int(state["num_heads"]),
        int(state["max_choices"]),
    )
    buf.load_state_dict(state)
    size = len(buf)
    start = int(state["cursor"]) if buf.num_added > size else 0  # oldest slot once wrapped
    order = (start + np.arange(size)) % max(size, 1)
    return buf.gather(order), list(buf.source_names), buf.num_added - size


def mapping_from_dict(env: Env, mapping: dict, where: str) -> np.ndarray:
    """The inverse of :meth:`Env.mapping_to_dict`: int64 ``[N, H]``."""
    out = np.zeros((env.num_units, env.num_heads), dtype=np.int64)
    for u, unit in enumerate(env.unit_names):
        if unit not in mapping:
            raise ValueError(f"{where}: no entry for unit {unit!r} of {env.workload.name!r}")
        for h, head in enumerate(env.head_names):
            choice = mapping[unit].get(head)
            if choice not in env.heads[head]:
                raise ValueError(
                    f"{where}: unit {unit!r} head {head!r} has {choice!r}, "
                    f"expected one of {env.heads[head]}"
                )
            out[u, h] = env.heads[head].index(choice)
    return out


def evaluate_all(env: Env, maps: np.ndarray, chunk: int = EVAL_CHUNK):
    """Reward, speedup and validity of ``maps`` ``[M, N, H]`` (float64, float64, bool ``[M]``)."""
    parts = [env.evaluate(maps[i : i + chunk]) for i in range(0, len(maps), chunk)]
    if not parts:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool)
    return (
        np.concatenate([p.reward for p in parts]),
        np.concatenate([p.speedup for p in parts]),
        np.concatenate([p.valid for p in parts]),
    )


def read_best(run_dir: Path, env: Env) -> tuple[np.ndarray | None, dict]:
    """``best_mapping.json`` as (map ``[N, H]`` or None, the other fields)."""
    files = RunDir(run_dir)
    info = files.read_best_map()
    if info is None:
        return None, {}
    path = files.best_map
    mapping = info.pop("mapping", None)
    if mapping is None:
        return None, info
    return mapping_from_dict(env, mapping, str(path)), info


def best_of_buffer(maps: np.ndarray, speedup: np.ndarray, valid: np.ndarray) -> np.ndarray | None:
    """The earliest valid map of highest speedup (``[N, H]``), or None."""
    if not valid.any():
        return None
    return maps[int(np.argmax(np.where(valid, speedup, -np.inf)))].copy()


def load_artifacts(run_dir: str | Path) -> RunArtifacts:
    """Load and re-evaluate a run directory (see the module docstring).

    Raises:
        FileNotFoundError: the directory, its config or its checkpoints are missing
            (the message names the directory and the file).
        ValueError: the config or the checkpoint does not match the rebuilt environment.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    cfg = read_config(run_dir)
    ckpt = last_checkpoint(run_dir)
    state = load_state(ckpt)
    env = env_from_config(cfg)
    buf_state = archive_state(state)
    shape = (int(buf_state["num_units"]), int(buf_state["num_heads"]))
    if shape != (env.num_units, env.num_heads):
        raise ValueError(
            f"{ckpt}: maps have {shape[0]} units x {shape[1]} heads but {cfg['workload']['name']!r} "
            f"on {cfg['hwmodel']['name']!r} has {env.num_units} x {env.num_heads}"
        )
    arrays, source_names, first = buffer_in_order(buf_state)
    maps = arrays["actions"]
    reward, speedup, valid = evaluate_all(env, maps)
    mismatches = int((~reward_matches(arrays["rewards"], reward)).sum())
    if mismatches:
        log.warning(
            "%s: %d of %d stored rewards differ from a new evaluation (has the hardware "
            "model changed since the run?); the report uses the new evaluation",
            run_dir,
            mismatches,
            len(maps),
        )
    best, info = read_best(run_dir, env)
    if best is None:
        if not RunDir(run_dir).best_map.exists():
            log.warning(
                "%s: %s is missing; using the best map in the checkpoint", run_dir, BEST_FILE
            )
        best = best_of_buffer(maps, speedup, valid)
    return RunArtifacts(
        run_dir=run_dir,
        config=cfg,
        env=env,
        checkpoint=ckpt,
        maps=maps,
        iteration=paid_iterations(
            maps, first, paid_once(env, cfg), env.baseline_mapping, int(state["iterations"])
        ),
        source=arrays["source"],
        source_names=source_names,
        stored_reward=arrays["rewards"],
        reward=reward,
        speedup=speedup,
        valid=valid,
        best_mapping=best,
        best_info=info,
        rows=list(state.get("rows", [])),
    )
