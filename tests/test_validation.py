"""The option tables (egrl/config.py's and EGRL's own), resume rules and override rewriting,
in process."""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest
from omegaconf import OmegaConf

from egrl import config
from egrl.agents import agent_class, names, run_rules, train_config
from egrl.agents.annealing import AnnealingOptions
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig
from egrl.agents.egrl.sac import SACConfig
from egrl.agents.genetic import GeneticOptions
from egrl.agents.options import parse_options
from egrl.cli.overrides import rewrite_workload_paths, swept_values, typed_keys
from egrl.cli.resume import ResumeError, apply_changes, resume_changes
from egrl.cli.train import workload_label
from egrl.config import TrainConfig
from egrl.runs import flatten
from egrl.validation import ConfigError, Rule, field_problems, field_rules

#: every rule of an EGRL run: the run's, EGRL's own, the screen's
RULES = run_rules("egrl")


def config_problems(cfg) -> list[str]:
    return config.config_problems(cfg, RULES)


def from_mapping(cfg) -> TrainConfig:
    return train_config(cfg)


def option_classes() -> list[type]:
    """The options dataclass of every registered agent (``...Options`` in its module)."""
    modules = {agent_class(name).__module__ for name in names()} | {"egrl.agents.mbo.options"}
    found = {}
    for module in sorted(modules):
        for value in vars(sys.modules[module]).values():
            is_options = isinstance(value, type) and value.__name__.endswith("Options")
            if is_options and dataclasses.is_dataclass(value):
                found[value.__qualname__] = value
    return list(found.values())


def leaf_keys() -> set[str]:
    """Dotted keys of every option of an EGRL run (agent and population options aside),
    as a run's config writes them: EGRL's sections at the top level."""
    plain = TrainConfig(agent=EGRLConfig()).to_dict()
    return {k for k in flatten(plain) if ".options" not in f".{k}"}


def test_every_option_has_a_rule_and_every_rule_an_option():
    assert set(RULES) == leaf_keys()


def test_defaults_pass():
    assert config_problems(TrainConfig().to_dict()) == []
    assert config_problems(TrainConfig(agent=EGRLConfig()).to_dict()) == []


@pytest.mark.parametrize(
    ("cfg", "line"),
    [
        ({"budget": -5}, "budget=-5 is invalid: expected an integer >= 1"),
        ({"budget": 0}, "budget=0 is invalid: expected an integer >= 1"),
        ({"budget": "abc"}, "budget=abc is invalid: expected an integer >= 1"),
        ({"budget": 10.5}, "budget=10.5 is invalid: expected an integer >= 1"),
        ({"budget": True}, "budget=true is invalid: expected an integer >= 1"),
        ({"seed": -1}, "seed=-1 is invalid: expected an integer >= 0"),
        ({"threads": 0}, "threads=0 is invalid: expected an integer >= 1"),
        ({"progress": "yes"}, "progress=yes is invalid: expected true or false"),
        ({"device": "gpu"}, "device=gpu is invalid: expected cpu, cuda or cuda:N"),
        (
            {"population": {"boltzmann_fraction": 1.5}},
            "population.boltzmann_fraction=1.5 is invalid: expected a number in [0, 1]",
        ),
        ({"learner": {"gamma": 2}}, "learner.gamma=2 is invalid: expected a number in [0, 1]"),
        ({"learner": {"tau": 0}}, "learner.tau=0 is invalid: expected a number in (0, 1]"),
        ({"learner": {"lr_actor": 0.0}}, "learner.lr_actor=0.0 is invalid: expected a number > 0"),
        (
            {"learner": {"noise_std": math.nan}},
            "learner.noise_std=nan is invalid: expected a number >= 0",
        ),
        (
            {"learner": {"grad_clip_norm": -1}},
            "learner.grad_clip_norm=-1 is invalid: expected a number > 0 or null",
        ),
        (
            {"learner": {"actor_action": "max"}},
            "learner.actor_action=max is invalid: expected one of probs, argmax_probs",
        ),
        ({"policy": {"hidden": 0}}, "policy.hidden=0 is invalid: expected an integer >= 1"),
    ],
)
def test_bad_values_are_named_with_what_is_allowed(cfg, line):
    assert config_problems(cfg) == [line]
    with pytest.raises(ValueError) as info:
        from_mapping(cfg)
    assert isinstance(info.value, ConfigError)
    assert str(info.value) == line


def test_good_edge_values_pass():
    cfg = {
        "seed": 0,
        "budget": 1,
        "invalid_reward_scale": 0,
        "device": "cuda:1",
        "population": {"boltzmann_fraction": 1},
        "learner": {"gamma": 0.0, "tau": 1, "grad_clip_norm": None, "rollouts": 0},
    }
    assert config_problems(cfg) == []
    assert from_mapping(cfg).agent.learner.tau == 1


def test_every_problem_is_listed():
    problems = config_problems({"budget": -1, "learner": {"gamma": 3}})
    assert [p.split("=")[0] for p in problems] == ["budget", "learner.gamma"]


# ------------------------------------------------------------------ rules beside fields
def test_egrls_table_is_read_from_the_fields_rules():
    """Each rule written once: the table of EGRL's sections holds the fields' own rules
    (SAC's hyperparameters from SACConfig), and a section refuses what the table does."""
    learner = field_rules(LearnerConfig)
    assert set(field_rules(SACConfig)) < set(learner)
    for key, rule in learner.items():
        assert EGRLConfig.RULES[f"learner.{key}"] is rule
    assert EGRLConfig.RULES["learner.tau"] is field_rules(SACConfig)["tau"]
    line = config_problems({"learner": {"tau": 0}})[0]
    with pytest.raises(ConfigError) as info:
        LearnerConfig(tau=0)
    assert str(info.value) == line == "learner.tau=0 is invalid: expected a number in (0, 1]"
    with pytest.raises(ConfigError, match=r"^tau=0 is invalid: expected a number in \(0, 1\]$"):
        SACConfig(tau=0)
    assert SACConfig(tau=1).tau == 1


def test_every_agent_option_has_a_rule():
    """Every field of every agent's options dataclass carries its rule, but the paths
    checked where they are opened (a policy snapshot, an Optuna storage)."""
    checked_when_opened = {("ZeroShotOptions", "policy"), ("OptunaOptions", "storage")}
    seen = 0
    for cls in option_classes():
        for f in dataclasses.fields(cls):
            if (cls.__name__, f.name) not in checked_when_opened:
                assert f.name in field_rules(cls), f"{cls.__name__}.{f.name} has no rule"
        assert field_problems(cls()) == [], cls.__name__  # the defaults pass
        seen += 1
    assert seen >= 13


def test_agent_options_are_refused_with_the_agent_and_what_is_allowed():
    cfg = train_config({"agent": {"name": "sa", "chains": 0, "start": "zeros"}})
    with pytest.raises(ConfigError) as info:
        parse_options(AnnealingOptions, cfg)
    assert info.value.problems == [
        "agent 'sa': option chains=0 is invalid: expected an integer >= 1",
        "agent 'sa': option start=zeros is invalid: expected one of initial, random, native, "
        "fallback, prior (alias dram for initial)",
    ]
    cfg = train_config({"agent": {"name": "ga", "cxpb": 0, "mutpb": 0}})
    with pytest.raises(ConfigError, match="agent 'ga': option cxpb=0 and mutpb=0 are invalid"):
        parse_options(GeneticOptions, cfg)
    cfg = train_config({"agent": {"name": "ga", "elites": 20}})
    with pytest.raises(
        ConfigError, match=r"elites=20 is invalid: expected an integer in \[0, 19\]"
    ):
        parse_options(GeneticOptions, cfg)


def test_a_list_rule_and_a_boolean_with_words():
    searchers = Rule(list, item=Rule(str, choices=("ea", "sa")))
    assert searchers.accepts(["ea", "sa"]) and not searchers.accepts([])
    assert not searchers.accepts("ea") and not searchers.accepts(["ea", "pso"])
    assert searchers.expected() == "a non-empty list, each one of ea, sa"
    overlap = Rule(bool, words=("auto",))
    assert overlap.accepts("auto") and overlap.accepts(False) and not overlap.accepts("on")
    assert overlap.expected() == "auto, true or false"
    assert Rule(str, choices=("learned", "true")).accepts(True)  # ``key=true`` parses to a bool
    assert not Rule(str, choices=("learned", "true")).accepts(False)


# ------------------------------------------------------------------ overrides
def test_workload_paths_become_workload_name():
    options = {"resnet50", "bert-base"}
    args = ["workload=resnet50", "workload=m.onnx", "seed=1", "workload=bert-base,dir/x.json.gz"]
    assert rewrite_workload_paths(args, options) == [
        "workload=resnet50",
        "workload.name=m.onnx",
        "seed=1",
        "workload.name=bert-base,dir/x.json.gz",
    ]
    assert rewrite_workload_paths(["workload=resnet50,bert-base"], options) == [
        "workload=resnet50,bert-base"
    ]


def test_typed_keys_and_swept_values():
    overrides = ["+learner.foo=1", "budget=100,200", "~policy.depth", "hydra.run.dir=x"]
    assert typed_keys(overrides) == ["learner.foo", "budget", "policy.depth", "hydra.run.dir"]
    assert swept_values(overrides) == [("budget", 100), ("budget", 200)]


def test_workload_label_names_run_directories():
    assert workload_label("resnet50") == "resnet50"
    # a file by its name, ending included: mynet.onnx and mynet.json.gz runs land apart
    assert workload_label("models/my.net.onnx") == "my.net.onnx"
    assert workload_label("x.json.gz") == "x.json.gz"


# ------------------------------------------------------------------ resume
SAVED = OmegaConf.create(
    {
        "seed": 0,
        "budget": 40,
        "progress": True,
        "agent": {"name": "egrl"},
        "workload": {"name": "a"},
    }
)


def composed(**changes):
    cfg = OmegaConf.create(OmegaConf.to_container(SAVED))
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def test_resume_applies_resumable_keys():
    cfg = composed(budget=60, progress=False, seed=0)
    changes = resume_changes(SAVED, cfg, ["budget", "progress", "seed", "resume"], done=40)
    assert changes == {"budget": (40, 60), "progress": (True, False)}
    assert apply_changes(SAVED, changes).budget == 60
    assert SAVED.budget == 40


def test_resume_may_move_a_run_to_another_runtime():
    saved = OmegaConf.create({**OmegaConf.to_container(SAVED), "runtime": {"name": "local"}})
    cfg = OmegaConf.create(
        {**OmegaConf.to_container(SAVED), "runtime": {"name": "ray", "workers": 8}}
    )
    changes = resume_changes(saved, cfg, ["runtime", "runtime.workers"])
    assert changes["runtime"] == ({"name": "local"}, {"name": "ray", "workers": 8})
    assert apply_changes(saved, changes).runtime.workers == 8


def test_resume_ignores_keys_not_typed():
    cfg = composed(seed=5, budget=70)
    assert resume_changes(SAVED, cfg, ["budget"]) == {"budget": (40, 70)}


@pytest.mark.parametrize(
    ("typed", "cfg", "named"),
    [
        (["seed"], composed(seed=3), "seed"),
        (["workload"], composed(**{"workload.name": "b"}), "workload"),
        (["experiment"], composed(), "experiment"),
    ],
)
def test_resume_refuses_other_keys(typed, cfg, named):
    with pytest.raises(ResumeError, match=f"cannot change {named} "):
        resume_changes(SAVED, cfg, typed)


def test_resume_refuses_a_budget_below_the_iterations_made():
    with pytest.raises(ResumeError, match="budget=30 is invalid: the run has already made 40"):
        resume_changes(SAVED, composed(budget=30), ["budget"], done=40)


def test_resume_keeps_the_budget_of_nevergrad():
    saved = composed(**{"agent.name": "nevergrad"})
    cfg = composed(**{"agent.name": "nevergrad", "budget": 80})
    with pytest.raises(ResumeError, match="nevergrad keeps its budget"):
        resume_changes(saved, cfg, ["budget"])


def test_resume_of_a_run_saved_before_the_learner_options_keeps_its_learner(tmp_path):
    from omegaconf import OmegaConf

    from egrl.cli.resume import saved_config

    old = {"seed": 0, "learner": {"alpha": 0.05, "reward_scale": 5.0}}
    OmegaConf.save(OmegaConf.create(old), tmp_path / "config.yaml")
    learner = saved_config(tmp_path).learner
    assert learner.entropy_reduction == "mean" and learner.reward_norm == "none"
    assert learner.alpha == 0.05
    new = {"seed": 0, "learner": {"entropy_reduction": "sum", "reward_norm": "buffer"}}
    OmegaConf.save(OmegaConf.create(new), tmp_path / "config.yaml")
    assert saved_config(tmp_path).learner.reward_norm == "buffer"


def test_a_run_saved_with_a_declared_determinism_continues_under_auto():
    """A run made when external chips were declared deterministic (or said so outright)
    continues as it was made when the composed config has the default ``auto``."""
    from egrl.cli.resume import with_saved_determinism

    saved = OmegaConf.create({"hwmodel": {"name": "external", "params": {"deterministic": True}}})
    composed = OmegaConf.create(
        {"hwmodel": {"name": "external", "params": {"deterministic": "auto"}}}
    )
    assert with_saved_determinism(composed, saved).hwmodel.params.deterministic is True
    typed = OmegaConf.create({"hwmodel": {"name": "external", "params": {"deterministic": False}}})
    assert with_saved_determinism(typed, saved).hwmodel.params.deterministic is False
