"""The exact solver as an agent: one solve of the target's cost model, one evaluation.

``env.optimum`` (CP-SAT on NNP-I) solves the hardware model's own cost model within a
time limit; its map is then evaluated once through :meth:`SearchAgent.evaluate`, like any
other agent's, so it counts as one iteration and the run ends there whatever the budget.
The solver's status, proven bound and gap go into metrics.csv and ``best_mapping.json``
(key ``solver``, with the solver's wall time, which metrics.csv counts in ``t_evolution``). Targets without an exact solver (e.g. ``external``) are refused when
the agent is built.

With a time limit that stops the search before optimality is proven (and with more than
one solver worker) the answer depends on timing: unlike the other agents, this one is
reproducible only when the solver proves optimality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from egrl.agents import register_agent
from egrl.agents.base import SearchAgent
from egrl.agents.options import parse_options
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import at_least, positive, ruled
from hwmodels.base import Target

SOLVER_COLUMNS = (
    "solver_status",
    "solver_proven",
    "solver_gap",
    "solver_bound_s",
    "solver_latency_s",
)


@dataclass(frozen=True)
class OptimumOptions:
    """Parameters of ``agent=optimum``.

    Attributes:
        time_limit_s: solver wall-time limit, seconds.
        workers: solver threads.
    """

    time_limit_s: float = ruled(positive(), 60.0)
    workers: int = ruled(at_least(1), 2)


@register_agent("optimum")
class OptimumAgent(SearchAgent):
    """One exact solve, one evaluation (see the module docstring)."""

    extra_columns = SOLVER_COLUMNS

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        self.options = parse_options(OptimumOptions, cfg)
        if type(env.target).optimum is Target.optimum:
            raise ValueError(
                f"agent 'optimum' needs a hardware target with an exact solver; "
                f"{type(env.target).__name__} (workload {env.workload.name!r}) has none"
            )
        self.solver: dict | None = None

    @property
    def finished(self) -> bool:
        """Finished once the solver's map is evaluated (or the budget is spent)."""
        return self.solver is not None or super().finished

    def step(self) -> dict:
        with self.timer("evolution"):
            result = self.env.optimum(
                time_limit_s=self.options.time_limit_s,
                workers=self.options.workers,
            )
        self.ledger.evaluate(result.mapping[None], "optimum")
        self.solver = {
            "solver_status": str(result.status),
            "solver_proven": bool(result.proven),
            "solver_gap": float(result.gap),
            "solver_bound_s": float(result.bound_s),
            "solver_latency_s": float(result.latency_s),
            "solver_wall_s": float(result.wall_s),
        }
        return {k: v for k, v in self.solver.items() if k in SOLVER_COLUMNS}

    def best_extras(self) -> dict:
        """The solver's record, under ``solver`` in best_mapping.json."""
        return {
            "solver": {
                k.removeprefix("solver_"): (
                    None if isinstance(v, float) and not math.isfinite(v) else v
                )
                for k, v in (self.solver or {}).items()
            }
        }

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {"solver": self.solver}

    def load_agent_state(self, state: dict) -> None:
        self.solver = None if state["solver"] is None else dict(state["solver"])
