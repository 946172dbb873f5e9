"""The native compiler: a memory-space-assignment heuristic, and the paper's -prod hybrid.

In the spirit of XLA's memory-space assignment: tensors are taken in decreasing benefit
per byte (the summed initial benefit of their buffers over their size) and each one
kept in CMEM for its whole life (prefetched once before its first use, or written there
by its producer, then reused by every later buffer with NoCopy) wherever the bytes
already promised at every step of that life leave room for it. The chosen actions are
played through the game, which has the last word: a proposal the game refuses (a copy
the supply cannot hide, a fragmented CMEM) becomes a Drop.

:func:`prod_hybrid` is the paper's MMap-MuZero-prod (Wang et al., arXiv:2305.07440,
section 5.1): the better, by the program's latency, of an agent's layout and this one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.tpu.game import COPY, DROP, NOCOPY, Game, PlayResult
from hwmodels.tpu.layout import Layout
from hwmodels.tpu.program import Program


def whole_life_plan(program: Program) -> np.ndarray:
    """int64 ``[N]``: the heuristic's proposed actions (before the game repairs them)."""
    p = program
    n, k = p.num_buffers, p.num_tensors
    first = np.full(k, n, dtype=np.int64)
    np.minimum.at(first, p.tensor, np.arange(n))
    value = np.bincount(p.tensor, weights=p.benefit_s, minlength=k)
    size = p.size[first]
    start = _prefetch_start(p, first)
    end = p.live_end[first]
    score = np.where(value > 0, value / size, -1.0)
    load = np.zeros(p.num_instructions, dtype=np.int64)
    cap = p.params.cmem_bytes
    chosen = np.zeros(k, dtype=bool)
    for tensor in np.argsort(-score, kind="stable"):
        if score[tensor] <= 0:
            break
        span = slice(start[tensor], end[tensor] + 1)
        if load[span].max() + size[tensor] <= cap:
            load[span] += size[tensor]
            chosen[tensor] = True
    plan = np.where(chosen[p.tensor], NOCOPY, DROP)
    opening = first[chosen]
    plan[opening] = np.where(p.is_output[opening], NOCOPY, COPY)
    return plan.astype(np.int64)


def _prefetch_start(p: Program, first: np.ndarray) -> np.ndarray:
    """int64 ``[K]``: where each tensor's CMEM life starts: its producer's step, or for a
    program input the latest step from which the initial supply covers its copy."""
    t = p.time[first]
    cum = np.concatenate([[0], np.cumsum(p.supply_ps)])
    need = cum[t] - p.demand_ps[first]  # cum[s] <= need  <=>  supply over [s, t) covers it
    s = np.searchsorted(cum, need, side="right") - 1
    return np.where(p.is_output[first], t, np.clip(s, 0, t))


def native_play(program: Program) -> tuple[PlayResult, Layout]:
    """The heuristic's game: the played result and its layout."""
    game = Game(program)
    result = game.play(whole_life_plan(program))
    return result, game.layout()


@dataclass(frozen=True)
class Hybrid:
    """The -prod hybrid's answer.

    Attributes:
        actions: int64 ``[N]``: the chosen layout's actions.
        latency_s: its latency.
        source: ``"agent"`` or ``"heuristic"``.
        agent_latency_s, heuristic_latency_s: both candidates' latencies.
    """

    actions: np.ndarray
    latency_s: float
    source: str
    agent_latency_s: float
    heuristic_latency_s: float


def prod_hybrid(program: Program, agent_actions: np.ndarray, contention: bool = True) -> Hybrid:
    """MMap-MuZero-prod: the agent's layout (played, illegal proposals repaired) or the
    heuristic's, whichever gives the lower program latency (the heuristic on ties)."""
    game = Game(program)
    agent = game.play(agent_actions)
    agent_s = game.layout().latency_s(contention)
    heur, layout = native_play(program)
    heur_s = layout.latency_s(contention)
    if agent_s < heur_s:
        return Hybrid(agent.actions, agent_s, "agent", agent_s, heur_s)
    return Hybrid(heur.actions, heur_s, "heuristic", agent_s, heur_s)
