"""The one runner of every study: plan, launch, collect, analyse, render.

A study is a module of this package with three parts::

    SECTION = "ablation"                       # its section of the results page
    def plan(cfg, out) -> Iterator[list[RunSpec]]   # the runs, stage by stage
    def analyse(cfg, out) -> Result                 # numbers only, from the run directories
    def render(cfg, result, page: Page) -> str      # its markdown section (and figures)

``cfg`` is the study's plan, read from ``configs/study/NAME.yaml`` (and the ``KEY=VALUE``
overrides typed after the study's name). Every run is an ``egrl-train`` run: the runner
skips the runs that have finished, launches the rest as Hydra multiruns (one per group of
runs that differ only in their seed) through the launcher the plan names (joblib on one
machine; the Ray or Slurm launcher on a cluster), then reads the run directories back.
Stages run in order: a later stage may read what an earlier one produced (a pretrained
policy, say), since :func:`plan` is a generator resumed after each stage has run. A step
that no ``egrl-train`` run can do (the multi-workload pretraining of ``egrl-transfer
pretrain``) is a :class:`CommandSpec` of its stage: one command, skipped once done.
"""

from __future__ import annotations

import importlib
import logging
import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from omegaconf import DictConfig, OmegaConf

from egrl.cli.overrides import own_overrides
from egrl.rundir import RunDir
from egrl.runs import Run, RunSet, collect_runs, load_run
from studies import render as rendering

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
PLAN_DIR = ROOT / "configs" / "study"
#: the file in a study's output directory that records how its runs were planned
RECORD_FILE = "study.yaml"
#: what every plan starts from: where its section and figures go, how its runs are
#: launched (Hydra launcher overrides) and the overrides every run gets (the plan's
#: ``overrides``, then the user's ``set``)
DEFAULTS = {
    "page": "docs/results.md",
    "figures": None,  # None: a folder "figures" beside the page
    "launcher": ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"],
    "groups_at_once": 1,  # groups launched side by side (each with the launcher's n_jobs)
    "overrides": ["threads=1", "progress=false"],
    "set": [],  # more overrides for every run, typed as set='[key=value,...]'
}


class StudyError(SystemExit):
    """A plan, an override or the runs of a study cannot be used: ``python -m studies``
    answers with this one line and exit status 2."""


# ------------------------------------------------------------------ plans
def study_names() -> list[str]:
    """Every study with a plan under ``configs/study/`` (presets included)."""
    return sorted(p.stem for p in PLAN_DIR.glob("*.yaml"))


def load_plan(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The plan ``configs/study/NAME.yaml`` (or the YAML file ``NAME``, ending in
    ``.yaml``) with ``overrides`` (``key=value``) applied.

    Every plan starts from :data:`DEFAULTS`; one may start from another plan instead with
    ``extends: OTHER`` (a smoke preset, say): the other's keys first, then its own.
    ``study`` names the module that runs it (default: the plan's own name). Lists are
    replaced, not appended to, by an override.
    """
    path = Path(name) if name.endswith(".yaml") else PLAN_DIR / f"{name}.yaml"
    if not path.exists():
        raise StudyError(f"no study {name!r} (known: {', '.join(study_names())})")
    cfg = OmegaConf.load(path)
    base = cfg.pop("extends", None)
    cfg = OmegaConf.merge(load_plan(str(base)) if base else DEFAULTS, cfg)
    if base is None:
        cfg.setdefault("study", path.stem)
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise StudyError(f"{bad[0]!r} is not KEY=VALUE")
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    at_once = cfg.get("groups_at_once")
    if not isinstance(at_once, int) or isinstance(at_once, bool) or at_once < 1:
        raise StudyError(f"groups_at_once={at_once} is invalid: expected an integer >= 1")
    return cfg


def study_module(cfg: DictConfig) -> ModuleType:
    """The module that runs the plan: ``mcm-study`` -> ``studies.mcm_study``; a dotted
    name (``mylab.my_study``) is imported as it is, so a study can live outside this
    package."""
    name = str(cfg.study)
    return importlib.import_module(name if "." in name else f"studies.{name.replace('-', '_')}")


# ------------------------------------------------------------------ runs
@dataclass(frozen=True)
class RunSpec:
    """One ``egrl-train`` run of a study.

    Attributes:
        group: its group's directory under the study's output, e.g. ``nnpi-resnet101/ea``;
            the run lives in ``GROUP/seedS``.
        seed: the run's seed.
        overrides: the ``egrl-train`` overrides of the run, the seed and Hydra's own aside.
        after: the path (under the study's output) of a run that must have finished
            first, e.g. the run it fine-tunes from.
    """

    group: str
    seed: int
    overrides: tuple[str, ...]
    after: str | None = None

    @property
    def path(self) -> str:
        return f"{self.group}/seed{self.seed}"


@dataclass(frozen=True)
class CommandSpec:
    """A step of a stage that is not an ``egrl-train`` run: one command, run once.

    Attributes:
        path: its directory under the study's output (named in the log).
        argv: the command line.
        done: the file (under the study's output) that exists once the step has finished;
            the step is skipped then.
    """

    path: str
    argv: tuple[str, ...]
    done: str


def stopped(run: Run) -> bool:
    """The run ended before its budget by itself: it ran out of new maps to measure, or
    its wall-clock limit (``time_limit_s``) was reached."""
    best = RunDir(run.path).read_best_map()
    return bool(best and best.get("stopped_early"))


def finished(path: str | Path) -> bool:
    """The run at ``path`` spent its budget, or stopped by itself (no new map to measure,
    or its wall-clock limit)."""
    try:
        run = load_run(path)
    except (OSError, ValueError):
        return False
    return run.complete or stopped(run)


def read_runs(*roots: str | Path) -> RunSet:
    """Every run under ``roots`` (those that do not exist are skipped); runs that stopped
    by themselves count as finished."""
    roots = [Path(r) for r in roots if Path(r).is_dir()]
    if not roots:
        return RunSet([], [])
    found = collect_runs(roots)
    ended = [r for r in found.incomplete if stopped(r)]
    left = {r.path for r in ended}
    problems = [p for p in found.problems if Path(p.path) not in left]
    return RunSet(
        [*found.runs, *ended],
        problems,
        [r for r in found.incomplete if r.path not in left],
        found.failed,
    )


def script_command(chip: DictConfig) -> str:
    """A plan's chip as a command line: its ``command``, else this interpreter running its
    ``script`` (relative to the repository root) with its ``args``."""
    if chip.get("command"):
        return str(chip.command)
    script = ROOT / str(chip.script)
    return shlex.join([sys.executable, str(script), *(str(a) for a in chip.get("args", []))])


def script_label(chip: DictConfig) -> str:
    """A plan's chip as a report names it (the script as the plan names it, no interpreter)."""
    if chip.get("command"):
        return str(chip.command)
    return shlex.join([str(chip.script), *(str(a) for a in chip.get("args", []))])


def hydra_quote(value: str) -> str:
    """``value`` as one quoted Hydra override value (commas, spaces and ``=`` kept)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def train_command(
    cfg: DictConfig, out: Path, group: str, seeds: Sequence[int], overrides: Sequence[str]
) -> list[str]:
    """The ``egrl-train -m`` command of one group of runs (they differ only in the seed).

    The plan's overrides of sections the group's agent does not own (EGRL's policy,
    population and learner, for a plan that runs other agents too) are left out."""
    every = [*overrides, *cfg.get("overrides", []), *cfg.get("set", [])]
    return [
        sys.executable,
        "-m",
        "egrl.cli.train",
        "-m",
        *own_overrides(every),
        f"seed={','.join(str(s) for s in seeds)}",
        "continue_runs=true",
        *cfg.get("launcher", []),
        f"hydra.sweep.dir={out / group}",
        "hydra.sweep.subdir=seed${seed}",
    ]


def run_command(out: Path, spec: CommandSpec) -> int:
    """Run ``spec`` unless it is done; returns 1 if it failed, else 0."""
    if (out / spec.done).exists():
        return 0
    return run_logged(spec.path, spec.argv, "the command")


def launch(cfg: DictConfig, out: Path, specs: Iterable[RunSpec | CommandSpec]) -> int:
    """Run the unfinished ``specs``; returns how many groups (or commands) failed.

    Commands run first, in order; a run whose ``after`` has not finished is skipped with
    a warning. The groups run ``groups_at_once`` at a time (the plan's; 1: one after the
    other): with ``n_jobs`` runs per group, a group's last seeds leave no core idle while
    the next group waits.
    """
    specs = list(specs)
    failures = sum(run_command(out, s) for s in specs if isinstance(s, CommandSpec))
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for spec in specs:
        if isinstance(spec, CommandSpec) or finished(out / spec.path):
            continue
        if spec.after is not None and not finished(out / spec.after):
            log.warning("%s skipped: %s, which it needs, has not finished", spec.path, spec.after)
            continue
        groups.setdefault((spec.group, spec.overrides), []).append(spec.seed)
    commands = [
        (group, train_command(cfg, out, group, seeds, overrides))
        for (group, overrides), seeds in groups.items()
    ]
    with ThreadPoolExecutor(max_workers=int(cfg.groups_at_once)) as pool:
        failures += sum(pool.map(lambda gc: run_logged(*gc, "egrl-train -m"), commands))
    return failures


def run_logged(label: str, argv: Sequence[str], what: str) -> int:
    """Run ``argv`` (a step of the study named ``label``), logged; 1 if it failed, else 0."""
    log.info("running %s", " ".join(shlex.quote(c) for c in argv))
    status = subprocess.run(list(argv), check=False).returncode
    if status != 0:
        log.warning("%s: %s exited with status %d", label, what, status)
        return 1
    return 0


# ------------------------------------------------------------------ the page
@dataclass
class Page:
    """Where a study's section and figures go, and how it was run.

    Attributes:
        path: the results page.
        figures: the directory of its figures.
        command: the command line that reproduces the study, quoted under its section.
        machine: the machine the report was made on.
    """

    path: Path
    figures: Path
    command: str
    machine: str = field(default_factory=rendering.machine)

    def figure(self, name: str) -> Path:
        """Where figure ``name`` (a file name) is written."""
        self.figures.mkdir(parents=True, exist_ok=True)
        return self.figures / name

    def link(self, path: str | Path) -> str:
        """``path`` as a link from the page."""
        return rendering.relative_link(path, self.path)


def command(name: str, overrides: Sequence[str]) -> str:
    """``python -m studies run NAME OVERRIDES``, quoted for a shell."""
    return " ".join(["python -m studies run", name, *(shlex.quote(o) for o in overrides)])


#: plan keys that say how runs are launched, not what they give (left out of the record)
LAUNCH_KEYS = ("launcher", "groups_at_once")
#: plan keys that pick part of the plan: a run with only these (and launch keys) adds to
#: the runs of the recorded command without changing what reproduces them
PART_KEYS = ("problems", "agents", "screens", "problem_only", "agent_problems")


def plan_key(override: str) -> str:
    """The plan key a ``KEY=VALUE`` override sets."""
    return override.split("=", 1)[0].lstrip("+~")


def record(out: Path, name: str, overrides: Sequence[str]) -> None:
    """Remember in ``OUT/study.yaml`` how the study's runs were asked for: the overrides
    that change results (not the launcher). A run of part of the plan keeps the record of
    an earlier run (adding a cell to a study does not make the study that cell)."""
    out.mkdir(parents=True, exist_ok=True)
    kept = [o for o in overrides if plan_key(o) not in LAUNCH_KEYS]
    path = out / RECORD_FILE
    if path.exists() and all(plan_key(o) in PART_KEYS for o in kept):
        return
    text = OmegaConf.to_yaml(OmegaConf.create({"name": name, "overrides": kept}))
    path.write_text(text, encoding="utf-8")


def recorded_command(out: Path, name: str, overrides: Sequence[str]) -> str:
    """The command that made the runs in ``out`` (from its record), else this one's."""
    path = out / RECORD_FILE
    if path.exists():
        rec = OmegaConf.load(path)
        return command(str(rec.name), [str(o) for o in rec.overrides])
    return command(name, overrides)


# ------------------------------------------------------------------ entry points
def run_stages(cfg: DictConfig, out: Path) -> int:
    """Launch every stage of the plan in order; returns the groups with failed runs."""
    module = study_module(cfg)
    failures = 0
    stages: Iterator[list[RunSpec | CommandSpec]] = module.plan(cfg, out)
    for i, stage in enumerate(stages):
        log.info("stage %d: %d runs", i + 1, len(stage))
        failures += launch(cfg, out, stage)
    return failures


def report(name: str, overrides: Sequence[str] = ()) -> Path:
    """Analyse the study's runs and write its section of the page; returns the page."""
    cfg = load_plan(name, overrides)
    out = Path(cfg.out)
    module = study_module(cfg)
    figures = Path(cfg.figures) if cfg.figures else Path(cfg.page).parent / "figures"
    page = Page(Path(cfg.page), figures, recorded_command(out, name, overrides))
    result = module.analyse(cfg, out)
    text = module.render(cfg, result, page)
    source = f"python -m studies report {cfg.study}"
    if getattr(module, "SECTION", None) is None:  # the page's head: the study writes it all
        page.path.parent.mkdir(parents=True, exist_ok=True)
        page.path.write_text(text + rendering.other_sections(page.path))
        return page.path
    return rendering.write_section(module.SECTION, text, source, page.path)


def run(name: str, overrides: Sequence[str] = ()) -> int:
    """Run the study's unfinished runs, then its report; returns the groups with failures."""
    cfg = load_plan(name, overrides)
    out = Path(cfg.out)
    record(out, name, overrides)
    failures = run_stages(cfg, out)
    report(name, overrides)
    return failures
