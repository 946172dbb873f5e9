"""The samples study: paid measurements to reach the compiler and the optimum, per agent.

On a real chip every measurement is a compile-and-run, so what an agent costs a user is
the number of paid measurements it needs to reach a given quality. For each problem of the
plan (``configs/study/samples.yaml``: a hardware model and a workload) every agent runs

* ``scratch``: from its own default start (``agent.start`` as its config has it);
* ``native``: from the native compiler's map (``agent.start=native``; every agent with a
  start, so not ``random``);
* ``finetune``: EGRL started from the finished EGRL scratch run (seed ``finetune.seed``) on
  another workload of the same hardware model (``init_from=``; :func:`source_workload`),
  its pretraining not counted: a stage after the scratch runs.

Layout::

    OUT/<hwmodel>-<workload>/<mode>/<agent>/seed<k>/     one run (egrl-train's directory)
    OUT/<hwmodel>-<workload>/optimum.json               the optimum's cache

Per run the paid measurements (``iterations``) when the best speedup first reaches each
level: the native compiler (1.0x), 99% and 99.9% of the reference (the proven optimum;
where it is unknown or unproven, the best value the solver or any run found, said so). A
level is read at generation ends, so a run's samples are those paid by the end of the
generation that reached it; a run that never reaches it counts as never (+inf). EGRL from
scratch is tested against every other row with a two-sided Mann-Whitney U on the samples
to 99% of the reference (never = +inf, i.e. on ranks).
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.aggregate.optimum import optimum_speedups
from egrl.runs import Run, load_config
from studies.render import left_out, markdown_table, plot_median_curves, reproduce
from studies.runner import Page, RunSpec, StudyError, hydra_quote, read_runs
from studies.stats import (
    REACH_TOLERANCE,
    best_known,
    compare,
    format_samples,
    format_share,
    median_range,
    samples_to_level,
)

log = logging.getLogger(__name__)

SECTION = "samples"
#: the modes, in launch and table order
MODES = ("scratch", "native", "finetune")
#: the agents in table order (others after them)
AGENT_ORDER = ("egrl", "ea", "pg", "sa", "ga", "random", "greedy-dp", "nevergrad")
#: agents without ``agent.start`` (no ``native`` row)
NO_START = frozenset({"random"})
#: agents that need an optional package, and the package
OPTIONAL = {"nevergrad": "nevergrad"}
#: level names, in table order; their speedups are :func:`levels`
LEVEL_NAMES = ("compiler", "99%", "99.9%")
#: the level EGRL from scratch is tested on
TEST_LEVEL = "99%"
#: line style of each mode in the figures
MODE_STYLE = {"scratch": "-", "native": "--", "finetune": ":"}


@dataclass(frozen=True)
class Problem:
    """One hardware model and one workload of the study."""

    hwmodel: str
    workload: str

    @property
    def key(self) -> str:
        """Directory name: ``nnpi-resnet50``."""
        return f"{self.hwmodel}-{self.workload}"

    @property
    def label(self) -> str:
        return f"{self.hwmodel}/{self.workload}"


def parse_problem(text: str, targets: Sequence[str]) -> Problem:
    """``"nnpi/resnet50"`` -> :class:`Problem`; ``ValueError`` naming what is wrong."""
    hwmodel, sep, workload = text.partition("/")
    if not sep or not workload or "/" in workload:
        raise ValueError(f"problem {text!r}: expected HWMODEL/WORKLOAD, e.g. nnpi/resnet50")
    if hwmodel not in targets:
        raise ValueError(f"problem {text!r}: hardware model {hwmodel!r} not in {sorted(targets)}")
    return Problem(hwmodel, workload)


def problems_of(cfg: DictConfig) -> list[Problem]:
    """The plan's problems; a bad one or a bad mode ends the study with one line."""
    unknown = sorted(set(cfg.modes) - set(MODES))
    try:
        if unknown:
            raise ValueError(f"modes {unknown}: expected some of {list(MODES)}")
        return [parse_problem(str(p), list(cfg.targets)) for p in cfg.problems]
    except ValueError as err:
        raise StudyError(f"samples: {err}") from err


def installed_agents(agents: Sequence[str]) -> list[str]:
    """``agents`` without those whose optional package is missing (logged)."""
    kept = []
    for agent in agents:
        package = OPTIONAL.get(agent)
        if package and importlib.util.find_spec(package) is None:
            log.warning("agent %s left out: package %s is not installed", agent, package)
            continue
        kept.append(agent)
    return kept


def source_workload(
    problem: Problem, problems: Sequence[Problem], sources: Mapping[str, str]
) -> str | None:
    """The workload ``problem``'s fine-tuned EGRL starts from, or None when the study has none.

    ``sources[workload]`` when that workload is in the study on the same hardware model,
    else the first other workload of that hardware model in the study.
    """
    others = [p.workload for p in problems if p.hwmodel == problem.hwmodel and p != problem]
    preferred = sources.get(problem.workload)
    if preferred in others:
        return preferred
    return others[0] if others else None


# ------------------------------------------------------------------ plan
def run_path(problem: Problem, mode: str, agent: str, seed: int) -> str:
    """Where one run of the study lives, under its output."""
    return f"{problem.key}/{mode}/{agent}/seed{seed}"


def mode_specs(
    cfg: DictConfig, problem: Problem, mode: str, agents: Sequence[str], extra: Sequence[str] = ()
) -> list[RunSpec]:
    """``agents x seeds`` runs of one problem in one mode."""
    base = (*cfg.targets[problem.hwmodel], f"workload.name={problem.workload}")
    return [
        RunSpec(f"{problem.key}/{mode}/{agent}", seed, (*base, f"agent={agent}", *extra))
        for agent in agents
        for seed in range(cfg.seeds)
    ]


def finetune_specs(
    cfg: DictConfig, out: Path, problem: Problem, problems: Sequence[Problem]
) -> list[RunSpec]:
    """EGRL fine-tuned from the scratch EGRL run of another workload of the same target."""
    src = source_workload(problem, problems, cfg.finetune.sources)
    if src is None:
        return []
    source = run_path(Problem(problem.hwmodel, src), "scratch", "egrl", cfg.finetune.seed)
    init = f"init_from={hydra_quote(str((out / source).resolve()))}"
    specs = mode_specs(cfg, problem, "finetune", ["egrl"], [f"budget={cfg.budget}", init])
    return [RunSpec(s.group, s.seed, s.overrides, after=source) for s in specs]


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """Two stages: every ``scratch`` and ``native`` run, then every ``finetune`` run (whose
    sources are ``scratch`` runs)."""
    problems = problems_of(cfg)
    agents = installed_agents(list(cfg.agents))
    budget = f"budget={cfg.budget}"
    first: list[RunSpec] = []
    for problem in problems:
        if "scratch" in cfg.modes:
            first += mode_specs(cfg, problem, "scratch", agents, [budget])
        if "native" in cfg.modes:
            started = [a for a in agents if a not in NO_START]
            first += mode_specs(cfg, problem, "native", started, [budget, "agent.start=native"])
    yield first
    if "finetune" in cfg.modes and "egrl" in agents:
        yield [s for p in problems for s in finetune_specs(cfg, Path(out), p, problems)]


# ------------------------------------------------------------------ analysis
def samples_to(run: Run, level: float) -> float:
    """Paid measurements when the run's best speedup first reached ``level`` (inf: never)."""
    return samples_to_level(run.iterations, run.best_speedup, level, rtol=REACH_TOLERANCE)


def cached_share(run: Run) -> float:
    """Share of the run's proposals answered without a paid measurement (NaN: unknown)."""
    try:
        proposals = float(run.last_row.get("proposals", "nan"))
    except (TypeError, ValueError):
        return math.nan
    if not proposals > 0:
        return math.nan
    return 1.0 - float(run.iterations[-1]) / proposals


@dataclass
class Row:
    """One agent in one mode on one problem; arrays over its ``S`` runs.

    Attributes:
        samples: level name -> paid measurements to reach it ``[S]`` (inf: never).
        final: best speedup at the end ``[S]``.
        cached: share of proposals answered from the cache ``[S]``.
        test: EGRL from scratch against this row on the samples to 99%: ``(U, p, share of
            pairs where EGRL got there first)``; None for EGRL from scratch itself.
    """

    agent: str
    mode: str
    start: str
    runs: list[Run]
    samples: dict[str, np.ndarray]
    final: np.ndarray
    cached: np.ndarray
    test: tuple[float, float, float] | None = None

    @property
    def label(self) -> str:
        return self.agent if self.mode == "scratch" else f"{self.agent} ({self.start})"


@dataclass
class ProblemSamples:
    """The study's result on one problem.

    Attributes:
        reference: the speedup the percentage levels are of.
        reference_text: what it is (``the proven optimum`` ...).
        levels: level name -> speedup.
        notes: run directories left out and why.
    """

    problem: Problem
    reference: float
    reference_text: str
    levels: dict[str, float]
    budget: int
    rows: list[Row]
    notes: list[str] = field(default_factory=list)


def levels(reference: float) -> dict[str, float]:
    """Level name -> speedup: the native compiler, 99% and 99.9% of ``reference``."""
    return {"compiler": 1.0, "99%": 0.99 * reference, "99.9%": 0.999 * reference}


def start_label(run: Run, mode: str) -> str:
    """What the run started from: its ``agent.start``, or ``from <workload>`` when fine-tuned."""
    if mode == "finetune":
        source = run.config.get("init_from")
        try:
            return f"from {load_config(source).workload}"
        except (OSError, TypeError, ValueError):
            return f"from {Path(str(source)).name}"
    return str(run.config.get("agent.start", "-"))


def make_row(agent: str, mode: str, runs: Sequence[Run], level: Mapping[str, float]) -> Row:
    """One row: its runs by seed, their samples to every level, finals and cache shares."""
    runs = sorted(runs, key=lambda r: r.seed)
    return Row(
        agent=agent,
        mode=mode,
        start=start_label(runs[0], mode),
        runs=list(runs),
        samples={k: np.array([samples_to(r, v) for r in runs]) for k, v in level.items()},
        final=np.array([r.final_speedup for r in runs]),
        cached=np.array([cached_share(r) for r in runs]),
    )


def reference_of(runs: Sequence[Run], info) -> tuple[float, str]:
    """The speedup the percentage levels are of, and what it is (:func:`best_known`)."""
    finals = [r.final_speedup for r in runs]
    optimum = info.speedup if info is not None else None
    value, source = best_known(optimum, bool(info is not None and info.proven), finals)
    if source == "proven":
        if max(finals) > value * (1 + 1e-6):
            log.warning(
                "%s: a run found %.6f above the proven optimum %.6f",
                info.workload,
                max(finals),
                value,
            )
        return value, "the proven optimum"
    if source == "solver":
        return value, f"the best known value (the solver's, {info.tag}; not proven)"
    if source == "run":
        return value, "the best known value (a run's, above the solver's unproven answer)"
    if source == "compiler":
        return value, "the native compiler's map (no run and no solver beat it)"
    return value, "the best value any run found (no optimum known)"


def _agent_rank(agent: str) -> int:
    return AGENT_ORDER.index(agent) if agent in AGENT_ORDER else len(AGENT_ORDER)


def add_tests(rows: Sequence[Row], level: str = TEST_LEVEL) -> None:
    """Set every row's :attr:`Row.test`: EGRL from scratch against it on ``level``."""
    egrl = next((r for r in rows if r.agent == "egrl" and r.mode == "scratch"), None)
    if egrl is None:
        return
    for row in rows:
        if row is not egrl:
            row.test = compare(egrl.samples[level], row.samples[level])


def rows_by_mode(out: Path, problem: Problem, modes: Sequence[str]) -> tuple[dict, list[str]]:
    """``(mode, agent) -> finished runs`` of ``problem`` and the directories left out."""
    by_row: dict[tuple[str, str], list[Run]] = {}
    notes: list[str] = []
    for mode in modes:
        found = read_runs(out / problem.key / mode)
        notes += [str(p) for p in found.problems]
        for run in found.runs:
            by_row.setdefault((mode, run.agent), []).append(run)
    return by_row, notes


def problem_samples(cfg: DictConfig, out: Path, problem: Problem) -> ProblemSamples | None:
    """Every row of ``problem`` at the largest budget among its runs; None without runs."""
    by_row, notes = rows_by_mode(out, problem, list(cfg.modes))
    if not by_row:
        log.warning("%s: no finished run", problem.label)
        return None
    budget = max(r.budget for rs in by_row.values() for r in rs)
    for key, rs in by_row.items():
        notes += [f"{r.path}: budget {r.budget}, not {budget}" for r in rs if r.budget != budget]
        by_row[key] = [r for r in rs if r.budget == budget]
    every = [r for rs in by_row.values() for r in rs]
    opt = optimum_speedups(every, cache_dir=out / problem.key, time_limit_s=cfg.optimum_time_s)
    reference, text = reference_of(every, opt.get(problem.workload))
    level = levels(reference)
    order = {(m, a): (MODES.index(m), _agent_rank(a)) for m, a in by_row}
    rows = [
        make_row(a, m, rs, level)
        for (m, a), rs in sorted(by_row.items(), key=lambda kv: order[kv[0]])
        if rs
    ]
    add_tests(rows)
    return ProblemSamples(problem, reference, text, level, budget, rows, notes)


def analyse(cfg: DictConfig, out: Path) -> list[ProblemSamples]:
    """Read every problem's runs, solve (or read) its optimum and summarise each row."""
    results = [problem_samples(cfg, Path(out), p) for p in problems_of(cfg)]
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ report
def _test_text(test: tuple[float, float, float] | None) -> str:
    if test is None:
        return "-"
    u, p, first = test
    if not math.isfinite(p):
        return "-"
    return f"U = {u:.1f}, p = {p:.3f}; EGRL first in {100 * first:.0f}% of pairs"


def table_markdown(result: ProblemSamples) -> str:
    """One row per agent and start: samples to each level, final speedup, the test."""
    ref = result.reference
    header = (
        "agent",
        "start",
        "runs",
        "to the compiler (1.0x)",
        f"to 99% ({0.99 * ref:.4f}x)",
        f"to 99.9% ({0.999 * ref:.4f}x)",
        f"final speedup (of {ref:.4f}x)",
        "proposals from cache",
        "EGRL from scratch against it (to 99%)",
    )
    rows = [
        (
            row.agent,
            row.start,
            len(row.runs),
            *(format_samples(row.samples[name]) for name in LEVEL_NAMES),
            median_range(row.final),
            format_share(row.cached, center="median"),
            _test_text(row.test),
        )
        for row in result.rows
    ]
    return markdown_table(header, rows, align="llrrrrrrl")


def plot_problem(result: ProblemSamples, path: str | Path) -> Path:
    """One figure per problem: every row's median curve; colour per agent, style per mode."""
    colours = {a: f"C{i % 10}" for i, a in enumerate(dict.fromkeys(r.agent for r in result.rows))}
    series = [(r.label, r.runs, MODE_STYLE[r.mode], colours[r.agent]) for r in result.rows]
    references = {"native compiler": 1.0, f"reference ({result.reference:.4f}x)": result.reference}
    return plot_median_curves(series, references, result.problem.label, path)


def figure_name(problem: Problem) -> str:
    """``samples_<hwmodel>_<workload>.png``."""
    return f"samples_{problem.hwmodel}_{problem.workload}.png"


def intro(seeds: int, finetune_seed: int, machine: str) -> str:
    return (
        f"Every agent from its default start, from the native compiler's map "
        f"(`agent.start=native`), and EGRL fine-tuned from the EGRL run (seed {finetune_seed}) "
        f"on another workload of the same target (`init_from=`, its pretraining not counted); "
        f"{seeds} seed{'s' if seeds != 1 else ''} per row, one budget of paid measurements"
        + (f", on {machine}" if machine else "")
        + ". A cell is the paid measurements (`iterations`) by the end of the generation in "
        "which the run's best speedup first reached the level: median [min-max] over the runs "
        "that reached it (how many did). The percentage levels are of the problem's reference, "
        "named above its table. `proposals from cache`: median share of a run's proposals "
        "answered without paying (maps measured before). EGRL from scratch against every other "
        "row: two-sided Mann-Whitney U over seeds on the samples to 99%, a run that never got "
        "there counted as +infinity (ranks); `EGRL first`: the share of pairs of runs in which "
        "EGRL got there with fewer samples (ties half)."
    )


def problem_markdown(result: ProblemSamples, figure: str) -> list[str]:
    """A problem's heading, table, figure and the runs left out."""
    lines = [
        f"### {result.problem.label} (budget {result.budget}; reference "
        f"{result.reference:.4f}x, {result.reference_text})",
        "",
        table_markdown(result),
        "",
        f"![{result.problem.label}]({figure})",
        "",
    ]
    lines += left_out(result.notes)
    return lines


def render(cfg: DictConfig, result: list[ProblemSamples], page: Page) -> str:
    """The ``samples`` section; one figure per problem (:func:`figure_name`)."""
    lines = [
        "## Samples: paid measurements to reach the compiler and the optimum",
        "",
        intro(cfg.seeds, cfg.finetune.seed, page.machine),
        "",
    ]
    for r in result:
        png = plot_problem(r, page.figure(figure_name(r.problem)))
        lines += problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
