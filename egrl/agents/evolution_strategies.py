"""``agent=es``: OpenAI-ES (Salimans et al., 2017) playing the TPU memory-mapping game, the
ES baseline of Wang et al. (arXiv:2305.07440, section 5.2).

It searches the linear policy of :mod:`hwmodels.tpu.search`
(:class:`~hwmodels.tpu.search.LinearES`): one generation is one ES iteration,
``2 * population`` games with antithetic perturbations, ranked by their game return. Every
finished game is paid as one measured layout (:class:`~egrl.agents.tpu_game.GameAgent`).
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
from egrl.validation import at_least, positive, ruled
from hwmodels.tpu.search import LinearES, linear_policy_play


@dataclass(frozen=True)
class ESOptions:
    """Parameters of ``agent=es``.

    Attributes:
        population: perturbations per iteration (``2 * population`` games, antithetic).
        sigma: perturbation scale.
        lr: step size.
    """

    population: int = ruled(at_least(1), 8)
    sigma: float = ruled(positive(), 0.1)
    lr: float = ruled(positive(), 0.05)


@register_agent("es")
class EvolutionStrategies(GameAgent):
    """OpenAI-ES on the game's linear policy (see the module docstring)."""

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(ESOptions, cfg)
        self.es = LinearES(o.population, o.sigma, o.lr)

    def step(self) -> dict:
        with self.timer("evolution"):
            eps = self.es.ask(self.rng)
        with self.timer("inference"):
            games = [linear_policy_play(self.program, theta) for theta in self.es.policies(eps)]
        returns = np.array([g.ret for g in games])
        self.pay(np.stack([g.actions for g in games]), returns, "es")
        with self.timer("evolution"):
            self.es.tell(eps, returns)
        return self.game_row(returns)

    def agent_state(self) -> dict:
        return {**self.game_state(), "theta": self.es.theta.copy()}

    def load_agent_state(self, state: dict) -> None:
        self.load_game_state(state)
        self.es.theta = np.asarray(state["theta"], dtype=np.float64).copy()
