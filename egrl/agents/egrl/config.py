"""EGRL's configuration: the agent section and the policy, population and learner sections
it owns, with their rules.

``configs/agent/egrl.yaml`` (and ``ea.yaml``, ``pg.yaml``) pull the ``policy``,
``population`` and ``learner`` groups into a run's config; other agents' runs have none of
them. :meth:`EGRLConfig.from_mapping` builds the agent's config from a run's nested mapping
(those sections at its top level, as Hydra composes them). Defaults are the values of
Table 2 of the EGRL paper (Khadka et al., arXiv:2007.07298, 2020).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from egrl.agents.egrl.sac import SACConfig
from egrl.config import AgentConfig, build_section
from egrl.validation import FLAG, FRACTION, Rule, at_least, positive


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
class EGRLConfig(AgentConfig):
    """``agent=egrl`` (both halves), ``ea`` (``use_population`` only) and ``pg``
    (``use_learner`` only), with the sections they own.

    Keys of the agent section beyond these fields land in ``options`` (the trainer's:
    ``start``, ``overlap``, ...: :class:`egrl.agents.egrl.agent.EGRLOptions`).
    """

    name: str = "egrl"
    use_population: bool = True
    use_learner: bool = True
    migration: bool = True
    migration_every: int = 1
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)

    #: dotted key -> rule for the keys this config owns (checked before a run starts)
    RULES = {
        "agent.use_population": FLAG,
        "agent.use_learner": FLAG,
        "agent.migration": FLAG,
        "agent.migration_every": at_least(1),
        "policy.hidden": at_least(1),
        "policy.out": at_least(1),
        "policy.depth": at_least(1),
        "policy.heads": at_least(1),
        "population.size": at_least(1),
        "population.boltzmann_fraction": FRACTION,
        "learner.num_learners": at_least(1),
        "learner.rollouts": at_least(0),
        "learner.clean_rollouts": at_least(0),
        "learner.buffer_size": at_least(1),
        "learner.gradient_ratio": at_least(0, float),
        "learner.burn_in": at_least(0),
        "learner.ucb_c": at_least(0, float),
        "learner.gamma": FRACTION,
        "learner.lr_actor": positive(),
        "learner.lr_critic": positive(),
        "learner.lr_alpha": positive(),
        "learner.alpha": Rule(float, low=0, words=("auto",)),
        "learner.alpha_init": positive(),
        "learner.target_entropy_ratio": FRACTION,
        "learner.entropy_reduction": Rule(str, choices=("sum", "mean")),
        "learner.reward_norm": Rule(str, choices=("buffer", "none")),
        "learner.store_repaired": FLAG,
        "learner.update_on": Rule(str, choices=("paid", "proposal")),
        "learner.tau": Rule(float, low=0, high=1, low_open=True),
        "learner.reward_scale": positive(),
        "learner.reward_shift": Rule(float),
        "learner.batch_size": at_least(1),
        "learner.action_noise_std": at_least(0, float),
        "learner.action_noise_clip": at_least(0, float),
        "learner.clamp_noisy_action": FLAG,
        "learner.noise_std": at_least(0, float),
        "learner.actor_action": Rule(str, choices=("probs", "argmax_probs")),
        "learner.target_actor": FLAG,
        "learner.grad_clip_norm": Rule(float, low=0, low_open=True, optional=True),
        "learner.shared_critic_encoder": FLAG,
        "learner.critic_hidden": Rule(int, low=1, optional=True),
        "learner.critic_depth": Rule(int, low=1, optional=True),
    }
    #: the run config's top-level sections this config owns
    SECTIONS = {"policy": PolicyConfig, "population": PopulationConfig, "learner": LearnerConfig}

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> EGRLConfig:
        """The agent section ``cfg["agent"]`` and the sections of :data:`SECTIONS` at the
        top level of the run's mapping ``cfg`` (values checked by the caller)."""
        agent = build_section(cls, dict(cfg.get("agent") or {}), exclude=set(cls.SECTIONS))
        for key, section in cls.SECTIONS.items():
            setattr(agent, key, build_section(section, dict(cfg.get(key) or {})))
        return agent
