"""Plain configuration records for training, usable with or without Hydra.

A run's config holds the run's own keys (seed, budget, ...), its screen and its agent's
section; an agent with options and sections of its own (EGRL's policy, population and
learner: :mod:`egrl.agents.egrl.config`) declares them, with their rules, in a subclass
of :class:`AgentConfig` beside its code. The Hydra tree under ``configs/`` mirrors these
records one group per swappable part; :func:`from_mapping` builds a :class:`TrainConfig`
from a Hydra ``DictConfig`` or any nested mapping (:func:`egrl.agents.train_config` with
the agent's own config class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from egrl import validation
from egrl.env import plain_config
from egrl.screening import rules as screen_rules
from egrl.validation import Rule


@dataclass
class AgentConfig:
    """Which agent runs (``egrl.agents.names()``) and its options.

    Keys of an agent's section beyond ``name`` land in ``options`` and are the agent's own
    parameters (e.g. a simulated-annealing schedule, read by
    :func:`egrl.agents.options.parse_options`). An agent with sections of its own (EGRL's
    policy, population and learner) has a config class of its own, a subclass
    (:class:`egrl.agents.egrl.config.EGRLConfig`), named by its agent class's
    ``config_class``.
    """

    name: str = "egrl"
    options: dict = field(default_factory=dict)

    #: dotted key -> rule for the keys this config owns (checked before a run starts)
    RULES: ClassVar[dict[str, Rule]] = {}
    #: the run config's top-level sections this config owns
    SECTIONS: ClassVar[dict[str, type]] = {}

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> AgentConfig:
        """The agent section ``cfg["agent"]`` of a run's nested mapping ``cfg``."""
        return build_section(cls, dict(cfg.get("agent") or {}))


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
    ``search`` (0: re-rank a pool) is how many steps of the agent's own operators run on
    the model between paid batches (model-based search: an agent that can, EA, EGRL, SA and
    random, proposes what that search visited); ``kappa`` weighs the model's spread in
    the acquisition ``mean + kappa * spread`` (0: the mean, as every run before it), and
    ``acquisition`` (``ucb``, that; ``ei``: the expected improvement over the best paid)
    chooses the acquisition. ``docs/screening.md`` describes it.
    """

    name: str = "none"
    pool: int = 1
    explore: float = 0.0
    warmup: int = 0
    max_train: int = 1000
    prior: str | None = None
    init_from: str | list[str] | None = None
    search: int | str = 0
    kappa: float = 0.0
    acquisition: str = "ucb"
    options: dict = field(default_factory=dict)


@dataclass
class ConfirmConfig:
    """A confirmed best on a noisy target (``Env.deterministic`` false; ignored otherwise).

    At the end of the run the ``top`` maps with the best readings (0: none) are read
    ``repeats`` times more, interleaved with the compiler's map, and the best mean is
    reported with a 95% interval (:mod:`egrl.confirm`). The readings are reserved from the
    budget when the run starts: ``(top + 1) * repeats`` maps.

    During the search a map the run keeps proposing (an elite, an annealing chain's map)
    is answered from the mean of its readings, and read again (paid) once it has been
    answered ``reread`` times per reading from memory (0: never): one lucky reading does
    not hold it (:mod:`egrl.measure_cache`).
    """

    top: int = 3
    repeats: int = 5
    reread: int = 2


@dataclass
class TrainConfig:
    """One training run.

    ``budget`` counts paid measurements: on a deterministic target a map measured before
    is answered from an LRU of ``cache_size`` maps (0: none) without being paid
    (:mod:`egrl.measure_cache`). A search that pays nothing in ``max_stale_generations``
    generations in a row stops, and so does one whose generations' wall time (``wall_s``,
    across resumes) has passed ``time_limit_s`` (None: no limit). ``init_from`` (a run
    directory, a policy snapshot or a checkpoint) starts the GNN policies of
    ``egrl``/``ea``/``pg`` from a trained one. ``record_size``: the most answered maps the
    run's record keeps (:class:`egrl.ledger.Ledger`; reports and ``screen.init_from``
    read it). ``prior_time_limit_s``: the most wall seconds the solve of the target's
    prior may take where the agent starts from it (``agent.start=prior``).
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
    reward: str | None = None
    progress: bool = True
    cache_size: int = 100_000
    max_stale_generations: int = 100
    time_limit_s: float | None = None
    prior_time_limit_s: float = 60.0
    init_from: str | None = None
    record_size: int = 100_000
    agent: AgentConfig = field(default_factory=AgentConfig)
    screen: ScreenConfig = field(default_factory=ScreenConfig)
    confirm: ConfirmConfig = field(default_factory=ConfirmConfig)

    def to_dict(self) -> dict:
        """The nested mapping a run's config holds: the agent's own sections (EGRL's
        policy, population and learner) at the top level, as :func:`from_mapping` reads them."""
        out = asdict(self)
        for section in type(self.agent).SECTIONS:
            out[section] = out["agent"].pop(section)
        return out


def build_section(cls, data: dict[str, Any], exclude: set[str] = frozenset()):
    """An instance of the dataclass ``cls`` from the mapping ``data``: keys beyond its
    fields go to its ``options`` where it has them, else are an error; fields in
    ``exclude`` are not read from ``data``."""
    names = {f.name for f in fields(cls)} - set(exclude)
    known = {k: v for k, v in data.items() if k in names and k != "options"}
    extra = {k: v for k, v in data.items() if k not in names}
    if "options" in names:
        known["options"] = {**dict(data.get("options") or {}), **extra}
    elif extra:
        raise KeyError(f"unknown {cls.__name__} keys: {sorted(extra)}")
    return cls(**known)


def run_rules(agent_config: type[AgentConfig] = AgentConfig) -> dict[str, Rule]:
    """Every rule of a run whose agent has the config class ``agent_config``, in the order
    problems are reported: the shared options', the agent's, the screen's."""
    return {**validation.RULES, **agent_config.RULES, **screen_rules.RULES}


#: dotted key -> rule, for every option of a training run (:class:`TrainConfig`) but its
#: agent's own: the shared options' (:data:`egrl.validation.RULES`), then the screen's
#: (:data:`egrl.screening.rules.RULES`)
RULES: dict[str, Rule] = run_rules()


def problem(key: str, value: Any, rules: Mapping[str, Rule] | None = None) -> str | None:
    """The line that says why ``value`` is not allowed for the option ``key`` of a
    training run (``rules``: :func:`run_rules`, default :data:`RULES`); None if it is
    (or the key has no rule)."""
    return validation.problem(key, value, RULES if rules is None else rules)


def config_problems(cfg: Mapping, rules: Mapping[str, Rule] | None = None) -> list[str]:
    """One line per value of the nested training config ``cfg`` that breaks its rule
    (``rules``: :func:`run_rules`, default :data:`RULES`; absent keys pass)."""
    return validation.config_problems(cfg, RULES if rules is None else rules)


def check_config(cfg: Mapping, rules: Mapping[str, Rule] | None = None) -> None:
    """Raise :class:`egrl.validation.ConfigError` naming every value of the nested
    training config ``cfg`` that breaks its rule (``rules``: default :data:`RULES`)."""
    validation.check_config(cfg, RULES if rules is None else rules)


#: top-level sections of a run's config the run itself reads (the agent's own aside)
_RUN_SECTIONS = {"agent", "screen", "confirm"}


def from_mapping(cfg: Any, agent_config: type[AgentConfig] = AgentConfig) -> TrainConfig:
    """A :class:`TrainConfig` from a nested mapping (e.g. a resolved Hydra config), its
    agent section built by ``agent_config`` (:func:`egrl.agents.train_config` picks the
    agent's own from the registry).

    Every value is checked first (:func:`run_rules`): a value out of range raises
    :class:`egrl.validation.ConfigError` (a ``ValueError``) naming the key, the value and
    what is allowed. Top-level sections the agent does not own (a run saved when every
    run carried EGRL's policy, population and learner sections) are not read.
    """
    cfg = plain_config(cfg)
    check_config(cfg, run_rules(agent_config))
    top = {f.name for f in fields(TrainConfig)} - _RUN_SECTIONS
    kwargs = {k: cfg[k] for k in top if k in cfg}
    kwargs["agent"] = agent_config.from_mapping(cfg)
    kwargs["screen"] = build_section(ScreenConfig, dict(cfg.get("screen") or {}))
    kwargs["confirm"] = build_section(ConfirmConfig, dict(cfg.get("confirm") or {}))
    return TrainConfig(**kwargs)
