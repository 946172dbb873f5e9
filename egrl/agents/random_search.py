"""Random search: uniformly random maps, one batch per generation.

The floor every learning agent has to beat: each generation draws ``batch`` maps with
every (unit, head) choice uniform and independent (:meth:`egrl.env.Env.random_mappings`)
and evaluates them in one call. The last generation draws only what the budget leaves.

With screening (``screen``, :mod:`egrl.screening`) a generation draws ``screen.pool``
times as many maps and measures the ``batch`` new ones the screen keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from egrl.agents import register_agent
from egrl.agents.base import SearchAgent
from egrl.agents.options import parse_options
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import at_least, ruled


@dataclass(frozen=True)
class RandomOptions:
    """Parameters of ``agent=random``.

    Attributes:
        batch: maps per generation (one ``env.evaluate`` call each). Only the grain of
            metrics.csv and checkpoints depends on it; 100 keeps both small at the
            paper's 4000-iteration budget (40 rows).
    """

    batch: int = ruled(at_least(1), 100)


@register_agent("random")
class RandomSearch(SearchAgent):
    """Uniform random maps (see the module docstring)."""

    screens = True
    model_search = True

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        self.options = parse_options(RandomOptions, cfg)

    def step(self) -> dict:
        count = min(self.options.batch, self.ledger.remaining)
        if self.screen is None:
            maps = self.env.random_mappings(count, self.rng)
        else:
            # model search (``screen.search=G``, a model fitted): G maps drawn per map paid
            draws = self.ledger.pool
            if self.searching:
                draws = max(draws, self.search_generations)
            candidates = self.env.random_mappings(count * draws, self.rng)
            maps = candidates[self.ledger.select(candidates, count)]
        self.ledger.evaluate(maps, "random")
        return {}
