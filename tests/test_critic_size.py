"""The critic's own sizes (``learner.critic_hidden``, ``learner.critic_depth``): null keeps
the policy's (every earlier run unchanged), a smaller critic trains, checkpoints and resumes,
a checkpoint's critic layout wins over the learner's, and a resumed run keeps the learner
settings it was saved with."""

from __future__ import annotations

import copy
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch_geometric.data import Data

from egrl.agents import train_config
from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig, PolicyConfig, PopulationConfig
from egrl.agents.egrl.sac import SACConfig, SACDiscrete
from egrl.config import TrainConfig
from egrl.replay import ReplayBuffer
from egrl.validation import ConfigError
from policies import TwinQCritic
from tests.support.envs import small_env
from tests.support.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

F, N, CHOICES = 5, 6, [3, 2]
EDGES = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
POLICY = dict(hidden=16, out=16, depth=2, heads=2)


def graph() -> Data:
    return Data(x=torch.randn(N, F, generator=torch.Generator().manual_seed(0)), edge_index=EDGES)


def buffer() -> ReplayBuffer:
    rng = np.random.default_rng(0)
    maps = np.stack([rng.integers(0, c, size=(40, N)) for c in CHOICES], -1)
    out = ReplayBuffer(100, N, len(CHOICES))
    out.add(maps, rng.normal(size=40), "gnn")
    return out


def learner(seed: int = 0, **config) -> SACDiscrete:
    return SACDiscrete.build(
        F, CHOICES, seed=seed, config=SACConfig(batch_size=8, **config), **POLICY
    )


# ------------------------------------------------------------------ the learner
def test_a_small_critic_has_its_sizes_and_the_actor_of_the_default():
    small = learner(critic_hidden=8, critic_depth=1)
    default = learner()
    assert small.critic.layout == {"shared": True, "hidden": 8, "depth": 1}
    assert default.critic.layout == {"shared": True, "hidden": 16, "depth": 2}
    assert TwinQCritic.layout_of(small.critic.state_dict()) == small.critic.layout
    towers = learner(shared_critic_encoder=False, critic_depth=3).critic
    assert TwinQCritic.layout_of(towers.state_dict()) == {"shared": False, "hidden": 16, "depth": 3}
    # the actor is built first: its weights do not depend on the critic's sizes
    for a, b in zip(small.actor.parameters(), default.actor.parameters(), strict=True):
        assert torch.equal(a, b)
    assert sum(p.numel() for p in small.critic.parameters()) < sum(
        p.numel() for p in default.critic.parameters()
    )


def test_null_sizes_are_the_policys():
    explicit = learner(critic_hidden=POLICY["hidden"], critic_depth=POLICY["depth"])
    for a, b in zip(learner().critic.parameters(), explicit.critic.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_small_critic_trains_saves_and_resumes_identically():
    data, buf = graph(), buffer()
    small = learner(critic_hidden=8, critic_depth=1)
    stats = small.train_steps([(data, buf)], 2, np.random.default_rng(0))
    assert np.isfinite(stats["critic_loss"]) and small.num_updates == 2
    state = copy.deepcopy(small.state_dict())
    assert state["config"]["critic_hidden"] == 8

    restored = learner(seed=5, critic_hidden=8, critic_depth=1)
    restored.load_state_dict(state)
    a = small.train_steps([(data, buf)], 2, np.random.default_rng(9))
    b = restored.train_steps([(data, buf)], 2, np.random.default_rng(9))
    assert a == b


def test_a_checkpoints_critic_layout_wins_over_the_learners(caplog):
    """A learner built with the policy's sizes restores a small critic's checkpoint with
    the checkpoint's critic (and the other way round), as a resumed run must."""
    data, buf = graph(), buffer()
    small = learner(critic_hidden=8, critic_depth=1)
    small.train_steps([(data, buf)], 2, np.random.default_rng(0))
    restored = learner(seed=5)
    restored.load_state_dict(copy.deepcopy(small.state_dict()))
    assert "width 8 and depth 1" in caplog.text
    assert restored.critic.layout == small.critic.layout
    assert (restored.config.critic_hidden, restored.config.critic_depth) == (8, 1)
    a = small.train_steps([(data, buf)], 2, np.random.default_rng(9))
    b = restored.train_steps([(data, buf)], 2, np.random.default_rng(9))
    assert a == b

    back = learner(seed=5, critic_hidden=8, critic_depth=1)
    back.load_state_dict(copy.deepcopy(learner().state_dict()))
    assert back.critic.layout == {"shared": True, "hidden": 16, "depth": 2}


def test_bad_sizes_are_refused():
    with pytest.raises(
        ValueError, match=r"critic_hidden=0 is invalid: expected an integer >= 1 or null"
    ):
        SACConfig(critic_hidden=0)
    with pytest.raises(ValueError, match="multiple of the attention heads"):
        learner(critic_hidden=7)
    with pytest.raises(ConfigError, match="learner.critic_depth=0 is invalid"):
        train_config({"learner": {"critic_depth": 0}})
    with pytest.raises(ConfigError, match="learner.critic_hidden=1.5 is invalid"):
        train_config({"learner": {"critic_hidden": 1.5}})
    cfg = train_config({"learner": {"critic_hidden": None, "critic_depth": 3}})
    assert (cfg.agent.learner.critic_hidden, cfg.agent.learner.critic_depth) == (None, 3)


# ------------------------------------------------------------------ whole runs
def sizes_config(budget: int = 70, **learner_keys) -> TrainConfig:
    """EGRL on :func:`small_env`, seed 3: tiny policies, a population of 6, ``learner_keys``
    set (the critic's sizes among them)."""
    return TrainConfig(
        seed=3,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        snapshot_every=1000,
        agent=EGRLConfig(
            name="egrl",
            policy=PolicyConfig(**POLICY),
            population=PopulationConfig(size=6, boltzmann_fraction=0.5),
            learner=LearnerConfig(batch_size=8, burn_in=16, gradient_ratio=1.0, **learner_keys),
        ),
    )


def test_null_sizes_give_the_run_of_the_policys_sizes(tmp_path):
    """The default, null typed out, and the policy's sizes typed out: the same run."""
    default = sizes_config()
    values = default.to_dict()
    values["learner"] |= {"critic_hidden": None, "critic_depth": None}
    typed = train_config(values)
    learner = replace(default.agent.learner, critic_hidden=16, critic_depth=2)
    sized = replace(default, agent=replace(default.agent, learner=learner))
    for name, cfg in (("default", default), ("null", typed), ("sized", sized)):
        EGRLAgent(small_env(), cfg, tmp_path / name).run()
    reference = read_metrics(tmp_path / "default")
    assert reference[-1]["critic_loss"] not in ("", "nan")  # the learner has learned
    assert read_metrics(tmp_path / "null") == reference == read_metrics(tmp_path / "sized")


def test_a_run_with_a_small_critic_resumes_as_if_never_stopped(tmp_path):
    cfg = sizes_config(critic_hidden=8, critic_depth=1)
    reference = tmp_path / "reference"
    trainer = EGRLAgent(small_env(), cfg, reference)
    trainer.run()
    assert trainer.portfolio.learners[0].critic.layout["hidden"] == 8
    assert trainer.portfolio.learners[0].num_updates > 0
    checkpoints = sorted((reference / "checkpoints").glob("gen_??????"))
    assert len(checkpoints) >= 2
    killed = tmp_path / "killed"
    shutil.copytree(checkpoints[0], killed / "checkpoints" / checkpoints[0].name)
    resumed = EGRLAgent(small_env(), cfg, killed)
    assert resumed.resume() and resumed.ledger.iterations < cfg.budget
    resumed.run()
    assert read_metrics(killed) == read_metrics(reference)


# ------------------------------------------------------------------ resuming from the CLI
def test_a_resumed_run_keeps_its_learner_when_the_defaults_move(tmp_path):
    """The saved config holds every learner key: a resume takes them, not the defaults of
    the day (a run made at Table 2's rate resumes at it under today's defaults, with batch
    8 standing for a further move), and a config saved before the critic had its own sizes
    resumes with the policy's."""
    from hydra import compose, initialize_config_module

    from egrl.cli.train import resumed_config
    from egrl.rundir import RunDir

    with initialize_config_module("configs", version_base=None):
        saved = compose("train", overrides=["learner=sac-table2"])
        today = compose("train", overrides=["learner.batch_size=8"])
    assert today.learner.gradient_ratio != saved.learner.gradient_ratio == 1.0
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    RunDir(run_dir).write_config(saved)
    cfg = resumed_config(today, run_dir, typed=[])
    assert (cfg.learner.gradient_ratio, cfg.learner.batch_size) == (1.0, 24)
    assert cfg.learner.critic_hidden is None

    old = OmegaConf.to_container(saved)
    del old["learner"]["critic_hidden"], old["learner"]["critic_depth"]
    RunDir(run_dir).write_config(old)
    learner_cfg = resumed_config(today, run_dir, typed=[]).learner
    assert learner_cfg.critic_hidden is None and learner_cfg.critic_depth is None
    resumed = train_config(resumed_config(today, run_dir, typed=[]))
    assert resumed.agent.learner.gradient_ratio == 1.0
