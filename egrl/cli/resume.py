"""What ``egrl-train resume=RUN_DIR KEY=VALUE ...`` may change in the run it continues.

A resumed run keeps its own ``config.yaml``. A key typed next to ``resume`` whose value
differs from that config is applied if it is in :data:`RESUMABLE_KEYS` (how long the
run goes on and how it reports, not what it searches) and refused otherwise, with every
refused key named. A key under a resumable group (``runtime.workers``) is resumable
as the group is: a run killed on one machine may go on on a Ray cluster, or the other
way round (where maps are measured does not change what is searched). ``budget`` may grow, or shrink down to the iterations the run has
already made, except for agents in :data:`FIXED_BUDGET_AGENTS`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from egrl.checkpoint import CheckpointError, load_plain
from egrl.cli.overrides import group_path, section_owners
from egrl.env import reward_of
from egrl.rundir import CONFIG_FILE, RunDir
from egrl.validation import show

#: keys a resumed run may take from the command line
RESUMABLE_KEYS = (
    "budget",
    "progress",
    "threads",
    "checkpoint_every",
    "keep_checkpoints",
    "snapshot_every",
    "max_stale_generations",
    "time_limit_s",
    "runtime",
    "logger",
)
#: keys that say how to launch, never compared with the saved config
LAUNCH_KEYS = ("resume", "continue_runs")
#: agents whose search is built for the budget it started with: NGOpt picks its
#: algorithm from the budget, and resuming replays its asks and tells into a new one
FIXED_BUDGET_AGENTS = ("nevergrad",)

_ABSENT = object()

log = logging.getLogger(__name__)


class ResumeError(ValueError):
    """A resume the run directory or the typed keys do not allow."""


def saved_config(run_dir: Path) -> DictConfig:
    """The run's own ``config.yaml``; :class:`ResumeError` if ``run_dir`` holds no run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResumeError(f"resume={run_dir} is invalid: no such directory")
    files = RunDir(run_dir)
    if not files.config.is_file():
        raise ResumeError(
            f"resume={run_dir} is invalid: not a run directory ({CONFIG_FILE} is missing)"
        )
    return with_screen_of_its_time(with_learner_defaults_of_its_time(files.config_node()))


#: learner keys added after runs were first saved, with the value that reproduces those
#: runs (the learner before docs/learner.md's "Why the learner collapsed")
LEARNER_KEYS_OF_OLD_RUNS = {
    "entropy_reduction": "mean",
    "reward_norm": "none",
    "update_on": "proposal",  # one update per answered map, before learner.update_on
    "critic_hidden": None,  # the critic had the policy's sizes before it had its own
    "critic_depth": None,
}


def with_learner_defaults_of_its_time(cfg: DictConfig) -> DictConfig:
    """``cfg`` with the learner keys it lacks set to what the run was made with.

    A run saved before a learner option existed ran without it; filling the option's new
    default instead would change the run on resume. The keys a saved config holds
    (``gradient_ratio``, ``batch_size``, ...) are kept as they are, whatever the defaults
    have become since.
    """
    learner = cfg.get("learner")
    if learner is None:
        return cfg
    missing = {k: v for k, v in LEARNER_KEYS_OF_OLD_RUNS.items() if k not in learner}
    if missing:
        log.info("resume: the saved config predates %s; using %s", sorted(missing), missing)
        cfg = OmegaConf.merge(cfg, {"learner": missing})
    return cfg


#: screen keys added after runs were first saved, with the value that reproduces them
SCREEN_KEYS_OF_OLD_RUNS = {"search": 0, "kappa": 0.0, "acquisition": "ucb"}


def with_screen_of_its_time(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``screen=none`` if it has no ``screen`` section: a run saved before
    screening existed measured every map it proposed, as ``screen=none`` does; a screen
    saved before model-based search re-ranked a pool by the model's mean."""
    if "screen" in cfg:
        missing = {k: v for k, v in SCREEN_KEYS_OF_OLD_RUNS.items() if k not in cfg.screen}
        return OmegaConf.merge(cfg, {"screen": missing}) if missing else cfg

    return OmegaConf.merge(cfg, {"screen": OmegaConf.load(group_path("screen", "none"))})


def with_resolved_reward(cfg: DictConfig) -> DictConfig:
    """``cfg`` with its reward resolved (:func:`egrl.env.reward_of`): a run saved with the
    reward its hardware model now has by default (``reward: egrl`` on NNP-I, ``repaired``
    on ``mcm``) compares equal to the same run composed with ``reward: null``."""
    return OmegaConf.merge(cfg, {"reward": reward_of(cfg)})


def with_saved_determinism(cfg: DictConfig, saved: DictConfig) -> DictConfig:
    """``cfg`` with the saved run's ``hwmodel.params.deterministic`` where ``cfg`` has the
    default ``auto`` and the run said true or false (runs made before ``auto`` existed, or
    that said it outright): the run continues as it was made."""
    key = "hwmodel.params.deterministic"
    old, new = OmegaConf.select(saved, key), OmegaConf.select(cfg, key)
    if new == "auto" and isinstance(old, bool):
        cfg = OmegaConf.merge(cfg, {"hwmodel": {"params": {"deterministic": old}}})
    return cfg


def own_sections_only(saved: DictConfig) -> DictConfig:
    """``saved`` without the top-level sections its agent does not own (EGRL's policy,
    population and learner for another agent): what a run's ``config.yaml`` holds. A run
    saved when every run carried them, or composed by a preset that sets EGRL's learner
    for a sweep over several agents, compares equal to the same run composed now."""
    agent = str(OmegaConf.select(saved, "agent.name", default="egrl"))
    owners = section_owners()
    kept = [key for key in saved if agent in owners.get(key, [agent])]
    return saved if len(kept) == len(saved) else OmegaConf.masked_copy(saved, kept)


def checkpoint_iterations(run_dir: Path) -> int | None:
    """Iterations recorded by the newest intact checkpoint of ``run_dir`` (None: none).

    Reads only the verified JSON half of each checkpoint (:func:`egrl.checkpoint.load_plain`).
    """
    for path in RunDir(run_dir).list_checkpoints():
        try:
            return int(load_plain(path)["iterations"])
        except (CheckpointError, OSError, KeyError, TypeError, ValueError):
            continue
    return None


def _value(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, key, default=_ABSENT)
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def resume_changes(
    saved: DictConfig, cfg: DictConfig, typed: Iterable[str], done: int | None = None
) -> dict[str, tuple[Any, Any]]:
    """``{key: (saved value, new value)}`` for the typed keys that change the saved run.

    Args:
        saved: the run's ``config.yaml``.
        cfg: the config composed from the command line.
        typed: the keys the user typed (``hydra.*`` and :data:`LAUNCH_KEYS` are skipped).
        done: iterations the run has already made (None: unknown, not checked).

    Raises :class:`ResumeError` naming every typed key that differs and may not change,
    or a budget below ``done``. A key found in neither config (a preset such as
    ``experiment=quick``) may change anything, so it is refused too.
    """
    changes, refused = {}, []
    fixed_budget = OmegaConf.select(saved, "agent.name") in FIXED_BUDGET_AGENTS
    for key in typed:
        if key.split(".")[0] in ("hydra", *LAUNCH_KEYS):
            continue
        old, new = _value(saved, key), _value(cfg, key)
        if old is _ABSENT and new is _ABSENT:
            refused.append(key)
        elif old != new:
            resumable = key.split(".")[0] in RESUMABLE_KEYS
            allowed = resumable and not (key == "budget" and fixed_budget)
            if allowed:
                changes[key] = (old, new)
            else:
                refused.append(key)
    if refused:
        raise ResumeError(
            f"resume: cannot change {', '.join(refused)} (the run was made with "
            f"other values); a resumed run may change only {', '.join(RESUMABLE_KEYS)}"
            + (f" ({saved.agent.name} keeps its budget)" if "budget" in refused else "")
        )
    if "budget" in changes and done is not None and changes["budget"][1] < done:
        raise ResumeError(
            f"budget={show(changes['budget'][1])} is invalid: the run has already made "
            f"{done} iterations (expected an integer >= {done})"
        )
    return changes


def apply_changes(saved: DictConfig, changes: dict[str, tuple[Any, Any]]) -> DictConfig:
    """A copy of ``saved`` with each key set to its new value."""
    cfg = OmegaConf.create(OmegaConf.to_container(saved, resolve=True))
    for key, (_, new) in changes.items():
        OmegaConf.update(cfg, key, new, merge=False)
    return cfg
