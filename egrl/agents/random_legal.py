"""``agent=random-legal``: uniformly random legal play of the TPU memory-mapping game, the
random baseline of Wang et al. (arXiv:2305.07440, section 5.2).

``batch`` games per generation, a uniformly random legal action at every step
(:func:`~hwmodels.tpu.search.random_play`). Unlike ``agent=random``, whose uniform maps the
game mostly repairs, every proposal here is legal. Every finished game is paid as one
measured layout (:class:`~egrl.agents.tpu_game.GameAgent`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.agents import register_agent
from egrl.agents.options import parse_options
from egrl.agents.tpu_game import GameAgent
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import at_least, ruled
from hwmodels.tpu.search import random_play


@dataclass(frozen=True)
class RandomLegalOptions:
    """Parameters of ``agent=random-legal``.

    Attributes:
        batch: games per generation (only the grain of metrics.csv and checkpoints).
    """

    batch: int = ruled(at_least(1), 8)


@register_agent("random-legal")
class RandomLegalPlay(GameAgent):
    """Uniformly random legal play (see the module docstring)."""

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        self.options = parse_options(RandomLegalOptions, cfg)

    def step(self) -> dict:
        n = min(self.options.batch, self.ledger.remaining)
        with self.timer("inference"):
            games = [random_play(self.program, self.rng) for _ in range(n)]
        returns = np.array([g.ret for g in games])
        self.pay(np.stack([g.actions for g in games]), returns, "random-legal")
        return self.game_row(returns)

    def agent_state(self) -> dict:
        return self.game_state()

    def load_agent_state(self, state: dict) -> None:
        self.load_game_state(state)
