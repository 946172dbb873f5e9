"""The learner presets: ``learner=sac-table2`` is Table 2's update rate with today's
learner, and it holds every key the default group holds."""

from __future__ import annotations

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from egrl.cli.build import train_config
from tests.support.paths import ROOT

LEARNER = ROOT / "configs" / "learner"


def keys(name: str) -> set[str]:
    return set(OmegaConf.load(LEARNER / f"{name}.yaml"))


def test_sac_table2_holds_every_learner_key():
    """A key added to learner=sac must be decided for the preset too."""
    assert keys("sac-table2") == keys("sac")


def test_sac_table2_is_table_2s_update_rate():
    with initialize_config_module("configs", version_base=None):
        cfg = compose("train", overrides=["learner=sac-table2"])
    learner = train_config(cfg).agent.learner
    assert (learner.gradient_ratio, learner.batch_size) == (1.0, 24)
    assert (learner.update_on, learner.critic_hidden, learner.critic_depth) == ("paid", None, None)
    # today's learner, not EGRL's exact one (learner=sac-paper)
    assert (learner.alpha, learner.reward_norm, learner.entropy_reduction) == (
        "auto",
        "buffer",
        "sum",
    )
