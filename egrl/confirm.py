"""A confirmed best on a noisy target: the top maps read again beside the compiler's.

On a target whose readings vary (``Env.deterministic`` false: a board), the best single
reading of a run overstates its map: it was chosen *because* its reading was high (the
winner's curse; the best of N readings sits about 2.5 standard deviations above its mean
at N = 100). At the end of such a run the ``confirm.top`` maps with the best readings are
read ``confirm.repeats`` times more, in rounds that read the compiler's map first and then
each candidate, so that drift of the board over the rounds touches both sides of every
ratio alike. Only these fresh readings score a candidate (its search reading chose it and
is biased), and they are split: the first half of the rounds chooses the best candidate,
the later half scores it (the best of several noisy means overstates its map again; see
:func:`selection_rounds`). The reported best is that candidate's mean speedup on its
scoring rounds, with a 95% interval of that ratio of two noisy means
(:func:`speedup_interval`).

The readings are paid: the run holds them back from its budget when it starts
(:func:`reserve`, :meth:`egrl.budget.Budget.hold`), so a run never overshoots it, and
spends them at its end (:func:`confirm_best`, on the run's ledger, which reads them
through its runtime and records them as confirmation readings).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from egrl import distinct
from egrl.validation import ConfigError

if TYPE_CHECKING:
    from egrl.config import ConfirmConfig
    from egrl.env import Env
    from egrl.ledger import Ledger

log = logging.getLogger(__name__)

#: the level of the reported interval
LEVEL = 0.95


@dataclass
class Candidate:
    """One map read again: its fresh latency readings and the speedup they give.

    Attributes:
        mapping: int ``[N, H]``: the map the chip ran (its repair, where it was repaired).
        search_speedup: the speedup of the reading that made it a candidate.
        readings_s: float ``[R]``: the fresh latency readings, seconds (failed ones left out).
        failed: readings the chip did not answer.
        speedup, low, high: the mean compiler reading over the mean of its scoring
            readings (those after the selection rounds), and its interval
            (:func:`speedup_interval`).
        selection_speedup: the same ratio on the selection rounds' readings, which chose
            the best (NaN when nothing was chosen).
    """

    mapping: np.ndarray
    search_speedup: float
    readings_s: np.ndarray
    failed: int
    speedup: float
    low: float
    high: float
    selection_speedup: float = float("nan")


@dataclass
class Confirmation:
    """The confirmed best of a run and how it was found.

    Attributes:
        best: the candidate with the best mean speedup.
        candidates: every candidate, in the order of their search readings.
        baseline_readings_s: float ``[R]``: the compiler's map, read at the start of each
            round.
        noise_cv: the coefficient of variation of the compiler's readings (the run's
            estimate of the board's noise; NaN with fewer than two).
        board_runs: board runs the confirmation paid.
        selection_rounds: the first rounds, which chose the best (:func:`selection_rounds`).
    """

    best: Candidate
    candidates: list[Candidate]
    baseline_readings_s: np.ndarray
    noise_cv: float
    board_runs: int
    selection_rounds: int = 0

    def summary(self, mapping_to_dict: Callable[[np.ndarray], dict]) -> dict:
        """What ``best_mapping.json`` keeps of it (``confirmed``): plain JSON values."""

        def plain(c: Candidate) -> dict:
            out = {k: v for k, v in asdict(c).items() if k != "mapping"}
            out["readings_s"] = [float(x) for x in c.readings_s]
            return out

        return {
            "speedup": self.best.speedup,
            "low": self.best.low,
            "high": self.best.high,
            "level": LEVEL,
            "mapping": mapping_to_dict(self.best.mapping),
            "noise_cv": self.noise_cv,
            "baseline_readings_s": [float(x) for x in self.baseline_readings_s],
            "board_runs": self.board_runs,
            "selection_rounds": self.selection_rounds,
            "candidates": [plain(c) for c in self.candidates],
        }

    def state_dict(self) -> dict:
        """Plain data and arrays for a checkpoint (:meth:`from_state` reads it back)."""
        return {
            "candidates": [asdict(c) for c in self.candidates],
            "best": next(i for i, c in enumerate(self.candidates) if c is self.best),
            "baseline_readings_s": self.baseline_readings_s,
            "noise_cv": self.noise_cv,
            "board_runs": self.board_runs,
            "selection_rounds": self.selection_rounds,
        }

    @classmethod
    def from_state(cls, state: dict) -> Confirmation:
        """The confirmation a checkpoint's :meth:`state_dict` holds."""
        candidates = [Candidate(**c) for c in state["candidates"]]
        return cls(
            best=candidates[int(state["best"])],
            candidates=candidates,
            baseline_readings_s=np.asarray(state["baseline_readings_s"], np.float64),
            noise_cv=float(state["noise_cv"]),
            board_runs=int(state.get("board_runs", state.get("readings", 0))),
            selection_rounds=int(state.get("selection_rounds", 0)),
        )

    def metrics(self) -> dict:
        """The metrics row's ``confirmed_*`` columns."""
        return {
            "confirmed_speedup": self.best.speedup,
            "confirmed_low": self.best.low,
            "confirmed_high": self.best.high,
        }


#: metrics.csv columns a confirming run adds (filled in its last row)
COLUMNS: tuple[str, ...] = ("confirmed_speedup", "confirmed_low", "confirmed_high")


def reserved_board_runs(top: int, repeats: int, readings_per_map: int) -> int:
    """Board runs a confirmation of ``top`` maps may pay: ``repeats`` rounds of the
    compiler's map and each candidate, each read costing ``readings_per_map``."""
    return (int(top) + 1) * int(repeats) * int(readings_per_map) if top > 0 else 0


def reserve(env: Env, cfg: ConfirmConfig, budget: int) -> int:
    """Board runs of ``budget`` that the confirmation of ``env``'s best needs (0 on a
    deterministic target); a budget that leaves the search less than one map is refused."""
    if env.deterministic:
        return 0
    reserved = reserved_board_runs(cfg.top, cfg.repeats, env.readings_per_map)
    if reserved and budget - reserved < env.readings_per_map:
        raise ConfigError(
            [
                f"confirm.top={cfg.top} is invalid: with confirm.repeats={cfg.repeats} the "
                f"confirmation reserves {reserved} of budget={budget} board runs and "
                "leaves the search none (raise the budget or set confirm.top=0)"
            ]
        )
    return reserved


def confirm_best(ledger: Ledger, top: int) -> Confirmation | None:
    """Read the ``top`` best maps of a run's record again (:func:`confirm`) from the board
    runs its budget reserved (:meth:`egrl.budget.Budget.release`); None (and a warning) when no map earned
    a speedup. Fewer candidates than ``top`` get more rounds each. Each map is chosen by
    its latest answer (the mean of its readings so far), not its luckiest reading."""
    maps, rewards = ledger.record.latest()
    speedups = np.sqrt(np.maximum(rewards, 0.0))
    chosen = top_maps(maps, speedups, top)
    if not len(chosen):
        log.warning("confirm: no map earned a speedup; nothing to read again")
        return None
    reserved = ledger.budget.release()
    readings = ledger.env.readings_per_map
    rounds = reserved // ((len(chosen) + 1) * readings)
    found = confirm(
        ledger.read_again,
        ledger.env.baseline_mapping,
        maps[chosen],
        speedups[chosen],
        rounds,
        readings,
    )
    best = found.best
    log.info(
        "confirm: best speedup %.4f [%.4f, %.4f] (%d%%) from %d readings of %d maps beside "
        "the compiler's; its search reading said %.4f; noise estimate %.2f%%",
        best.speedup,
        best.low,
        best.high,
        round(100 * LEVEL),
        rounds,
        len(chosen),
        best.search_speedup,
        100 * found.noise_cv,
    )
    return found


def resumed(state: dict, ledger: Ledger) -> Confirmation | None:
    """The confirmation a checkpoint holds, for a resumed run: done (the ledger's budget
    closed) unless its budget has room for more search beside another confirmation's
    reserve (then None: the run searches on)."""
    if ledger.budget.left >= ledger.env.readings_per_map:
        return None
    ledger.budget.close()
    return Confirmation.from_state(state)


def speedup_interval(
    baseline_s: np.ndarray, latency_s: np.ndarray, level: float = LEVEL
) -> tuple[float, float, float]:
    """The speedup ``mean(baseline_s) / mean(latency_s)`` and its two-sided interval.

    The delta method on the log of the ratio: its variance is the sum of each mean's
    squared coefficient of variation, ``s_b^2 / (n_b m_b^2) + s_l^2 / (n_l m_l^2)``, and
    the quantile is Student's t with Welch-Satterthwaite degrees of freedom (few readings
    per side). NaN bounds with fewer than two readings on a side.

    Args:
        baseline_s: float ``[n_b]``: the compiler's map's latencies.
        latency_s: float ``[n_l]``: the map's latencies.
        level: the interval's coverage.

    Returns:
        ``(speedup, low, high)``.
    """
    b = np.asarray(baseline_s, dtype=np.float64)
    m = np.asarray(latency_s, dtype=np.float64)
    if not len(b) or not len(m):
        return float("nan"), float("nan"), float("nan")
    ratio = float(b.mean() / m.mean())
    if len(b) < 2 or len(m) < 2:
        return ratio, float("nan"), float("nan")
    vb = b.var(ddof=1) / (len(b) * b.mean() ** 2)  # squared CV of each mean
    vm = m.var(ddof=1) / (len(m) * m.mean() ** 2)
    var = vb + vm
    if var == 0:
        return ratio, ratio, ratio
    from scipy.stats import t as student_t  # start-up time

    df = var**2 / (vb**2 / (len(b) - 1) + vm**2 / (len(m) - 1))
    half = float(student_t.ppf(0.5 + level / 2, df) * np.sqrt(var))
    return ratio, ratio * float(np.exp(-half)), ratio * float(np.exp(half))


def latest(maps: np.ndarray) -> np.ndarray:
    """Indices of each distinct map's last row of ``maps`` int ``[M, N, H]``, ascending:
    on a noisy target the archive's last answer of a map is the mean of its readings so
    far (:mod:`egrl.measure_cache`), its first only its first reading."""
    return distinct.last_rows(maps)


def top_maps(maps: np.ndarray, speedups: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best distinct maps by speedup (ties: the earlier), ``[<= k]``.

    Args:
        maps: int ``[M, N, H]``: maps the chip ran.
        speedups: float ``[M]``: their search readings' speedups (0: did not run).
    """
    order = np.argsort(-np.asarray(speedups), kind="stable")
    ran = order[np.asarray(speedups)[order] > 0]  # best first; a map that did not run: none
    return ran[distinct.first_rows(np.asarray(maps)[ran])][: max(int(k), 0)].astype(np.int64)


#: one paid reading of each map of a batch ``[B, N, H]``, in order: latency_s float
#: ``[B]``, whether the chip ran it bool ``[B]``, the map it ran int ``[B, N, H]``
Read = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def confirm(
    read: Read,
    baseline: np.ndarray,
    candidates: np.ndarray,
    search_speedups: np.ndarray,
    rounds: int,
    readings_per_map: int = 1,
) -> Confirmation:
    """Read the compiler's map and each candidate ``rounds`` times, interleaved.

    Args:
        read: one paid reading of each map of a batch (:data:`Read`; a failed reading:
            not run).
        baseline: int ``[N, H]``: the compiler's map.
        candidates: int ``[K, N, H]``, ``K >= 1``: the maps to confirm.
        search_speedups: float ``[K]``: the speedups that made them candidates.
        rounds: readings of each map (each round: the compiler's map, then every candidate).
        readings_per_map: board runs one reading costs (``Confirmation.board_runs``).
    """
    batch = np.concatenate([baseline[None], candidates]).astype(np.int64)
    latency = np.full((rounds, len(batch)), np.nan)
    ran_maps = batch.copy()
    for r in range(rounds):
        lat, ran, rectified = read(batch)
        latency[r] = np.where(ran & np.isfinite(lat) & (lat > 0), lat, np.nan)
        if r == 0:
            ran_maps = np.asarray(rectified, dtype=np.int64)
    select = selection_rounds(len(candidates), rounds)
    base = finite(latency[:, 0])
    found = []
    for k in range(len(candidates)):
        col = latency[:, k + 1]
        speedup, low, high = speedup_interval(base, finite(col[select:]))
        found.append(
            Candidate(
                mapping=ran_maps[k + 1].copy(),
                search_speedup=float(search_speedups[k]),
                readings_s=finite(col),
                failed=int((~np.isfinite(col)).sum()),
                speedup=speedup,
                low=low,
                high=high,
                selection_speedup=speedup_interval(base, finite(col[:select]))[0],
            )
        )
    key = [c.selection_speedup if select else c.speedup for c in found]
    scores = [x if np.isfinite(x) else -np.inf for x in key]
    cv = float(base.std(ddof=1) / base.mean()) if len(base) >= 2 else float("nan")
    return Confirmation(
        best=found[int(np.argmax(scores))],
        candidates=found,
        baseline_readings_s=base,
        noise_cv=cv,
        board_runs=rounds * len(batch) * int(readings_per_map),
        selection_rounds=select,
    )


def selection_rounds(candidates: int, rounds: int) -> int:
    """Rounds that choose among ``candidates`` maps; the rest score the chosen one.

    Scoring the chosen map on the readings that chose it would overstate it again (the
    best of K noisy means sits above its own mean), so with several candidates the first
    ``rounds // 2`` rounds choose and the later ones score (sample splitting). With one
    candidate nothing is chosen, and with fewer than four rounds the later half would be
    one reading, too few for an interval: every round scores then.
    """
    return rounds // 2 if candidates > 1 and rounds >= 4 else 0


def finite(x: np.ndarray) -> np.ndarray:
    """The finite entries of ``x`` (failed readings are NaN)."""
    return x[np.isfinite(x)]
