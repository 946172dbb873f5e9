"""EGRL's configuration: the agent section and the policy, population and learner sections
it owns, each field with its rule (:func:`egrl.validation.ruled`).

``configs/agent/egrl.yaml`` (and ``ea.yaml``, ``pg.yaml``) pull the ``policy``,
``population`` and ``learner`` groups into a run's config; other agents' runs have none of
them. :meth:`EGRLConfig.from_mapping` builds the agent's config from a run's nested mapping
(those sections at its top level, as Hydra composes them). Defaults are the values of
Table 2 of the EGRL paper (Khadka et al., arXiv:2007.07298, 2020). :data:`EGRLConfig.RULES`,
the table ``egrl-train`` and :func:`egrl.config.from_mapping` check a run's values against,
is read from the fields' rules (the learner's SAC rules from
:class:`~egrl.agents.egrl.sac.SACConfig`'s), so each rule is written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from egrl.agents.egrl.sac import SACConfig
from egrl.config import AgentConfig, build_section
from egrl.validation import FLAG, FRACTION, Rule, at_least, check_fields, ruled, section_rules


@dataclass
class PolicyConfig:
    """Graph U-Net actor and twin-Q critic sizes (Table 2); the critic's width and depth
    are the learner's ``critic_hidden`` and ``critic_depth`` where set."""

    hidden: int = ruled(at_least(1), 128)
    out: int = ruled(at_least(1), 128)
    depth: int = ruled(at_least(1), 4)
    heads: int = ruled(at_least(1), 4)

    def __post_init__(self) -> None:
        check_fields(self, prefix="policy.")


@dataclass
class PopulationConfig:
    """Mixed population; keys beyond ``size`` and ``boltzmann_fraction`` go to ``MixedPopulation``."""

    size: int = ruled(at_least(1), 20)
    boltzmann_fraction: float = ruled(FRACTION, 0.2)
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self, prefix="population.")


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

    num_learners: int = ruled(at_least(1), 1)
    rollouts: int = ruled(at_least(0), 1)
    clean_rollouts: int = ruled(at_least(0), 1)
    buffer_size: int = ruled(at_least(1), 100_000)
    gradient_ratio: float = ruled(at_least(0, float), 0.1)
    burn_in: int = ruled(at_least(0), 48)
    ucb_c: float = ruled(at_least(0, float), 1.0)
    store_repaired: bool = ruled(FLAG, False)
    update_on: str = ruled(Rule(str, choices=("paid", "proposal")), "paid")

    def __post_init__(self) -> None:
        check_fields(self, prefix="learner.")


@dataclass
class EGRLConfig(AgentConfig):
    """``agent=egrl`` (both halves), ``ea`` (``use_population`` only) and ``pg``
    (``use_learner`` only), with the sections they own.

    Keys of the agent section beyond these fields land in ``options`` (the trainer's:
    ``start``, ``overlap``, ...: :class:`egrl.agents.egrl.agent.EGRLOptions`).
    """

    name: str = "egrl"
    use_population: bool = ruled(FLAG, True)
    use_learner: bool = ruled(FLAG, True)
    migration: bool = ruled(FLAG, True)
    migration_every: int = ruled(at_least(1), 1)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)

    #: the run config's top-level sections this config owns
    SECTIONS = {"policy": PolicyConfig, "population": PopulationConfig, "learner": LearnerConfig}

    def __post_init__(self) -> None:
        check_fields(self, prefix="agent.")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> EGRLConfig:
        """The agent section ``cfg["agent"]`` and the sections of :data:`SECTIONS` at the
        top level of the run's mapping ``cfg`` (values checked by the caller)."""
        agent = build_section(cls, dict(cfg.get("agent") or {}), exclude=set(cls.SECTIONS))
        for key, section in cls.SECTIONS.items():
            setattr(agent, key, build_section(section, dict(cfg.get(key) or {})))
        return agent


#: dotted key -> rule for the keys EGRL's config owns (checked before a run starts): its
#: agent section's fields and its sections' (:data:`EGRLConfig.SECTIONS`)
EGRLConfig.RULES = {
    **section_rules(EGRLConfig, "agent"),
    **{
        key: rule
        for section, cls in EGRLConfig.SECTIONS.items()
        for key, rule in section_rules(cls, section).items()
    },
}
