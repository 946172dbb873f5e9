"""A run's record of every map it was answered (``record_evaluations=true``).

``metrics.csv`` has one row per generation; a study that needs what happened within a
generation (when each map was answered, the values the target reports beside its latency)
asks the run to record every answered map in ``evaluations.csv`` (:mod:`egrl.rundir`):

    proposal    1, 2, ...: the map's place among every map the run was answered
    generation  the generation it was answered in (from 1)
    iterations  paid measurements (board runs: ``R`` per map read ``R`` times) once it was answered
    paid        1: measured (counts in the budget); 0: answered from the measure cache
    wall_s      the run's wall clock when it was answered (``metrics.csv``'s clock)
    source      who proposed it (the replay buffer's tag: ``pop``, ``es``, ``muzero`` ...)
    valid, reward, speedup, latency_s   as the environment scored it
    ...         the target's own values of the map it ran (``Target.map_values``; the
                TPU game's ``game_return``)

and, in ``best_mapping.json``, the best map by each of the target's values (``best_by``).
A run resumed from a checkpoint drops the rows answered after it before it writes again,
so the record has each map once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from egrl.env import Env, Evaluation
from egrl.rundir import EVALUATION_COLUMNS, RunDir

if TYPE_CHECKING:
    from egrl.record import Reading


class EvaluationLog:
    """The record of one run's answered maps (see the module docstring).

    Args:
        env: the run's environment (its target reports the extra values).
        run_dir: where ``evaluations.csv`` goes; None: nothing is recorded.
    """

    def __init__(self, env: Env, run_dir: str | Path | None) -> None:
        self.env = env
        self.files = RunDir(run_dir) if run_dir is not None else None
        self.names: tuple[str, ...] = tuple(getattr(env.target, "map_value_names", ()))
        #: value name -> {"value", "iteration", "mapping" int64 [N, H]}: the best map by it
        self.best_by: dict[str, dict] = {}
        self._synced = False

    @property
    def enabled(self) -> bool:
        return self.files is not None

    @property
    def columns(self) -> tuple[str, ...]:
        return EVALUATION_COLUMNS + self.names

    def add(
        self,
        source: str,
        ev: Evaluation,
        paid: np.ndarray,
        before: tuple[int, int],
        generation: int,
        wall_s: float,
    ) -> None:
        """Record one answered submission of ``B`` maps.

        Args:
            source: who proposed the maps.
            ev: their evaluation ``[B]``.
            paid: bool ``[B]``: each map was paid.
            before: ``(iterations, proposals)`` of the run before this submission.
            generation: the generation under way (from 1).
            wall_s: the run's wall clock now.
        """
        if self.files is None or len(ev) == 0:
            return
        iterations, proposals = before
        if not self._synced:  # rows past the state this run starts from are answered again
            self.files.truncate_evaluations(proposals)
            self._synced = True
        values = self._values(ev)
        paid_runs = self.env.readings_per_map * np.cumsum(np.asarray(paid, dtype=np.int64))
        count = iterations + paid_runs  # board runs, as the ledger counts them
        self._keep_best(values, ev, count)
        columns = {
            "proposal": (proposals + 1 + np.arange(len(ev))).tolist(),
            "iterations": count.tolist(),
            "paid": np.asarray(paid, dtype=np.int64).tolist(),
            "valid": np.asarray(ev.valid, dtype=np.int64).tolist(),
            "reward": np.asarray(ev.reward, dtype=np.float64).tolist(),
            "speedup": np.asarray(ev.speedup, dtype=np.float64).tolist(),
            "latency_s": np.asarray(ev.latency_s, dtype=np.float64).tolist(),
            **{k: v.tolist() for k, v in values.items()},
        }
        rows = [
            {"generation": generation, "wall_s": wall_s, "source": source}
            | {k: col[b] for k, col in columns.items()}
            for b in range(len(ev))
        ]
        self.files.append_evaluations(self.columns, rows)

    def read(self, reading: Reading) -> None:
        """Record one reading of the run's record (:class:`egrl.record.Reading`)."""
        before = (reading.runs_before, reading.answered_before)
        self.add(
            reading.source, reading.evaluation, reading.paid, before, reading.round, reading.wall_s
        )

    def _values(self, ev: Evaluation) -> dict[str, np.ndarray]:
        """The target's values of the maps it ran, float64 ``[B]`` each."""
        if not self.names:
            return {}
        values = self.env.target.map_values(np.asarray(ev.rectified, dtype=np.int64))
        return {k: np.asarray(values[k], dtype=np.float64) for k in self.names}

    def _keep_best(self, values: dict[str, np.ndarray], ev: Evaluation, count: np.ndarray) -> None:
        """Keep the best map by each value (ties keep the earlier one)."""
        for name, v in values.items():
            if not np.isfinite(v).any():
                continue
            i = int(np.nanargmax(v))
            if v[i] > self.best_by.get(name, {}).get("value", -np.inf):
                self.best_by[name] = {
                    "value": float(v[i]),
                    "iteration": int(count[i]),
                    "mapping": np.asarray(ev.rectified[i], dtype=np.int64).copy(),
                }

    def best_by_value(self) -> dict:
        """``{"best_by": {name: {value, iteration, mapping by unit name}}}`` for
        ``best_mapping.json``; empty when nothing was recorded."""
        if not self.best_by:
            return {}
        return {
            "best_by": {
                name: {
                    "value": b["value"],
                    "iteration": b["iteration"],
                    "mapping": self.env.mapping_to_dict(b["mapping"]),
                }
                for name, b in self.best_by.items()
            }
        }

    def state_dict(self) -> dict:
        return {name: dict(b) for name, b in self.best_by.items()}

    def load_state_dict(self, state: dict | None) -> None:
        """Inverse of :meth:`state_dict` (None: a checkpoint made without the record)."""
        self.best_by = {
            name: {
                "value": float(b["value"]),
                "iteration": int(b["iteration"]),
                "mapping": np.asarray(b["mapping"], dtype=np.int64).copy(),
            }
            for name, b in (state or {}).items()
        }
