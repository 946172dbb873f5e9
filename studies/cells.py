"""Cells of a study of agents and screens on problems, shared by the studies of that shape.

A cell is one agent with one screen on one problem, run for ``seeds`` seeds at one
``budget`` of paid measurements in ``OUT/<problem>/<agent>/<screen>/seed<S>``. The plan
(``configs/study/screening.yaml`` and ``model-search.yaml``) names the problems, agents
and screens as egrl-train overrides. A problem may add screens of its own
(``problem_screens``: the NNP-I model as a free prior on the chip, a model pre-trained on
the chip's other workloads), and a screen may be limited to some agents
(``screen_agents``: the learner's critic needs a learner); a costly problem may run only
some agents and screens (``problem_only``). A pre-trained screen (``pretrain.screens``)
fits on the unscreened runs of the same agent and seed on the plan's
``pretrain.problems`` (other workloads of the same chip), which run in the first stage;
the pre-trained runs follow in the second. Studies of agents alone (the peers' shape,
:mod:`studies.agent_runs`) read their plan's problems and agents here too.

Each run is read against the problem's reference: the optimum of the cost model
(``env.optimum()``, cached in ``OUT/<problem>/optimum.json``) where the solver proves it,
else the best known value (solver or any run of the problem). A cell's figures are the
paid measurements to reach the native compiler and ``level`` of the reference, the final
best speedup, the model's rank correlation with the measured reward and the wall time per
paid measurement; each screen is tested against ``none`` of the same agent (two-sided
Mann-Whitney U; never reached ranks last).
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from egrl.rundir import RunDir
from egrl.runs import Run
from studies import prior_map
from studies.prior_map import PriorReading, prior_line, read_prior
from studies.render import markdown_table, plot_median_curves
from studies.runner import (
    CommandSpec,
    RunSpec,
    StudyError,
    hydra_quote,
    read_runs,
    script_command,
    script_label,
)
from studies.stats import (
    best_known,
    compare,
    format_mean_std,
    format_samples,
    median_range,
    samples_to_level,
    solver_optimum,
)

log = logging.getLogger(__name__)

#: the screen every other screen is compared with
REFERENCE = "none"


# ------------------------------------------------------------------ plan
def group(problem: str, agent: str, screen: str) -> str:
    """A cell's directory under the study's output: ``<problem>/<agent>/<screen>``."""
    return f"{problem}/{agent}/{screen}"


def chip_of(cfg: DictConfig, problem: str) -> DictConfig:
    """The chip an ``external`` problem runs on: the plan's, with the problem's own
    ``args`` where ``problem_chips`` gives them (a variant of the same script)."""
    args = (cfg.get("problem_chips") or {}).get(problem)
    if args is None:
        return cfg.chip
    return OmegaConf.merge(cfg.chip, {"args": list(args)})


def problem_chips_text(cfg: DictConfig) -> str:
    """``; <problem>'s: `<command>``` for each planned problem that runs on a chip of its
    own (``problem_chips``), for a section's sentence on the chips."""
    return "".join(
        f"; {problem}'s: `{script_label(chip_of(cfg, problem))}`"
        for problem in (cfg.get("problem_chips") or {})
        if problem in cfg.problems
    )


def problem_overrides(cfg: DictConfig, problem: str) -> tuple[str, ...]:
    """The egrl-train overrides of a problem; an ``external`` one gets its chip."""
    overrides = tuple(cfg.problem_overrides[problem])
    if "hwmodel=external" in overrides:
        command = script_command(chip_of(cfg, problem))
        overrides += (f"hwmodel.params.command={hydra_quote(command)}",)
    return overrides


def overrides_of(cfg: DictConfig, problem: str) -> tuple[str, ...]:
    """The problem's egrl-train overrides (:func:`problem_overrides`) with its chip's prior
    where it has one (:func:`studies.prior_map.figures_of`)."""
    figures = prior_map.figures_of(cfg, problem)
    extra = () if figures is None else (prior_map.prior_override(figures),)
    return (*problem_overrides(cfg, problem), *extra)


def prior_steps(cfg: DictConfig, out: Path) -> list[CommandSpec]:
    """One step per problem whose prior is read (:func:`studies.prior_map.reads_prior`):
    solve it, read its map once, write ``OUT/<problem>/prior.json``."""
    limit = prior_map.time_limit_of(cfg)
    return [
        CommandSpec(
            problem,
            (
                sys.executable,
                "-m",
                "studies.prior_map",
                str(Path(out) / problem / prior_map.PRIOR_FILE),
                str(limit),
                *overrides_of(cfg, problem),
            ),
            f"{problem}/{prior_map.PRIOR_FILE}",
        )
        for problem in cfg.problems
        if prior_map.reads_prior(cfg, problem)
    ]


def agents_of(cfg: DictConfig, problem: str) -> list[str]:
    """The agents a problem runs: the plan's, then its own (``problem_agents``), or only
    those of ``problem_only.<problem>.agents`` when it names them."""
    extra = (cfg.get("problem_agents") or {}).get(problem, [])
    return only(cfg, problem, "agents", [*cfg.agents, *(a for a in extra if a not in cfg.agents)])


def screens_of(cfg: DictConfig, problem: str, agent: str | None = None) -> list[str]:
    """The screens a problem runs (the plan's, then its own, or only those of
    ``problem_only.<problem>.screens``); with ``agent``, those the agent runs
    (``screen_agents`` limits a screen to some agents, e.g. ``critic``)."""
    extra = (cfg.get("problem_screens") or {}).get(problem, [])
    screens = only(
        cfg, problem, "screens", [*cfg.screens, *(s for s in extra if s not in cfg.screens)]
    )
    limits = cfg.get("screen_agents") or {}
    return [s for s in screens if agent is None or s not in limits or agent in limits[s]]


def only(cfg: DictConfig, problem: str, kind: str, names: list[str]) -> list[str]:
    """``names`` limited to ``problem_only.<problem>.<kind>`` where the plan gives it (a
    costly problem that runs fewer agents or screens), in that list's order."""
    limit = ((cfg.get("problem_only") or {}).get(problem) or {}).get(kind)
    return names if limit is None else list(limit)


def check(cfg: DictConfig) -> None:
    """Every named problem, agent and screen has its overrides; seeds and budget >= 1.

    A plan without ``screens`` (a study of agents alone) has no screens to check."""
    for name in ("seeds", "budget"):
        if int(cfg[name]) < 1:
            raise StudyError(f"{cfg.study}: {name}={cfg[name]} is invalid: expected >= 1")
    pretrain = cfg.get("pretrain") or {}
    problems = [*cfg.problems, *pretrain.get("problems", [])]
    tables = [
        ("problem", problems, cfg.problem_overrides),
        ("agent", [a for p in cfg.problems for a in agents_of(cfg, p)], cfg.agent_overrides),
    ]
    if cfg.get("screens") is not None:
        screens = [s for p in cfg.problems for s in screens_of(cfg, p)]
        tables.append(("screen", screens, cfg.screen_overrides))
    for kind, names, table in tables:
        for name in names:
            if name not in table:
                raise StudyError(f"{cfg.study}: {kind} {name!r} has no overrides in the plan")


def spec(cfg: DictConfig, problem: str, agent: str, screen: str, seed: int, extra=()) -> RunSpec:
    overrides = (
        *problem_overrides(cfg, problem),
        *cfg.agent_overrides[agent],
        *cfg.screen_overrides[screen],
        f"budget={cfg.budget}",
        *extra,
    )
    return RunSpec(group(problem, agent, screen), seed, overrides)


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """Stage 1: the priors read (:func:`prior_steps`), every problem x agent x screen x
    seed, and the unscreened runs a pre-trained screen learns from; stage 2: the
    pre-trained screens (``init_from`` those runs)."""
    check(cfg)
    pretrain = cfg.get("pretrain") or {}
    later = set(pretrain.get("screens", []))
    first: dict[str, RunSpec] = {}
    second: list[RunSpec] = []
    for problem in cfg.problems:
        for agent in agents_of(cfg, problem):
            for screen in screens_of(cfg, problem, agent):
                for seed in range(cfg.seeds):
                    if screen not in later:
                        s = spec(cfg, problem, agent, screen, seed)
                        first.setdefault(s.path, s)
                        continue
                    sources = [group(p, agent, REFERENCE) for p in pretrain.problems]
                    for p in pretrain.problems:
                        s = spec(cfg, p, agent, REFERENCE, seed)
                        first.setdefault(s.path, s)
                    paths = [str(out / f"{g}/seed{seed}") for g in sources]
                    init = f"screen.init_from=[{','.join(hydra_quote(p) for p in paths)}]"
                    run = spec(cfg, problem, agent, screen, seed, (init,))
                    second.append(
                        RunSpec(run.group, seed, run.overrides, f"{sources[-1]}/seed{seed}")
                    )
    yield [*prior_steps(cfg, out), *first.values()]
    if second:
        yield second


# ------------------------------------------------------------------ analysis
@dataclass
class CellResult:
    """One agent with one screen on one problem; arrays over its ``S`` runs (seeds).

    Attributes:
        final: best speedup over the compiler at the end of each run ``[S]``.
        to_compiler: paid samples to reach the native compiler (speedup 1) ``[S]``.
        to_level: paid samples to reach ``level`` x the reference ``[S]`` (inf: never).
        to_match: paid samples to reach the same agent's unscreened median final best
            speedup ``[S]``: the samples a screen needs for the quality the agent gets
            from the whole budget without one.
        spearman: median over generations of the model's rank correlation ``[S]`` (NaN:
            no screen).
        ms_per_sample: the run's wall time over its paid samples, in ms ``[S]``.
        tests: against the reference screen of the same agent, ``(U, p, share of pairs
            this screen got there first)`` on ``to_level`` and ``to_match``, and ``(U, p,
            share of pairs this screen ended higher)`` on ``final``; empty for the
            reference itself.
    """

    agent: str
    screen: str
    runs: list[Run]
    final: np.ndarray
    to_compiler: np.ndarray
    to_level: np.ndarray
    spearman: np.ndarray
    ms_per_sample: np.ndarray
    to_match: np.ndarray | None = None
    tests: dict[str, tuple[float, float, float]] = field(default_factory=dict)


@dataclass
class ProblemResult:
    """Every cell of one problem; ``reference``: what shares and levels divide by."""

    problem: str
    reference: float
    source: str
    budget: int
    level: float
    cells: list[CellResult]
    prior: PriorReading | None = None


def median_spearman(run: Run) -> float:
    """The median over a run's generations of ``screen_spearman`` (NaN without one)."""
    values = [r.get("screen_spearman") for r in RunDir(run.path).read_metrics_rows()]
    finite = [float(v) for v in values if v not in (None, "", "nan") and math.isfinite(float(v))]
    return float(np.median(finite)) if finite else math.nan


def cell_result(agent: str, screen: str, runs: Sequence[Run], level: float) -> CellResult:
    """A cell's arrays over its runs; ``level`` is an absolute speedup."""
    return CellResult(
        agent=agent,
        screen=screen,
        runs=list(runs),
        final=np.array([r.final_speedup for r in runs]),
        to_compiler=np.array([samples_to_level(r.iterations, r.best_speedup, 1.0) for r in runs]),
        to_level=np.array([samples_to_level(r.iterations, r.best_speedup, level) for r in runs]),
        spearman=np.array([median_spearman(r) for r in runs]),
        ms_per_sample=np.array(
            [1000 * r.final_wall_s / max(int(r.iterations[-1]), 1) for r in runs]
        ),
    )


def finished_runs(root: Path) -> list[Run]:
    """The runs under ``root`` that spent their budget or stopped by themselves."""
    found = read_runs(root)
    for p in found.problems:
        log.warning("%s", p)
    return list(found.runs)


def reference_of(cfg: DictConfig, out: Path, problem: str, runs: list[Run]) -> tuple[float, str]:
    """The problem's reference: the proven optimum, else the best known value (the
    prior's map read once included, where it was read)."""
    optimum, proven = None, False
    if problem not in (cfg.get("no_optimum") or []):
        optimum, proven = solver_optimum(runs, out / problem, cfg.optimum_time_s)
    reference, source = best_known(optimum, proven, [r.final_speedup for r in runs])
    prior = read_prior(out, problem)
    if source != "proven" and prior is not None and prior.speedup > reference:
        return prior.speedup, "prior"  # the prior's map, read on the chip, is a known map
    return reference, source


def problem_result(cfg: DictConfig, out: Path, problem: str) -> ProblemResult | None:
    """Every cell of ``problem``; None when it has no finished run."""
    cells = {
        (a, s): finished_runs(out / group(problem, a, s))
        for a in agents_of(cfg, problem)
        for s in screens_of(cfg, problem, a)
    }
    runs = [r for rs in cells.values() for r in rs]
    if not runs:
        log.warning("%s: no finished run", problem)
        return None
    reference, source = reference_of(cfg, out, problem, runs)
    level = float(cfg.level) * reference
    results = [cell_result(a, s, rs, level) for (a, s), rs in cells.items() if rs]
    base = {c.agent: c for c in results if c.screen == REFERENCE}
    for c in sorted(results, key=lambda c: c.screen != REFERENCE):  # references first
        if c.agent not in base:
            continue
        b = base[c.agent]
        match = float(np.median(b.final))
        if match > 0:  # 0: most unscreened runs found no valid map, nothing to match
            c.to_match = np.array(
                [samples_to_level(r.iterations, r.best_speedup, match) for r in c.runs]
            )
        if c.screen != REFERENCE:
            u, p, _ = compare(-c.final, -b.final)  # higher is better: compare negated
            c.tests = {
                "level": compare(c.to_level, b.to_level),
                "final": (u, p, 1.0 - u / (len(c.final) * len(b.final))),
            }
            if c.to_match is not None:
                c.tests["match"] = compare(c.to_match, b.to_match)
    budget = max(r.budget for r in runs)
    prior = read_prior(out, problem)
    return ProblemResult(problem, reference, source, budget, float(cfg.level), results, prior)


def analyse(cfg: DictConfig, out: Path) -> list[ProblemResult]:
    """Read every problem's runs, its reference and every cell's figures."""
    results = [problem_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


def best_at(cell: CellResult, paid: int) -> np.ndarray:
    """float ``[S]``: each run's best speedup after ``paid`` measurements (NaN: none yet)."""
    out = []
    for run in cell.runs:
        seen = np.flatnonzero(np.asarray(run.iterations) <= paid)
        out.append(float(run.best_speedup[seen[-1]]) if len(seen) else np.nan)
    return np.array(out)


# ------------------------------------------------------------------ report
def header(level: float) -> tuple[str, ...]:
    return (
        "agent",
        "screen",
        "runs",
        "final speedup",
        "share of reference",
        "final against none (p, higher)",
        "samples to compiler",
        f"samples to {level:.0%}",
        "against none (p, first)",
        "samples to none's median final",
        "against none (p, first)",
        "model's Spearman",
        "ms per paid map",
    )


def test_text(test: tuple[float, float, float] | None) -> str:
    """``p = 0.012, 80%``: the test's p and the share of pairs in the screen's favour."""
    if test is None or not np.isfinite(test[1]):
        return ""
    return f"p = {test[1]:.3f}, {test[2]:.0%}"


def table_markdown(result: ProblemResult) -> str:
    """One row per agent and screen."""
    rows = [
        (
            c.agent,
            c.screen,
            len(c.runs),
            format_mean_std(c.final),
            format_mean_std(c.final / result.reference, "{:.2%}"),
            test_text(c.tests.get("final")),
            format_samples(c.to_compiler),
            format_samples(c.to_level),
            test_text(c.tests.get("level")),
            format_samples(c.to_match) if c.to_match is not None else "",
            test_text(c.tests.get("match")),
            median_range(c.spearman, "{:.2f}"),
            median_range(c.ms_per_sample, "{:.1f}"),
        )
        for c in result.cells
    ]
    return markdown_table(header(result.level), rows)


def summary_markdown(results: Sequence[ProblemResult], key: str = "level") -> str:
    """Per problem and agent: the median samples of each screen over ``none``'s, to the
    level (``key="level"``) or to ``none``'s median final (``"match"``)."""
    screens = list(
        dict.fromkeys(c.screen for r in results for c in r.cells if c.screen != REFERENCE)
    )
    rows = []
    for r in results:
        base = {c.agent: c for c in r.cells if c.screen == REFERENCE}
        for agent, b in base.items():
            own = samples(b, key)
            row = [r.problem, agent, "-" if np.isnan(own).all() else format_samples(own, False)]
            for screen in screens:
                cell = next((c for c in r.cells if c.agent == agent and c.screen == screen), None)
                row.append(ratio_text(cell, b, key))
            rows.append(row)
    return markdown_table(("problem", "agent", "none", *screens), rows)


def samples(cell: CellResult, key: str) -> np.ndarray:
    """A cell's samples to the level (``"level"``) or to none's median final (``"match"``;
    NaN where the unscreened median found no valid map)."""
    if key == "match" and cell.to_match is None:
        return np.full(len(cell.runs), np.nan)
    return cell.to_level if key == "level" else cell.to_match


def ratio_text(cell: CellResult | None, base: CellResult, key: str = "level") -> str:
    """``0.45x (p = 0.030)``: the cell's median samples over ``base``'s, with the test;
    how many reached it where either median never did."""
    if cell is None:
        return ""
    if np.isnan(samples(base, key)).all():
        return "no valid map to match"
    mine, theirs = np.median(samples(cell, key)), np.median(samples(base, key))
    test = cell.tests.get(key)
    p = f" (p = {test[1]:.3f})" if test is not None and np.isfinite(test[1]) else ""
    if not (np.isfinite(mine) and np.isfinite(theirs)):
        reached = samples(cell, key)
        return f"{np.isfinite(reached).sum()}/{len(reached)} reached{p}"
    return f"{mine / theirs:.2f}x{p}"


def plot_problem(result: ProblemResult, path: Path) -> Path:
    """Median best speedup against paid samples: solid screened, dashed unscreened."""
    from matplotlib import colormaps

    colours = colormaps["tab10"].colors
    agents = list(dict.fromkeys(c.agent for c in result.cells))
    styles = ("--", "-", "-.", ":")
    screens = list(dict.fromkeys(c.screen for c in result.cells))
    series = [
        (
            f"{c.agent} {c.screen}",
            c.runs,
            styles[screens.index(c.screen) % 4],
            colours[agents.index(c.agent) % 10],
        )
        for c in result.cells
    ]
    refs = {
        "native compiler": 1.0,
        f"{result.level:.0%} of {result.source}": result.level * result.reference,
    }
    return plot_median_curves(series, refs, result.problem, path)


def problem_markdown(result: ProblemResult, figure: str) -> list[str]:
    return problem_block(result, table_markdown(result), figure)


def problem_block(result, table: str, figure: str) -> list[str]:
    """A problem's heading (budget and reference), the prior's map beside the compiler's
    where it was read, its table and its figure; ``result`` has ``problem``, ``budget``,
    ``reference``, ``source`` and ``prior`` (as :class:`ProblemResult`)."""
    name = "optimum" if result.source == "proven" else f"best known ({result.source})"
    prior = [] if getattr(result, "prior", None) is None else [prior_line(result), ""]
    return [
        f"### {result.problem} (budget {result.budget}, {name} {result.reference:.4f}x)",
        "",
        *prior,
        table,
        "",
        f"![{result.problem}]({figure})",
        "",
    ]
