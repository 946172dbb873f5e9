"""The samples study: paid measurements to reach the compiler and the optimum, per agent.

On a real chip every measurement is a compile-and-run, so what an agent costs a user is
the number of paid measurements it needs to reach a given quality. For each hardware model
and workload of the study (a :class:`Problem`), every agent runs

* ``scratch``: from its own default start (``agent.start`` as its config has it);
* ``native``: from the native compiler's map (``agent.start=native``; every agent but
  ``random``, which has no start);
* ``finetune``: EGRL started from the finished EGRL run (seed :data:`FINETUNE_SEED`, from
  scratch) on another workload of the same hardware model (``init_from=``;
  :func:`source_workload`), its pretraining not counted.

One Hydra multirun per problem and mode, ``seed=range(S)`` and ``continue_runs=true``, so
the same command continues a killed study. Layout::

    OUT/<hwmodel>-<workload>/<mode>/<agent>/seed<k>/     one run (egrl-train's directory)
    OUT/<hwmodel>-<workload>/optimum.json               the optimum's cache

Per run the paid measurements (``iterations`` in ``metrics.csv``) when the best speedup
first reaches each level: the native compiler (1.0x), 99% and 99.9% of the reference
(the proven optimum; where it is unknown or unproven, the best value the solver or any
run found, said so). A level is read at generation ends, so a run's samples are those
paid by the end of the generation that reached it; a run that never reaches it counts as
never (+inf). EGRL from scratch is tested against every other row with a two-sided
Mann-Whitney U on the samples to 99% of the reference (never = +inf, i.e. on ranks).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from egrl.experiments.ablation import first_reaching, mann_whitney
from egrl.experiments.curves import step_values
from egrl.experiments.launch import launch
from egrl.experiments.optimum import optimum_speedups
from egrl.experiments.runs import Run, collect_runs, load_config, load_run

log = logging.getLogger(__name__)

#: hardware model -> the overrides every run on it takes
TARGETS: dict[str, tuple[str, ...]] = {
    "nnpi": ("hwmodel=nnpi",),
    "mcm": ("hwmodel=mcm", "reward=repaired"),
}
#: the study's problems, ``HWMODEL/WORKLOAD``: the EGRL paper's three workloads on NNP-I and
#: three mcm87 test graphs with room between the multi-chip compiler and the optimum
DEFAULT_PROBLEMS = (
    "nnpi/resnet50",
    "nnpi/resnet101",
    "nnpi/bert-base",
    "mcm/mobilenet-d50-w50-k5-e4",
    "mcm/unet-l3-w32-c3",
    "mcm/dlrm-s26-e64-l3",
)
AGENTS = ("egrl", "ea", "pg", "sa", "ga", "random", "greedy-dp", "nevergrad")
#: agents without ``agent.start`` (no ``native`` row)
NO_START = frozenset({"random"})
#: agents that need an optional package, and the package
OPTIONAL = {"nevergrad": "nevergrad"}
MODES = ("scratch", "native", "finetune")
#: the workload each workload's fine-tuned EGRL starts from (when it is in the study)
FINETUNE_SOURCES = {
    "resnet50": "resnet101",
    "resnet101": "resnet50",
    "bert-base": "resnet50",
    "mobilenet-d50-w50-k5-e4": "unet-l3-w32-c3",
    "unet-l3-w32-c3": "mobilenet-d50-w50-k5-e4",
    "dlrm-s26-e64-l3": "mobilenet-d50-w50-k5-e4",
}
#: the seed of the EGRL run a fine-tuned run starts from
FINETUNE_SEED = 0
#: one directory per agent and seed inside a group's multirun
SUBDIR = "hydra.sweep.subdir=${agent.name}/seed${seed}"
#: level names, in table order; their speedups are :func:`levels`
LEVEL_NAMES = ("compiler", "99%", "99.9%")
#: relative tolerance of "reached": float noise never hides a level that was reached
REACH_TOLERANCE = 1e-9


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

    @property
    def overrides(self) -> tuple[str, ...]:
        return (*TARGETS[self.hwmodel], f"workload.name={self.workload}")


def parse_problem(text: str) -> Problem:
    """``"nnpi/resnet50"`` -> :class:`Problem`; ``ValueError`` naming what is wrong."""
    hwmodel, sep, workload = text.partition("/")
    if not sep or not workload or "/" in workload:
        raise ValueError(f"problem {text!r}: expected HWMODEL/WORKLOAD, e.g. nnpi/resnet50")
    if hwmodel not in TARGETS:
        raise ValueError(f"problem {text!r}: hardware model {hwmodel!r} not in {sorted(TARGETS)}")
    return Problem(hwmodel, workload)


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


def source_workload(problem: Problem, problems: Sequence[Problem]) -> str | None:
    """The workload ``problem``'s fine-tuned EGRL starts from, or None when the study has none.

    :data:`FINETUNE_SOURCES` when that workload is in the study on the same hardware
    model, else the first other workload of that hardware model in the study.
    """
    others = [p.workload for p in problems if p.hwmodel == problem.hwmodel and p != problem]
    preferred = FINETUNE_SOURCES.get(problem.workload)
    if preferred in others:
        return preferred
    return others[0] if others else None


def hydra_quote(value: str) -> str:
    """``value`` as one quoted Hydra override value (commas, spaces and ``=`` kept)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ------------------------------------------------------------------ running
@dataclass
class Group:
    """One multirun: a problem, a mode, its agents (swept) and seeds.

    ``source`` is the run a ``finetune`` group starts from.
    """

    problem: Problem
    mode: str
    agents: tuple[str, ...]
    root: Path
    overrides: list[str]
    source: Path | None = None


def run_dir(out: str | Path, problem: Problem, mode: str, agent: str, seed: int) -> Path:
    """Where one run of the study lives."""
    return Path(out) / problem.key / mode / agent / f"seed{seed}"


def plan(
    out: str | Path,
    problems: Sequence[Problem],
    agents: Sequence[str],
    seeds: int,
    budget: int,
    modes: Sequence[str] = MODES,
    overrides: Sequence[str] = (),
) -> list[Group]:
    """The study's multiruns, in launch order: every ``scratch``, then ``native``, then
    ``finetune`` (whose sources are ``scratch`` runs)."""
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"modes {unknown}: expected some of {list(MODES)}")
    common = [f"seed=range({seeds})", f"budget={budget}", "continue_runs=true", SUBDIR]
    groups = []
    for mode in (m for m in MODES if m in modes):
        for problem in problems:
            extra: list[str] = []
            source = None
            if mode == "scratch":
                chosen = tuple(agents)
            elif mode == "native":
                chosen = tuple(a for a in agents if a not in NO_START)
                extra = ["agent.start=native"]
            else:
                src = source_workload(problem, problems)
                chosen = ("egrl",) if "egrl" in agents and src else ()
                if chosen:
                    origin = Problem(problem.hwmodel, src)
                    source = run_dir(out, origin, "scratch", "egrl", FINETUNE_SEED)
                    extra = [f"init_from={hydra_quote(str(source.resolve()))}"]
            if not chosen:
                continue
            args = [*problem.overrides, f"agent={','.join(chosen)}", *common, *extra, *overrides]
            root = Path(out) / problem.key / mode
            groups.append(Group(problem, mode, chosen, root, args, source))
    return groups


def stopped_early(run: Run) -> bool:
    """The run ended before its budget because it stopped proposing new maps."""
    path = run.path / "best_mapping.json"
    if not path.exists():
        return False
    try:
        return bool(json.loads(path.read_text(encoding="utf-8")).get("stopped_early"))
    except (OSError, ValueError):
        return False


def finished(path: str | Path) -> bool:
    """The run at ``path`` spent its budget or stopped early by itself."""
    try:
        run = load_run(path)
    except (OSError, ValueError):
        return False
    return run.complete or stopped_early(run)


def run_study(groups: Sequence[Group], n_jobs: int = 2) -> list[Group]:
    """Launch (or continue) every group; a ``finetune`` group whose source has not finished is
    skipped with a warning. Returns the groups launched."""
    launched = []
    for group in groups:
        if group.source is not None and not finished(group.source):
            log.warning(
                "%s %s skipped: the run it fine-tunes from, %s, has not finished",
                group.problem.label,
                group.mode,
                group.source,
            )
            continue
        launch("parallel", group.overrides, group.root, n_jobs)
        launched.append(group)
    return launched


# ------------------------------------------------------------------ analysis
def samples_to(run: Run, level: float) -> float:
    """Paid measurements when the run's best speedup first reached ``level`` (inf: never)."""
    return first_reaching(run, level * (1.0 - REACH_TOLERANCE))


def spread(samples: np.ndarray) -> str:
    """``"1200 [800-1900] (4/5)"``: median [min-max] over the runs that reached the level, and
    how many did; ``"never (0/5)"`` when none did."""
    samples = np.asarray(samples, dtype=np.float64)
    reached = samples[np.isfinite(samples)]
    if reached.size == 0:
        return f"never (0/{samples.size})"
    counts = f"({reached.size}/{samples.size})"
    if reached.size == 1:
        return f"{reached[0]:.0f} {counts}"
    return f"{np.median(reached):.0f} [{reached.min():.0f}-{reached.max():.0f}] {counts}"


def value_spread(values: np.ndarray, fmt: str = "{:.4f}") -> str:
    """Median [min-max] of finite ``values`` (``-`` when none)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return "-"
    if values.size == 1:
        return fmt.format(values[0])
    lo, mid, hi = (fmt.format(v) for v in (values.min(), np.median(values), values.max()))
    return f"{mid} [{lo}-{hi}]"


def first_share(u: float, n_a: int, n_b: int) -> float:
    """Share of (a, b) pairs where ``a`` needed fewer samples (ties half), from ``a``'s U."""
    return 1.0 - u / (n_a * n_b) if n_a and n_b else math.nan


def compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Two-sided Mann-Whitney U of samples ``a [S_a]`` against ``b [S_b]`` (inf: never).

    Returns ``a``'s U, the p-value and the share of pairs where ``a`` got there first.
    """
    u, p = mann_whitney(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return u, p, first_share(u, len(a), len(b))


def cached_share(run: Run) -> float:
    """Share of the run's proposals answered without a paid measurement (NaN: unknown)."""
    try:
        proposals = float(run.last_row.get("proposals", "nan"))
    except (TypeError, ValueError):
        return math.nan
    if not proposals > 0:
        return math.nan
    return 1.0 - float(run.iterations[-1]) / proposals


def read_runs(root: str | Path) -> tuple[list[Run], list[str]]:
    """The finished runs under ``root`` (spent their budget or stopped early by themselves),
    and one line per run directory left out; nothing when ``root`` does not exist."""
    root = Path(root)
    if not root.is_dir():
        return [], []
    found = collect_runs([root])
    ended = [r for r in found.incomplete if stopped_early(r)]
    left = {r.path for r in ended}
    notes = [str(p) for p in found.problems if Path(p.path) not in left]
    return [*found.runs, *ended], notes


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
    """The speedup the percentage levels are of, and what it is.

    The proven optimum where there is one; else the higher of the solver's unproven answer
    and the best final speedup of any run; else the best final speedup of any run.
    """
    best = max(r.final_speedup for r in runs)
    if info is not None and info.proven:
        if best > info.speedup * (1 + 1e-6):
            log.warning(
                "%s: a run found %.6f above the proven optimum %.6f",
                info.workload,
                best,
                info.speedup,
            )
        return info.speedup, "the proven optimum"
    if info is not None and math.isfinite(info.speedup):
        if info.speedup >= best:
            return info.speedup, f"the best known value (the solver's, {info.tag}; not proven)"
        return best, "the best known value (a run's, above the solver's unproven answer)"
    return best, "the best value any run found (no optimum known)"


def analyse(
    out: str | Path,
    problems: Sequence[Problem],
    modes: Sequence[str] = MODES,
    optimum_time_s: float = 60.0,
) -> list[ProblemSamples]:
    """Read every problem's runs, solve (or read) its optimum and summarise each row."""
    results = []
    for problem in problems:
        by_row: dict[tuple[str, str], list[Run]] = {}
        notes: list[str] = []
        for mode in modes:
            runs, left = read_runs(Path(out) / problem.key / mode)
            notes += left
            for run in runs:
                by_row.setdefault((mode, run.agent), []).append(run)
        if not by_row:
            log.warning("%s: no finished run", problem.label)
            continue
        budget = max(r.budget for rs in by_row.values() for r in rs)
        for key, rs in by_row.items():
            notes += [
                f"{r.path}: budget {r.budget}, not {budget}" for r in rs if r.budget != budget
            ]
            by_row[key] = [r for r in rs if r.budget == budget]
        every = [r for rs in by_row.values() for r in rs]
        opt = optimum_speedups(
            every, cache_dir=Path(out) / problem.key, time_limit_s=optimum_time_s
        )
        reference, text = reference_of(every, opt.get(problem.workload))
        level = levels(reference)
        order = {(m, a): (MODES.index(m), _agent_rank(a)) for m, a in by_row}
        rows = [
            make_row(a, m, rs, level)
            for (m, a), rs in sorted(by_row.items(), key=lambda kv: order[kv[0]])
            if rs
        ]
        add_tests(rows)
        results.append(ProblemSamples(problem, reference, text, level, budget, rows, notes))
    return results


def _agent_rank(agent: str) -> int:
    return AGENTS.index(agent) if agent in AGENTS else len(AGENTS)


def add_tests(rows: Sequence[Row], level: str = "99%") -> None:
    """Set every row's :attr:`Row.test`: EGRL from scratch against it on ``level``."""
    egrl = next((r for r in rows if r.agent == "egrl" and r.mode == "scratch"), None)
    if egrl is None:
        return
    for row in rows:
        if row is not egrl:
            row.test = compare(egrl.samples[level], row.samples[level])


# ------------------------------------------------------------------ report
def _test_text(test: tuple[float, float, float] | None) -> str:
    if test is None:
        return "-"
    u, p, first = test
    if not math.isfinite(p):
        return "-"
    return f"U = {u:.1f}, p = {p:.3f}; EGRL first in {100 * first:.0f}% of pairs"


def _share_text(values: np.ndarray) -> str:
    values = values[np.isfinite(values)]
    return "-" if values.size == 0 else f"{100 * np.median(values):.0f}%"


def table_markdown(result: ProblemSamples) -> str:
    """One row per agent and start: samples to each level, final speedup, the test."""
    ref = f"{result.reference:.4f}x"
    rows = [
        f"| agent | start | runs | to the compiler (1.0x) | to 99% ({0.99 * result.reference:.4f}x) "
        f"| to 99.9% ({0.999 * result.reference:.4f}x) | final speedup (of {ref}) "
        "| proposals from cache | EGRL from scratch against it (to 99%) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in result.rows:
        cells = [spread(row.samples[name]) for name in LEVEL_NAMES]
        rows.append(
            f"| {row.agent} | {row.start} | {len(row.runs)} | {' | '.join(cells)} "
            f"| {value_spread(row.final)} | {_share_text(row.cached)} | {_test_text(row.test)} |"
        )
    return "\n".join(rows)


def report_markdown(
    results: Sequence[ProblemSamples],
    figures: Mapping[str, str],
    seeds: int,
    commands: Sequence[str] = (),
    machine: str = "",
) -> str:
    """The ``samples`` section of the results page."""
    lines = [
        "## Samples: paid measurements to reach the compiler and the optimum",
        "",
        f"Every agent from its default start, from the native compiler's map "
        f"(`agent.start=native`), and EGRL fine-tuned from the EGRL run (seed {FINETUNE_SEED}) "
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
        "EGRL got there with fewer samples (ties half).",
        "",
    ]
    for r in results:
        lines += [
            f"### {r.problem.label} (budget {r.budget}; reference {r.reference:.4f}x, "
            f"{r.reference_text})",
            "",
            table_markdown(r),
            "",
        ]
        if r.problem.key in figures:
            lines += [f"![{r.problem.label}]({figures[r.problem.key]})", ""]
        if r.notes:
            lines += ["Left out:", "", *(f"- {n}" for n in r.notes), ""]
    if commands:
        lines += ["Reproduce:", "", "```", *commands, "```", ""]
    return "\n".join(lines)


def median_curve(runs: Sequence[Run], grid: np.ndarray) -> np.ndarray:
    """float ``[M]``: the median over runs of the best speedup on ``grid`` (step curves)."""
    curves = np.stack([step_values(r.iterations, r.best_speedup, grid) for r in runs])
    return np.median(curves, axis=0)


def log_grid(runs: Sequence[Run], points: int = 200) -> np.ndarray:
    """int64 ``[<=points]``: geometric from the point where every run has ended its first
    generation (before it a median would mix in runs that have measured nothing yet) to the
    largest end."""
    start = max(1, max(int(r.iterations[0]) for r in runs))
    stop = max(start + 1, max(int(r.iterations[-1]) for r in runs))
    return np.unique(np.geomspace(start, stop, points).round().astype(np.int64))


def plot_curves(
    series: Sequence[tuple[str, Sequence[Run], str, str | None]],
    references: Mapping[str, float],
    title: str,
    path: str | Path,
) -> Path:
    """Median best speedup against paid measurements, log x axis, one line per series.

    Two panels: every curve in full, and the same zoomed on the band from 5% below the
    lowest reference to 1% above the highest, where the levels of the samples table lie.

    Args:
        series: ``(label, runs, linestyle, colour or None)`` per line.
        references: label -> speedup of horizontal reference lines.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.4), dpi=120, sharex=True)
    for ax in axes:
        for label, runs, style, colour in series:
            grid = log_grid(runs)
            curve = median_curve(runs, grid)
            ax.step(
                grid,
                curve,
                where="post",
                linestyle=style,
                color=colour,
                label=f"{label} ({len(runs)})",
            )
        for (label, value), style in zip(references.items(), ("--", ":", "-.")):
            colour = "grey" if style == "--" else "black"
            ax.axhline(value, color=colour, linestyle=style, linewidth=0.9, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("paid measurements (log scale)")
        ax.grid(alpha=0.3, which="both")
    plain = FuncFormatter(lambda x, _: f"{x:g}")
    for ax in axes:
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        ax.xaxis.set_minor_formatter(plain)
    values = list(references.values())
    axes[1].set_ylim(0.95 * min(values), 1.01 * max(values))
    axes[0].set_ylabel("best speedup over the compiler (median over seeds)")
    axes[0].set_title(title)
    axes[1].set_title(f"{title}, near the levels")
    axes[1].legend(fontsize=6, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


#: line style of each mode
MODE_STYLE = {"scratch": "-", "native": "--", "finetune": ":"}


def plot_problem(result: ProblemSamples, path: str | Path) -> Path:
    """One figure per problem: every row's median curve; colour per agent, style per mode."""
    colours = {a: f"C{i % 10}" for i, a in enumerate(dict.fromkeys(r.agent for r in result.rows))}
    series = [(r.label, r.runs, MODE_STYLE[r.mode], colours[r.agent]) for r in result.rows]
    references = {"native compiler": 1.0, f"reference ({result.reference:.4f}x)": result.reference}
    return plot_curves(series, references, result.problem.label, path)


def figure_name(problem: Problem) -> str:
    """``samples_<hwmodel>_<workload>.png``."""
    return f"samples_{problem.hwmodel}_{problem.workload}.png"


def relative_link(target: str | Path, page: str | Path) -> str:
    """``target``'s path as a link from the markdown page ``page``."""
    return os.path.relpath(Path(target).resolve(), Path(page).resolve().parent)
