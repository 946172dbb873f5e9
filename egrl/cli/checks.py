"""``egrl-train``'s checks of what the user typed, before any work or directory is made.

:class:`CheckBeforeRun` is a Hydra callback (``hydra.callbacks`` in
``configs/train.yaml``). Hydra calls ``on_run_start`` after composing the config and
before ``run_job`` creates the run directory, and ``on_multirun_start`` before the
sweeper makes the sweep directory (``hydra/_internal/hydra.py``). A problem is printed
as one line ``egrl-train: KEY=VALUE is invalid: expected ...`` and the process exits
with status 2 (``SystemExit`` is not an ``Exception``, so Hydra's callback runner, which
turns exceptions into warnings, lets it through).
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

import hwmodels
import workloads
from egrl.agents import agent_class, make_agent, names, run_rules
from egrl.agents.egrl.init_from import check_fits, read_policy
from egrl.cli.build import env_from_config, train_config
from egrl.cli.overrides import (
    _parse,
    group_options,
    group_path,
    override_section,
    section_owners,
    swept_values,
    typed_agents,
    typed_keys,
)
from egrl.cli.resume import ResumeError, checkpoint_iterations, resume_changes, saved_config
from egrl.config import ScreenConfig, config_problems, problem
from egrl.loggers import logger_problems
from egrl.optuna_study import sweeper_problems
from egrl.runtime.base import RuntimeConfig
from egrl.screening.capability import Refusal, refusal, requested_search
from egrl.screening.earlier import EarlierRunError, as_paths, foreign_problem, read_configs
from egrl.screening.models import MODELS
from egrl.screening.rules import option_problems
from egrl.validation import ConfigError, show
from policies.snapshot import PolicyError

PROG = "egrl-train"
USAGE_ERROR = 2


def task_config(config: DictConfig) -> dict:
    """The job's part of a Hydra config (everything but ``hydra``), resolved."""
    keys = [k for k in config if k != "hydra"]
    return OmegaConf.to_container(OmegaConf.masked_copy(config, keys), resolve=True)


def missing_problems(config: DictConfig) -> list[str]:
    """One line per mandatory value (``???``) left unset, e.g. an external model's command."""
    keys = [k for k in config if k != "hydra"]
    missing = sorted(OmegaConf.missing_keys(OmegaConf.masked_copy(config, keys)))
    return [f"{key} is required: add {key}=VALUE" for key in missing]


def hwmodel_problem(hwmodel: dict) -> str | None:
    """Why the hardware model cannot be built from its name and parameters, or None."""
    name = hwmodel.get("name")
    try:
        hwmodels.make(name, **(hwmodel.get("params") or {}))
    except (ValueError, TypeError, KeyError, ImportError) as exc:
        why = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        return f"hwmodel={show(name)} is invalid: {why}"
    return None


def workload_problem(name: Any) -> str | None:
    """Why the workload cannot be loaded (missing file, unknown format or name...), or None."""
    try:
        workloads.load(name)
    except workloads.WorkloadError as exc:
        return f"workload={show(name)} is invalid: {exc}"
    return None


def init_from_problem(task: dict) -> str | None:
    """Why ``init_from`` cannot start this run's GNN policies, or None.

    The agent must have GNN policies, and the trained policy must exist and fit the
    target's decision graph (feature width, choices per head) and the run's policy sizes.
    """
    path = task.get("init_from")
    agent = (task.get("agent") or {}).get("name")
    try:
        if not agent_class(agent).accepts_init_from:
            return (
                f"init_from={path} is invalid: agent {agent!r} has no GNN policy to start "
                "from it (egrl, ea and pg have)"
            )
        hwmodel = task.get("hwmodel") or {}
        target = hwmodels.make(hwmodel.get("name"), **(hwmodel.get("params") or {})).bind(
            workloads.load(task["workload"]["name"])
        )
        policy = read_policy(path)
        check_fits(policy, int(target.graph.x.shape[1]), target.num_choices, task["policy"])
    except KeyError as exc:
        return f"agent={show(agent)} is invalid: {exc.args[0] if exc.args else exc}"
    except PolicyError as exc:
        return str(exc)
    return None


def workload_option_problems(task: dict) -> list[str]:
    """``workload.eliminate_data_movement`` must be a boolean (a typo is not "true")."""
    value = (task.get("workload") or {}).get("eliminate_data_movement", False)
    if isinstance(value, bool):
        return []
    return [f"workload.eliminate_data_movement={show(value)} is invalid: expected true or false"]


def runtime_problems(task: dict) -> list[str]:
    """The runtime's values (:class:`egrl.runtime.base.RuntimeConfig`), one line each."""
    runtime = dict(task.get("runtime") or {})
    try:
        RuntimeConfig.from_mapping(runtime)
    except ConfigError as exc:
        return exc.problems
    return []


def screen_problems(task: dict) -> list[str]:
    """The screen model's own options (``screen.trees``, ...) and its earlier runs
    (``screen.init_from``), one line each (the section's common keys are in the option
    table); what the agent cannot do with the screen is refused with one line
    (:func:`egrl.screening.capability.refusal`, with the agents that can)."""
    screen = dict(task.get("screen") or {})
    name = screen.get("name", "none")
    if name != "none" and name not in MODELS:
        return []  # an unknown model: the option table names the models
    section = dict(task.get("agent") or {})
    agent = section.get("name")
    try:
        why = refusal(
            agent_class(agent), agent, name, requested_search(screen.get("search", 0)), section
        )
    except KeyError:
        why = None  # an unknown agent is refused where the agent is built
    if why is not None:
        return [why.line() + can_hint(why, agent)]
    if name == "none":
        return []
    common = {f.name for f in fields(ScreenConfig)} - {"options"}
    options = {k: v for k, v in screen.items() if k not in common}
    problems = option_problems(name, {**dict(screen.get("options") or {}), **options})
    if not problems and not task.get("resume"):
        problems += earlier_run_problems(task)
    return problems


#: a refusal's ability -> how the agents that have it are named
CAN = {
    "screens": "agents that do",
    "has_critic": "agents with one",
    "searches_model": "agents that can",
}


def can_hint(why: Refusal, agent: str) -> str:
    """What the command line adds to a refusal: the agents that can, as their configs
    (``configs/agent/<name>.yaml``) set them up (``as configured`` where the agent is
    one of them but was configured without it)."""
    if not why.ability:
        return ""
    if why.ability == "screens":
        can = [n for n in names() if agent_class(n).screens]
    else:
        can = configured_agents(why.ability)
    how = " as configured" if agent in can else ""
    return f"{how} ({CAN[why.ability]}: {', '.join(can)})"


def configured_agents(ability: str) -> list[str]:
    """The agents that have ``ability`` (a classmethod of the agent class reading its
    ``agent`` section: ``has_critic``, ``searches_model``) as their config
    (``configs/agent/<name>.yaml``) sets them up."""
    out = []
    for name in names():
        path = group_path("agent", name)
        section = OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}
        # a config in the global package (EGRL's, which pulls in groups of its own) has
        # its agent section under ``agent``
        section = section.get("agent", section)
        if getattr(agent_class(name), ability)(section):
            out.append(name)
    return out


def earlier_run_problems(task: dict) -> list[str]:
    """``screen.init_from``: each run must exist and be of this run's target (hardware
    model and its parameters, reward), one line each."""
    problems = []
    for path in as_paths((task.get("screen") or {}).get("init_from")):
        try:
            lines = [foreign_problem(path, config, task) for config in read_configs(path)]
            line = next((line for line in lines if line is not None), None)
        except EarlierRunError as exc:
            line = str(exc)
        if line is not None:
            problems.append(line)
    return problems


def _why(exc: BaseException) -> str:
    """An exception's message (a ``KeyError``'s without its quotes)."""
    return str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)


def build_problems(task: dict, keep: bool = False) -> list[str]:
    """Why the run cannot be built, asked of the target and the agent themselves.

    The hardware model is bound to the workload (as ``egrl-info`` does: a workload that
    does not fit the target is refused here), then the agent is made on it without a run
    directory (an agent on a target it does not support, an unknown or bad agent option,
    ``+agent.chainz=4`` say, is refused here). About a second on the zoo's workloads.
    With ``keep`` the bound environment is kept for the run (:func:`egrl.cli.build.env_from_config`):
    binding a chip measures its compiler's map, which a command then measures once.
    """
    hwmodel = (task.get("hwmodel") or {}).get("name")
    workload = (task.get("workload") or {}).get("name")
    try:
        env = env_from_config(task, keep=keep)
    except workloads.WorkloadError as exc:
        return [f"workload={show(workload)} is invalid: {exc}"]
    except (ValueError, TypeError, KeyError, ImportError, NotImplementedError) as exc:
        return [f"workload={show(workload)} is invalid on hwmodel={show(hwmodel)}: {_why(exc)}"]
    agent = (task.get("agent") or {}).get("name")
    try:
        make_agent(env, train_config(task), None)
    except ConfigError as exc:
        return list(exc.problems)
    except (ValueError, TypeError, KeyError, ImportError, PolicyError) as exc:
        why = _why(exc)
        return [
            why if why.startswith(f"agent {agent!r}:") else f"agent={show(agent)} is invalid: {why}"
        ]
    return []


def run_problems(config: DictConfig) -> list[str]:
    """Every problem of a single run's config (values, workload, resume), one line each.

    With ``resume=DIR`` the workload checked is the saved run's, and what the typed keys
    change is checked once the values themselves are valid.
    """
    task = task_config(config)
    rules = run_rules(str((task.get("agent") or {}).get("name", "egrl")))
    problems = missing_problems(config) + config_problems(task, rules)
    if not problems:
        line = hwmodel_problem(task.get("hwmodel") or {})
        problems += [line] if line is not None else []
    workload = OmegaConf.select(config, "workload.name")
    if task.get("resume"):
        run_dir = Path(str(task["resume"]))
        typed = typed_keys(config.hydra.overrides.task)
        try:
            saved = saved_config(run_dir)
            if not problems:
                resume_changes(saved, config, typed, checkpoint_iterations(run_dir))
            workload = OmegaConf.select(saved, "workload.name")
        except ResumeError as exc:
            problems.append(str(exc))
            workload = None
    if workload is not None:
        line = workload_problem(workload)
        if line is not None:
            problems.append(line)
    problems += workload_option_problems(task) + runtime_problems(task) + screen_problems(task)
    problems += logger_problems(task.get("logger"))
    if not problems and task.get("init_from") and not task.get("resume"):
        line = init_from_problem(task)
        if line is not None:
            problems.append(line)
    if not problems and not task.get("resume"):
        problems += build_problems(task, keep=True)
    return problems


def sweep_problems(config: DictConfig) -> list[str]:
    """Every problem of a sweep: its fixed values and each value a swept key takes."""
    task = task_config(config)
    rules = run_rules()  # a sweep may sweep the agent: any agent's rules
    problems = config_problems(task, rules) + logger_problems(task.get("logger"))
    sweeps = [*config.hydra.overrides.task]
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    sweeps += [f"{k}={v}" for k, v in params.items()]
    for key, value in swept_values(sweeps):
        if key == "workload.name":
            line = workload_problem(value)
        else:
            line = problem(key, value, rules)
        if line is not None and line not in problems:
            problems.append(line)
    problems += optuna_sweeper_problems(config)
    if not problems:
        problems += job_build_problems(config)
    return problems


#: the project's Optuna sweeper (``hydra/sweeper=optuna-sqlite``)
OPTUNA_SWEEPER = "hydra_plugins.egrl_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def optuna_sweeper_problems(config: DictConfig) -> list[str]:
    """The project's Optuna sweeper's settings (sampler, trials, direction, storage), one
    line each; none for another sweeper."""
    sweeper = OmegaConf.select(config, "hydra.sweeper")
    if sweeper is None or OmegaConf.select(sweeper, "_target_") != OPTUNA_SWEEPER:
        return []
    settings = OmegaConf.to_container(sweeper, resolve=True)
    return sweeper_problems(settings, str(OmegaConf.select(config, "hydra.sweep.dir")))


#: distinct jobs of a sweep (seeds aside) whose target and agent are built before it starts
MAX_JOBS_BUILT = 32


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every job of a sweep of Hydra's basic sweeper, as it will launch
    them; None for another sweeper (e.g. Optuna's, whose jobs are chosen as it goes)."""
    target = str(OmegaConf.select(config, "hydra.sweeper._target_") or "")
    if not target.endswith("BasicSweeper") or not GlobalHydra.instance().is_initialized():
        return None
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + [*config.hydra.overrides.task]
    loader = GlobalHydra.instance().config_loader()
    overrides = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
    return BasicSweeper.split_arguments(overrides, None)[0]


def job_build_problems(config: DictConfig) -> list[str]:
    """:func:`build_problems` of every distinct job of a sweep, and the runs its
    ``screen.init_from`` names (jobs that differ only in their seed are built once; the
    first :data:`MAX_JOBS_BUILT` of them), each line once."""
    try:
        jobs = sweep_jobs(config)
    except HydraException:
        return []  # Hydra reports its own errors when it composes the jobs
    if not jobs:
        return []
    loader = GlobalHydra.instance().config_loader()
    problems: list[str] = []
    seen: set[str] = set()
    for job in jobs:
        try:
            task = task_config(loader.load_sweep_config(config, list(job)))
        except HydraException:
            return problems
        if task.get("resume"):
            continue
        key = json.dumps(
            {k: v for k, v in task.items() if k != "seed"}, sort_keys=True, default=str
        )
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_JOBS_BUILT:
            break
        for line in earlier_run_problems(task) + build_problems(task):
            if line not in problems:
                problems.append(line)
    return problems


#: config groups whose option typed on the command line is checked before Hydra composes
#: (Hydra itself would fail with several lines and exit status 1)
CHECKED_GROUPS = ("screen", "logger")


def group_problems(args: list[str], groups: tuple[str, ...] = CHECKED_GROUPS) -> list[str]:
    """One line per ``GROUP=VALUE`` argument (each value of a sweep) naming an option that
    ``configs/GROUP/`` does not have, for the groups of ``groups``."""
    candidates = [a for a in args if a.lstrip("+~").split("=", 1)[0] in groups]
    try:
        overrides = _parse(candidates)
    except HydraException:
        return []  # Hydra reports its own syntax errors
    problems = []
    for o in overrides:
        if o.is_delete():
            continue
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        options = group_options(o.key_or_group)
        for value in values:
            if str(value) not in options:
                problems.append(
                    f"{o.key_or_group}={show(value)} is invalid: expected one of "
                    + ", ".join(sorted(options))
                )
    return problems


def section_problems(args: list[str]) -> list[str]:
    """One line per argument that sets a section the typed agent (``agent=NAME``, one
    value) does not own: ``learner.batch_size=8`` with ``agent=sa`` (EGRL's policy,
    population and learner are EGRL's, ``egrl/agents/egrl/config.py``)."""
    agent = typed_agents(args)
    if agent is None or "," in agent:
        return []  # the default agent, a preset's or a sweep's: Hydra composes each
    owners = section_owners()
    problems = []
    for arg in args:
        section = override_section(arg)
        if section in owners and agent not in owners[section]:
            problems.append(
                f"{arg} is invalid: agent {agent!r} has no {section} section "
                f"(agents with one: {', '.join(owners[section])})"
            )
    return problems


def exit_on(problems: list[str]) -> None:
    """Print each problem as ``egrl-train: ...`` on stderr and exit with status 2, if any."""
    if problems:
        for line in problems:
            print(f"{PROG}: {line}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


class CheckBeforeRun(Callback):
    """Hydra callback: refuse a bad config before Hydra makes any directory."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        exit_on(run_problems(config))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        exit_on(sweep_problems(config))
