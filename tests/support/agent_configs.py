"""Small runs of the agents other than EGRL: the baselines, SMAC3 and the game-playing
agents."""

from __future__ import annotations

from egrl.agents import config_class
from egrl.config import AgentConfig, TrainConfig

#: small options so that a ~100-iteration run has several generations and a trimmed last one
OPTIONS = {
    "random": {"batch": 16},
    "greedy-dp": {},
    "sa": {"chains": 4, "steps": 2},
    "ga": {"population": 12},
    "nevergrad": {"batch": 8},
    "optuna": {"batch": 8},
    "optimum": {"time_limit_s": 30.0, "workers": 1},
}


def agent_config(
    name: str, seed: int = 0, budget: int = 101, keep_checkpoints: int = 1000, **options
) -> TrainConfig:
    """A baseline agent's run: :data:`OPTIONS` of ``name`` (if any) updated by
    ``options``, a checkpoint every 2 generations."""
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        keep_checkpoints=keep_checkpoints,
        agent=config_class(name)(name=name, options={**OPTIONS.get(name, {}), **options}),
    )


#: paid maps of a :func:`smac_config` run
SMAC_BUDGET = 40


def smac_config(seed: int = 5, budget: int = SMAC_BUDGET, **options) -> TrainConfig:
    """SMAC3 on the small problem: batches of 8, 4 initial maps."""
    return agent_config("smac", seed, budget, **{"batch": 8, "n_initial": 4, **options})


def muzero_config(name: str, seed: int = 0, budget: int = 4, **options) -> TrainConfig:
    """A game-playing agent's run (``muzero``, ``es``, ``random-legal``), a checkpoint a
    generation."""
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=1,
        agent=AgentConfig(name=name, options=options),
    )
