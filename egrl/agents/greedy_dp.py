"""Greedy-DP: the EGRL paper's coordinate-wise greedy baseline (section 4, "Baselines").

Starting from the target's initial map (EGRL Table 2's initial mapping action: all-DRAM
on NNP-I; see ``agent.start``), the agent visits the decision units in execution order. For the current unit it
tries every combination of that unit's heads (``3 x 3 = 9`` on NNP-I) with the rest of
the map fixed, evaluates the combinations as one batch, and keeps the one with the
highest reward (ties keep the current choice). One generation is one unit; a pass is one
visit of every unit.

When a whole pass changes nothing, the map is a fixed point of single-unit moves: on a
deterministic hardware model another pass would re-measure exactly the same maps. With
``restart: true`` (default) the agent then restarts from a uniform random map (the best
map found so far stays recorded); with ``restart: false`` it keeps making passes, which
is what the paper describes and is useful on noisy hardware, where a re-measurement may
change a decision.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.agents import register_agent
from egrl.agents.base import SearchAgent
from egrl.agents.options import (
    parse_options,
    pay_prior_first,
    resolve_start,
    start_mappings,
    start_rule,
)
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import FLAG, ruled


@dataclass(frozen=True)
class GreedyOptions:
    """Parameters of ``agent=greedy-dp``.

    Attributes:
        start: the first map: ``initial`` (the target's initial map, the paper's start;
            ``dram`` is NNP-I's name for it), ``random``, ``native`` (the compiler's
            map) or ``fallback`` (the target's always-valid map).
        restart: after a pass that changes nothing, restart from a uniform random map
            (true) or keep passing over the same fixed point (false, the paper's wording).
    """

    start: str = ruled(start_rule(), "initial")
    restart: bool = ruled(FLAG, True)


def head_combinations(num_choices: np.ndarray) -> np.ndarray:
    """Every combination of one unit's heads, int64 ``[prod(num_choices), H]``, first
    head slowest-varying."""
    return np.array(list(itertools.product(*(range(int(c)) for c in num_choices))), np.int64)


@register_agent("greedy-dp")
class GreedyDP(SearchAgent):
    """Coordinate-wise greedy search over units (see the module docstring)."""

    extra_columns = ("pass", "unit", "changed", "restarts")

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        self.options = parse_options(GreedyOptions, cfg)
        self.start = resolve_start(self.options.start, env, self.name)
        self.combos = head_combinations(env.num_choices)
        self.current = start_mappings(env, self.start, 1, self.rng, cfg.prior_time_limit_s)[0]
        self.current_reward = -np.inf
        self.unit = 0
        self.passes = 0
        self.pass_changed = False
        self.restarts = 0

    def step(self) -> dict:
        unit = self.unit
        first = pay_prior_first(self.ledger, self.start, self.current)
        if first is not None and len(first):
            self.current_reward = float(first.reward[0])
        if self.ledger.done:  # the prior's map spent the budget
            return {"pass": self.passes, "unit": unit, "changed": 0, "restarts": self.restarts}
        maps = np.repeat(self.current[None], len(self.combos), axis=0)
        maps[:, unit] = self.combos
        ev = self.ledger.evaluate(maps, "greedy-dp")
        now = int(np.flatnonzero((self.combos == self.current[unit]).all(axis=1))[0])
        best = int(np.argmax(ev.reward))
        # Keep the current choice on ties, and when the budget cut off the better ones.
        keep = ev.reward[best] <= (ev.reward[now] if now < len(ev) else self.current_reward)
        if keep:
            if now < len(ev):
                self.current_reward = float(ev.reward[now])
        else:
            self.current[unit] = self.combos[best]
            self.current_reward = float(ev.reward[best])
            self.pass_changed = True
        row = {"pass": self.passes, "unit": unit, "changed": int(not keep)}
        self._advance()
        row["restarts"] = self.restarts
        return row

    def _advance(self) -> None:
        """Move to the next unit; at the end of a pass, restart if it changed nothing."""
        self.unit += 1
        if self.unit < self.env.num_units:
            return
        self.unit = 0
        self.passes += 1
        if not self.pass_changed and self.options.restart:
            self.current = start_mappings(self.env, "random", 1, self.rng)[0]
            self.current_reward = -np.inf
            self.restarts += 1
        self.pass_changed = False

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {
            "current": self.current.copy(),
            "current_reward": self.current_reward,
            "unit": self.unit,
            "passes": self.passes,
            "pass_changed": self.pass_changed,
            "restarts": self.restarts,
        }

    def load_agent_state(self, state: dict) -> None:
        self.current = np.asarray(state["current"], dtype=np.int64).copy()
        self.current_reward = float(state["current_reward"])
        self.unit = int(state["unit"])
        self.passes = int(state["passes"])
        self.pass_changed = bool(state["pass_changed"])
        self.restarts = int(state["restarts"])
