"""Plain configuration records for training, usable with or without Hydra.

Defaults are the values of Table 2 of the EGRL paper (Khadka et al., "Optimizing Memory
Placement using Evolutionary Graph Reinforcement Learning", arXiv:2007.07298, 2020). The
Hydra tree under ``configs/`` mirrors these records one group per swappable part;
:func:`from_mapping` builds a :class:`TrainConfig` from a Hydra ``DictConfig`` or any
nested mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from egrl import validation
from egrl.agents.egrl.sac import SACConfig
from egrl.screening import rules as screen_rules
from egrl.validation import Rule


@dataclass
class AgentConfig:
    """Which agent runs (``egrl.agents.names()``) and its switches.

    For EGRL: ``egrl`` uses both halves, ``ea`` only the population, ``pg`` only the
    learner. Keys an agent's config adds beyond these fields land in ``options`` and are
    the agent's own parameters (e.g. a simulated-annealing schedule).
    """

    name: str = "egrl"
    use_population: bool = True
    use_learner: bool = True
    migration: bool = True
    migration_every: int = 1
    options: dict = field(default_factory=dict)


@dataclass
class PolicyConfig:
    """Graph U-Net actor and twin-Q critic sizes (Table 2); the critic's width and depth
    are the learner's ``critic_hidden`` and ``critic_depth`` where set."""

    hidden: int = 128
    out: int = 128
    depth: int = 4
    heads: int = 4


@dataclass
class PopulationConfig:
    """Mixed population; keys beyond ``size`` and ``boltzmann_fraction`` go to ``MixedPopulation``."""

    size: int = 20
    boltzmann_fraction: float = 0.2
    options: dict = field(default_factory=dict)


@dataclass
class LearnerConfig(SACConfig):
    """The learner side of a run: discrete SAC's hyperparameters and its rollouts.

    The SAC fields (``gamma``, ``lr_actor``, ``lr_critic``, ``alpha``, ``tau``,
    ``reward_scale``, ``batch_size``, ``noise_std``, ... : Table 2 and Appendix D) are
    inherited from :class:`egrl.agents.egrl.sac.SACConfig`; the fields below are the trainer's. An
    unknown key is an error (a misspelt hyperparameter must not be ignored).

    ``critic_hidden`` and ``critic_depth`` (inherited too) size the twin-Q critic apart
    from the actor: ``None`` (the default) gives it the policy's ``hidden`` and ``depth``,
    as every run before them had; it always has the policy's ``heads``, which must divide
    ``critic_hidden``.

    ``store_repaired``: for every invalid map evaluated, also store the map the compiler
    repaired it into (``ev.rectified``) with the reward of a valid map, ``(L_c / L)^2``,
    beside the penalised proposal (source ``"repaired"``; it adds no gradient steps).

    ``update_on``: what the learner's ``gradient_ratio`` updates are owed on. ``"paid"``
    (the default): paid measurements, Table 2's "1 gradient step per environment step"
    (a map answered from the measure cache is not an environment step, though it enters
    the replay buffer), so a run of budget ``B`` makes about ``B x gradient_ratio``
    updates, as every run did before the cache. ``"proposal"``: every answered map, paid
    or not (what the trainer did between the measure cache and the learner's speed work:
    docs/learner.md, "Speed").
    """

    num_learners: int = 1
    rollouts: int = 1
    clean_rollouts: int = 1
    buffer_size: int = 100_000
    gradient_ratio: float = 0.1
    burn_in: int = 48
    ucb_c: float = 1.0
    store_repaired: bool = False
    update_on: str = "paid"


@dataclass
class ScreenConfig:
    """Screening: a cost model learned from the run's paid measurements picks what is paid.

    ``name``: ``none`` (every proposal is measured, the other keys are ignored) or a
    model of :data:`egrl.screening.models.MODELS` (``forest``, ``gnn``, ``critic``). The agent proposes
    ``pool`` times its usual batch (1: no screening); maps the measure cache knows are
    free; of the new ones the model's top-ranked are paid, except a share ``explore``
    drawn at random; screening starts after ``warmup`` paid measurements. The model is
    fitted on at most ``max_train`` of them (drawn at random). ``prior`` (``nnpi``) adds
    another model's free description of each map to what the model reads; ``init_from``
    (a run directory or a list of them, runs of the same target on other workloads) adds
    their measurements to what it is fitted on (:mod:`egrl.screening.earlier`). Keys beyond
    these land in ``options``: the model's own (``trees``, ``max_features``, ...).
    ``docs/screening.md`` describes it.
    """

    name: str = "none"
    pool: int = 1
    explore: float = 0.0
    warmup: int = 0
    max_train: int = 1000
    prior: str | None = None
    init_from: str | list[str] | None = None
    options: dict = field(default_factory=dict)


@dataclass
class TrainConfig:
    """One training run.

    ``budget`` counts paid measurements: on a deterministic target a map measured before
    is answered from an LRU of ``cache_size`` maps (0: none) without being paid
    (:mod:`egrl.measure_cache`). A search that pays nothing in ``max_stale_generations``
    generations in a row stops, and so does one whose generations' wall time (``wall_s``,
    across resumes) has passed ``time_limit_s`` (None: no limit). ``init_from`` (a run
    directory, a policy snapshot or a checkpoint) starts the GNN policies of
    ``egrl``/``ea``/``pg`` from a trained one.
    """

    seed: int = 0
    budget: int = 4000
    device: str = "cpu"
    threads: int = 1
    checkpoint_every: int = 5
    keep_checkpoints: int = 3
    snapshot_every: int = 10
    record_evaluations: bool = False
    invalid_reward_scale: float = 1.0
    reward: str = "egrl"
    progress: bool = True
    cache_size: int = 100_000
    max_stale_generations: int = 100
    time_limit_s: float | None = None
    init_from: str | None = None
    agent: AgentConfig = field(default_factory=AgentConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    screen: ScreenConfig = field(default_factory=ScreenConfig)

    def to_dict(self) -> dict:
        return asdict(self)


_SECTIONS = {
    "agent": AgentConfig,
    "policy": PolicyConfig,
    "population": PopulationConfig,
    "learner": LearnerConfig,
    "screen": ScreenConfig,
}


def _build(cls, data: dict[str, Any]):
    names = {f.name for f in fields(cls)}
    known = {k: v for k, v in data.items() if k in names and k != "options"}
    extra = {k: v for k, v in data.items() if k not in names}
    if "options" in names:
        known["options"] = {**dict(data.get("options") or {}), **extra}
    elif extra:
        raise KeyError(f"unknown {cls.__name__} keys: {sorted(extra)}")
    return cls(**known)


#: dotted key -> rule, for every option of a training run (:class:`TrainConfig`): the
#: shared options' (:data:`egrl.validation.RULES`), then the screen's
#: (:data:`egrl.screening.rules.RULES`)
RULES: dict[str, Rule] = {**validation.RULES, **screen_rules.RULES}


def problem(key: str, value: Any) -> str | None:
    """The line that says why ``value`` is not allowed for the option ``key`` of a
    training run; None if it is (or the key has no rule)."""
    return validation.problem(key, value, RULES)


def config_problems(cfg: Mapping) -> list[str]:
    """One line per value of the nested training config ``cfg`` that breaks its rule
    (:data:`RULES`; absent keys pass)."""
    return validation.config_problems(cfg, RULES)


def check_config(cfg: Mapping) -> None:
    """Raise :class:`egrl.validation.ConfigError` naming every value of the nested
    training config ``cfg`` that breaks its rule (:data:`RULES`)."""
    validation.check_config(cfg, RULES)


def from_mapping(cfg: Any) -> TrainConfig:
    """A :class:`TrainConfig` from a nested mapping (e.g. a resolved Hydra config).

    Every value is checked against :data:`RULES` first: a value out of
    range raises :class:`egrl.validation.ConfigError` (a ``ValueError``) naming the key,
    the value and what is allowed.
    """
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            cfg = OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    cfg = dict(cfg)
    check_config(cfg)
    top = {f.name for f in fields(TrainConfig)} - set(_SECTIONS)
    kwargs = {k: cfg[k] for k in top if k in cfg}
    for key, cls in _SECTIONS.items():
        kwargs[key] = _build(cls, dict(cfg.get(key) or {}))
    return TrainConfig(**kwargs)
