"""The comparison of Wang et al. ("Optimizing Memory Mapping Using Deep Reinforcement
Learning", arXiv:2305.07440, section 5.2) on the ``tpu-cmem`` game, at equal wall clock.

The plan (``configs/study/tpu-study.yaml``) names the problems (a workload unrolled
``repeats`` times), the agents and the wall clock of a run. Every run is one ``egrl-train``
run of one agent on one problem, in ``OUT/<problem>/<agent>/seed<S>``, stopped after
``seconds`` of its own wall clock (``time_limit_s``: the planner between moves, its game
unfinished at the deadline dropped; another agent at the end of the generation under way)
and recording every layout it measures (``record_evaluations``: ``evaluations.csv`` gives
each paid layout's time, game return and latency, ``best_mapping.json`` the best layout
by return). From those records:

* **Table 2**: the best return found within the time budget, over the program's return
  bound (:func:`egrl.agents.tpu_game.return_bound`), mean and spread over seeds, for
  the planner, its true-dynamics ablation, ES, random legal play, EGRL and the heuristic
  (computed here, no run);
* **Figure 5**: that best normalised return against wall time, mean and spread;
* **Table 3**: the latency speedup over the heuristic of each agent's best layout (by
  return, as in the paper) alone and as the -prod hybrid (the better of it and the
  heuristic's by latency);
* **Figure 6**: the correlation of return and latency over the layouts measured on each
  program (Pearson and Spearman), and a scatter plot;
* a memory-layout figure (Figures 1 and 8) of the heuristic and of the best run;
* the layouts each agent played within the budget (games; EGRL's proposals) and paid
  for (the distinct ones), the best return of each run's first M paid layouts (M the
  fewest any run on the program paid: the agents per measurement), and the planners'
  learning curves (value loss, policy entropy, mean return per game
  against wall time, from their ``metrics.csv``).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from omegaconf import DictConfig

from egrl.rundir import RunDir
from egrl.runs import Run
from studies.render import markdown_table, pyplot, reproduce, save_figure
from studies.runner import Page, RunSpec, StudyError, read_runs
from studies.stats import format_mean_std, mean_std, median_range

if TYPE_CHECKING:
    from hwmodels.tpu.program import Program as TPUProgram

log = logging.getLogger(__name__)

SECTION = "tpu-study"
HEURISTIC = "heuristic"
#: the value of the target's record (``Target.map_values``) that is the game's return
RETURN = "game_return"
#: figures of the section
CURVES_FIGURE = "tpu_reward_curves.png"
CORRELATION_FIGURE = "tpu_reward_latency.png"
LEARNING_FIGURE = "tpu_planner_learning.png"
#: a table's cell for an agent without runs on a problem (the plan's ``left_out``)
NOT_RUN = "not run"
#: the learning curves' columns of ``metrics.csv`` and their axis labels
LEARNING_COLUMNS = {
    "value_loss": "value loss",
    "policy_entropy": "policy entropy (nats)",
    "mean_game_return": "mean return per game / bound",
}
DPI = 120


# ------------------------------------------------------------------ plan
def group(problem: str, agent: str) -> str:
    """An agent's directory under the study's output: ``<problem>/<agent>``."""
    return f"{problem}/{agent}"


def agents_of(cfg: DictConfig, problem: str) -> list[str]:
    """The plan's agents that run on ``problem`` (``left_out`` aside)."""
    left_out = set((cfg.get("left_out") or {}).get(problem) or ())
    return [a for a in cfg.agents if a not in left_out]


def run_overrides(cfg: DictConfig, problem: str, agent: str) -> tuple[str, ...]:
    """The ``egrl-train`` overrides of one agent on one problem (the seed aside)."""
    return (
        "hwmodel=tpu-cmem",
        *cfg.problem_overrides[problem],
        *cfg.agent_overrides[agent],
        f"budget={cfg.budget}",
        f"time_limit_s={cfg.seconds}",
        "record_evaluations=true",
    )


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """One stage: every problem x agent x seed, ``seconds`` of wall clock each."""
    yield [
        RunSpec(group(problem, agent), seed, run_overrides(cfg, problem, agent))
        for problem in cfg.problems
        for agent in agents_of(cfg, problem)
        for seed in range(cfg.seeds)
    ]


# ------------------------------------------------------------------ analysis
@dataclass
class Trace:
    """The layouts one run paid for: per layout ``time_s`` (the run's wall clock when it
    was answered), ``ret`` (the game's return) and ``latency_s``, arrays ``[R]`` in
    measurement order.

    Attributes:
        seconds: the run's time budget (``time_limit_s``).
        bound: the program's return bound.
        best_actions: int64 ``[N]``: the run's best layout by return (None: not recorded).
        played: layouts answered within the budget, paid or already measured (a game
            each for the game's agents, a proposal each for EGRL).
    """

    problem: str
    agent: str
    seed: int
    seconds: float
    bound: float
    time_s: np.ndarray
    ret: np.ndarray
    latency_s: np.ndarray
    best_actions: np.ndarray | None = None
    played: int = 0

    @property
    def horizon(self) -> float:
        """The time its curve spans: its budget, or its last layout's time without one."""
        if math.isfinite(self.seconds):
            return self.seconds
        return float(self.time_s.max()) if self.time_s.size else 0.0

    def within(self, seconds: float | None = None) -> np.ndarray:
        """bool ``[R]``: layouts measured within the time budget."""
        return self.time_s <= (self.seconds if seconds is None else seconds)

    def final(self) -> float:
        """Best normalised return within the budget (NaN: no layout in time)."""
        ok = self.within()
        return float(self.ret[ok].max() / self.bound) if ok.any() else math.nan

    @property
    def paid(self) -> int:
        """Distinct layouts it paid to measure within the budget."""
        return int(self.within().sum())

    def best_of_first(self, count: int) -> float:
        """Best normalised return of its first ``count`` paid layouts within the budget
        (NaN: none)."""
        ret = self.ret[self.within()][:count]
        return float(ret.max() / self.bound) if ret.size else math.nan

    def best_latency(self) -> float:
        """Latency of the best layout by return within the budget (NaN: none)."""
        ok = np.flatnonzero(self.within())
        return float(self.latency_s[ok[np.argmax(self.ret[ok])]]) if ok.size else math.nan

    def curve(self, grid: np.ndarray) -> np.ndarray:
        """Best normalised return so far at each time of ``grid`` (NaN before the first)."""
        if not self.ret.size:
            return np.full(len(grid), np.nan)
        order = np.argsort(self.time_s, kind="stable")
        t, best = self.time_s[order], np.maximum.accumulate(self.ret[order]) / self.bound
        idx = np.searchsorted(t, grid, side="right") - 1
        return np.where(idx >= 0, best[np.maximum(idx, 0)], np.nan)


@dataclass
class ProgramInfo:
    """One problem's program, its return bound and the native heuristic on it.

    Attributes:
        program: the game's program (:class:`hwmodels.tpu.program.Program`).
        unit_names: the target's unit (buffer) names, in map row order.
        contention: latencies count copies against HBM bandwidth.
        bound: the program's return bound (:func:`egrl.agents.tpu_game.return_bound`).
        heuristic_return: the heuristic's return over the bound.
        heuristic_latency_s: the heuristic's latency.
        heuristic_actions: int64 ``[N]``: the heuristic's layout.
    """

    program: TPUProgram
    unit_names: list[str]
    contention: bool
    bound: float
    heuristic_return: float
    heuristic_latency_s: float
    heuristic_actions: np.ndarray

    @property
    def buffers(self) -> int:
        return int(self.program.num_buffers)


@cache
def program_info(hwmodel: str, params: tuple, workload: str) -> ProgramInfo:
    """The program of ``workload`` on ``hwmodel`` with ``params`` (``(key, value)`` pairs,
    as ``egrl-train`` builds it) and the heuristic's layout on it; built once."""
    from egrl.agents.tpu_game import return_bound
    from egrl.env import make_env
    from hwmodels.tpu.heuristic import native_play

    target = make_env(hwmodel=hwmodel, workload=workload, **dict(params)).target
    program = target.program
    bound = return_bound(program)
    result, layout = native_play(program)
    return ProgramInfo(
        program,
        list(target.unit_names),
        target.contention,
        bound,
        result.ret / bound,
        layout.latency_s(target.contention),
        result.actions,
    )


def program_of(run: Run) -> ProgramInfo:
    """The program ``run`` played (from its ``config.yaml``; built once per program)."""
    cfg = RunDir(run.path).resolved_config()
    params = cfg["hwmodel"].get("params") or {}
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
    return program_info(cfg["hwmodel"]["name"], frozen, cfg["workload"]["name"])


def best_actions(run: Run, program: ProgramInfo) -> np.ndarray | None:
    """int64 ``[N]``: the run's best layout by return (``best_mapping.json``), or None."""
    from hwmodels.tpu.game import ACTIONS

    best = (RunDir(run.path).read_best_map() or {}).get("best_by", {}).get(RETURN)
    if not best or best.get("mapping") is None:
        return None
    mapping = best["mapping"]
    return np.array([ACTIONS.index(mapping[u]["action"]) for u in program.unit_names])


def trace_of(run: Run, problem: str, agent: str, program: ProgramInfo) -> Trace | None:
    """The paid layouts of ``run`` (None: it recorded none; a warning says so)."""
    files = RunDir(run.path)
    if files.evaluations.exists():
        rec = files.read_evaluations()
    elif run.config.get("record_evaluations"):  # recording, but answered no map
        rec = {}
    else:
        log.warning("%s: record_evaluations was off; left out", run.path)
        return None
    paid = rec.get("paid", np.zeros(0)) > 0
    empty = np.zeros(0)
    seconds = run.config.get("time_limit_s")
    seconds = math.inf if seconds in (None, "None") else float(seconds)
    return Trace(
        problem=problem,
        agent=agent,
        seed=run.seed,
        seconds=seconds,
        bound=program.bound,
        time_s=rec.get("wall_s", empty)[paid],
        ret=rec.get(RETURN, np.full(len(paid), np.nan))[paid],
        latency_s=rec.get("latency_s", empty)[paid],
        best_actions=best_actions(run, program),
        played=int((rec.get("wall_s", empty) <= seconds).sum()),
    )


@dataclass
class Learning:
    """A planner run's learning curves, one value per generation ``[T]``: ``wall_s``
    and the :data:`LEARNING_COLUMNS` (``mean_game_return`` over the program's bound);
    generations that learnt nothing (the deadline's) are left out."""

    problem: str
    agent: str
    seed: int
    wall_s: np.ndarray
    values: dict[str, np.ndarray]


def learning_of(run: Run, problem: str, agent: str, bound: float) -> Learning | None:
    """The learning curves of a planner's run: the rows of its metrics that have every
    :data:`LEARNING_COLUMNS` (None: it has none, as the agents that do not plan)."""
    rows = [
        r
        for r in RunDir(run.path).read_metrics_rows()
        if all(r.get(c) not in (None, "") for c in LEARNING_COLUMNS)
    ]
    if not rows:
        return None
    values = {c: np.array([float(r[c]) for r in rows]) for c in LEARNING_COLUMNS}
    values["mean_game_return"] = values["mean_game_return"] / bound
    wall_s = np.array([float(r["wall_s"]) for r in rows])
    return Learning(problem, agent, run.seed, wall_s, values)


def ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """``names`` in ``order`` first, then the rest sorted."""
    names = set(names)
    return [n for n in order if n in names] + sorted(names - set(order))


@dataclass
class Speedups:
    """Latency speedups over the heuristic of one agent's best layouts ``[runs]``."""

    alone: list[float] = field(default_factory=list)
    prod: list[float] = field(default_factory=list)


def speedups(traces: Sequence[Trace], programs: Mapping[str, ProgramInfo]) -> dict[str, Speedups]:
    """Per agent: the heuristic's latency over its best layout's (alone) and over the
    -prod hybrid's (the better of the two by latency), one value per run."""
    out: dict[str, Speedups] = {}
    for r in traces:
        lat = r.best_latency()
        if not math.isfinite(lat):
            continue
        h = programs[r.problem].heuristic_latency_s
        s = out.setdefault(r.agent, Speedups())
        s.alone.append(h / lat)
        s.prod.append(h / min(lat, h))
    return out


@dataclass
class Correlation:
    """Return against latency over the layouts measured on one problem.

    ``ret`` and ``latency`` ``[L]``: the sample's normalised returns and latencies over
    the heuristic's.
    """

    problem: str
    layouts: int
    pearson: float
    spearman: float
    ret: np.ndarray
    latency: np.ndarray


def correlations(
    traces: Sequence[Trace],
    programs: Mapping[str, ProgramInfo],
    order: Sequence[str],
    sample: int = 2000,
    seed: int = 0,
) -> list[Correlation]:
    """Pearson and Spearman correlation of return and latency per problem (in ``order``),
    over at most ``sample`` of the distinct layouts measured there (all agents and seeds)."""
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(seed)
    out = []
    for problem in order:
        mine = [r for r in traces if r.problem == problem]
        pairs = np.unique(
            np.concatenate([np.column_stack([r.ret / r.bound, r.latency_s]) for r in mine]), axis=0
        )
        if len(pairs) < 3:
            continue
        if len(pairs) > sample:
            pairs = pairs[rng.choice(len(pairs), sample, replace=False)]
        ret, lat = pairs[:, 0], pairs[:, 1] / programs[problem].heuristic_latency_s
        pearson, spearman = float(pearsonr(ret, lat)[0]), float(spearmanr(ret, lat)[0])
        out.append(Correlation(problem, len(pairs), pearson, spearman, ret, lat))
    return out


@dataclass
class Result:
    """What the section shows.

    Attributes:
        traces: every finished run's layouts, by path under the study's output.
        problems: the problems with runs, in the plan's order (then the rest, sorted).
        agents: the agents with runs, in the plan's order.
        programs: each problem's program and heuristic.
        speedups: Table 3, per agent.
        correlations: Figure 6, per problem.
        sample: the most layouts per problem in a correlation.
        learning: the planners' learning curves, per run.
        missing: the plan's groups (``problem/agent``) with fewer finished runs than its
            seeds, each with how many it has (a study stopped before them).
    """

    traces: list[Trace]
    problems: list[str]
    agents: list[str]
    programs: dict[str, ProgramInfo]
    speedups: dict[str, Speedups]
    correlations: list[Correlation]
    sample: int = 2000
    learning: list[Learning] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def seeds(self) -> int:
        """The most seeds of any problem."""
        return max(len({r.seed for r in self.traces if r.problem == p}) for p in self.problems)

    def runs(self, problem: str, agent: str) -> list[Trace]:
        """The traces of ``agent`` on ``problem``."""
        return [r for r in self.traces if r.problem == problem and r.agent == agent]

    def seconds(self) -> list[float]:
        """The runs' time budgets."""
        return sorted({r.seconds for r in self.traces})


def read_traces(out: Path) -> tuple[list[Trace], dict[str, ProgramInfo], list[Learning]]:
    """Every finished run under ``out`` (``<problem>/<agent>/seed<S>``), by path, and the
    planners' learning curves."""
    found = read_runs(out)
    for p in found.problems:
        log.warning("%s", p)
    traces, programs, learning = [], {}, []
    for run in sorted(found.runs, key=lambda r: str(Path(r.path).relative_to(out))):
        problem, agent = Path(run.path).relative_to(out).parts[:2]
        program = programs.setdefault(problem, program_of(run))
        trace = trace_of(run, problem, agent, program)
        if trace is not None:
            traces.append(trace)
        if curves := learning_of(run, problem, agent, program.bound):
            learning.append(curves)
    return traces, programs, learning


def missing_groups(cfg: DictConfig, traces: Sequence[Trace]) -> list[str]:
    """The plan's ``problem/agent`` groups with fewer finished runs than ``cfg.seeds``,
    as ``"problem/agent (k of n runs)"``."""
    have = Counter(group(r.problem, r.agent) for r in traces)
    wanted = int(cfg.seeds)
    return [
        f"{name} ({have[name]} of {wanted} runs)"
        for p in cfg.problems
        for a in agents_of(cfg, p)
        if have[name := group(p, a)] < wanted
    ]


def analyse(cfg: DictConfig, out: Path) -> Result:
    """Read every run's layouts and compute Table 2's, Table 3's and Figure 6's numbers."""
    traces, programs, learning = read_traces(Path(out))
    if not traces:
        raise StudyError(f"tpu-study: no run under {out}")
    problems = ordered({r.problem for r in traces}, list(cfg.problems))
    agents = ordered({r.agent for r in traces}, list(cfg.agents))
    sample = int(cfg.get("correlation_sample", 2000))
    return Result(
        traces,
        problems,
        agents,
        {p: programs[p] for p in problems},
        speedups(traces, programs),
        correlations(traces, programs, problems, sample),
        sample,
        learning,
        missing_groups(cfg, traces),
    )


# ------------------------------------------------------------------ tables
def mean_std_cell(values: Sequence[float]) -> str:
    """``mean ± std (n)`` of ``values`` (NaN aside; ``-``: none)."""
    ms = mean_std(values)
    return format_mean_std(ms) + f" ({ms.n})" if ms.n else "-"


def table2_markdown(result: Result) -> str:
    """Table 2: final normalised return, mean ± std over seeds (n), per problem and agent."""
    rows = []
    for p in result.problems:
        cells = []
        for a in result.agents:
            runs = result.runs(p, a)
            cells.append(mean_std_cell([r.final() for r in runs]) if runs else NOT_RUN)
        program = result.programs[p]
        rows.append([p, f"{program.buffers:,}", *cells, f"{program.heuristic_return:.4f}"])
    header = ["program", "buffers", *result.agents, HEURISTIC]
    return markdown_table(header, rows)


def counts_markdown(result: Result, count: Callable[[Trace], int]) -> str:
    """``count`` of each run (layouts played, paid ...): median [min-max] per problem and
    agent (one run: its count alone)."""
    rows = []
    for p in result.problems:
        cells = []
        for a in result.agents:
            runs = result.runs(p, a)
            cells.append(median_range([count(r) for r in runs], "{:,.0f}") if runs else NOT_RUN)
        rows.append([p, *cells])
    return markdown_table(["program", *result.agents], rows)


def equal_paid(result: Result, problem: str) -> int:
    """The fewest layouts any run on ``problem`` paid within its budget (0: a run paid
    none)."""
    return min(r.paid for r in result.traces if r.problem == problem)


def equal_paid_markdown(result: Result) -> str:
    """Best normalised return of each run's first M paid layouts, M the fewest any run on
    the problem paid: mean ± std over seeds (runs), per problem and agent."""
    rows = []
    for p in result.problems:
        m = equal_paid(result, p)
        cells = []
        for a in result.agents:
            runs = result.runs(p, a)
            best = [r.best_of_first(m) for r in runs] if m else []
            cells.append(mean_std_cell(best) if runs else NOT_RUN)
        rows.append([p, f"{m:,}", *cells, f"{result.programs[p].heuristic_return:.4f}"])
    return markdown_table(["program", "paid layouts M", *result.agents, HEURISTIC], rows)


def table3_markdown(result: Result) -> str:
    """Table 3: mean, max and min speedup over the heuristic, alone and as -prod."""
    rows = []
    for a in ordered(result.speedups, result.agents):
        s = result.speedups[a]
        for label, values in ((a, s.alone), (f"{a}-prod", s.prod)):
            v = np.asarray(values)
            faster = int((v > 1 + 1e-12).sum())
            rows.append(
                [
                    label,
                    len(v),
                    f"{v.mean():.4f}",
                    f"{v.max():.4f}",
                    f"{v.min():.4f}",
                    f"{faster}/{len(v)}",
                ]
            )
    header = ["agent", "runs", "mean", "max", "min", "runs faster than the heuristic"]
    return markdown_table(header, rows)


def correlation_markdown(result: Result) -> str:
    """Figure 6's numbers: layouts, Pearson and Spearman per problem."""
    rows = [
        [c.problem, c.layouts, f"{c.pearson:.4f}", f"{c.spearman:.4f}"] for c in result.correlations
    ]
    return markdown_table(["program", "layouts", "Pearson r", "Spearman rho"], rows)


# ------------------------------------------------------------------ figures
def plot_curves(result: Result, path: Path) -> Path:
    """Figure 5: best normalised return against wall time, mean ± std over seeds."""
    plt = pyplot()
    problems = result.problems
    cols = min(2, len(problems))
    rows = math.ceil(len(problems) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False)
    for ax, p in zip(axes.flat, problems):
        mine = [r for r in result.traces if r.problem == p]
        end = max(max(r.horizon for r in mine), 1e-9)
        grid = np.linspace(0, end, 200)
        for a in ordered({r.agent for r in mine}, result.agents):
            curves = np.array([r.curve(grid) for r in mine if r.agent == a])
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(curves, axis=0)
                std = np.nanstd(curves, axis=0)
            (line,) = ax.plot(grid, mean, label=f"{a} ({len(curves)})")
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        program = result.programs[p]
        ax.axhline(program.heuristic_return, color="black", linestyle="--", label=HEURISTIC)
        ax.set_title(f"{p} ({program.buffers:,} buffers)")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("best return / return bound")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(problems) :]:
        ax.axis("off")
    fig.tight_layout()
    return save_figure(fig, path, dpi=DPI)


def plot_learning(result: Result, path: Path) -> Path | None:
    """The planners' learning curves: one row per problem, one column per
    :data:`LEARNING_COLUMNS`, each run a line against wall time (None: no curves)."""
    problems = [p for p in result.problems if any(c.problem == p for c in result.learning)]
    if not problems:
        return None
    plt = pyplot()
    cols = len(LEARNING_COLUMNS)
    fig, axes = plt.subplots(
        len(problems), cols, figsize=(4.2 * cols, 3.0 * len(problems)), squeeze=False
    )
    planners = ordered({c.agent for c in result.learning}, result.agents)
    colours = {a: f"C{i}" for i, a in enumerate(planners)}
    for row, p in zip(axes, problems):
        for ax, (column, label) in zip(row, LEARNING_COLUMNS.items()):
            seen = set()
            for c in (c for c in result.learning if c.problem == p):
                name = None if c.agent in seen else c.agent
                seen.add(c.agent)
                ax.plot(c.wall_s, c.values[column], color=colours.get(c.agent), lw=1, label=name)
            if column == "value_loss":
                ax.set_yscale("log")
            if column == "mean_game_return":
                h = result.programs[p].heuristic_return
                ax.axhline(h, color="black", linestyle="--", lw=1, label=HEURISTIC)
            ax.set_title(f"{p}: {label}", fontsize=9)
            ax.set_xlabel("wall time (s)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=DPI)


def plot_correlation(corr: Sequence[Correlation], path: Path) -> Path:
    """Figure 6: latency over the heuristic's against normalised return, per problem."""
    plt = pyplot()
    fig, axes = plt.subplots(1, max(len(corr), 1), figsize=(4 * max(len(corr), 1), 3.6))
    for ax, c in zip(np.atleast_1d(axes), corr):
        ax.scatter(c.ret, c.latency, s=4, alpha=0.4)
        ax.set_title(f"{c.problem}\nPearson {c.pearson:.3f}, Spearman {c.spearman:.3f}", fontsize=9)
        ax.set_xlabel("return / return bound")
        ax.set_ylabel("latency / heuristic's")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=DPI)


def best_trace(result: Result, problem: str) -> Trace | None:
    """The run on ``problem`` with the best final return (and a recorded best layout)."""
    return max(
        (r for r in result.traces if r.problem == problem and r.best_actions is not None),
        key=lambda r: r.final() if math.isfinite(r.final()) else -math.inf,
        default=None,
    )


def plot_layouts(result: Result, problem: str, page: Page) -> dict[str, Path]:
    """The heuristic's layout and the best run's (by return) on ``problem``."""
    from egrl.agents.tpu_game import return_bound
    from hwmodels.tpu.game import Game
    from hwmodels.tpu.plot import plot_layout

    plt = pyplot()
    program = result.programs[problem]
    choices = [(HEURISTIC, program.heuristic_actions)]
    best = best_trace(result, problem)
    if best is not None:
        choices.append((best.agent, best.best_actions))
    out = {}
    for label, actions in choices:
        game = Game(program.program)
        game.play(actions)
        layout = game.layout()
        path = page.figure(f"tpu_layout_{problem}_{label}.png")
        fig = plot_layout(
            layout,
            path,
            title=f"{label} on {problem}: return {layout.ret / return_bound(program.program):.3f} "
            f"of the bound, latency {layout.latency_s() * 1e6:.1f} us",
        )
        plt.close(fig)
        out[label] = path
    return out


# ------------------------------------------------------------------ the section
def intro(result: Result, machine: str) -> str:
    """The section's first paragraph: what was compared, and how."""
    seconds = ", ".join(f"{s:g}" for s in result.seconds())
    return (
        "The comparison of Wang et al. 2023 (arXiv:2305.07440, Table 2, Figure 5, Table 3, "
        "Figure 6) on the `tpu-cmem` game: every agent gets the same wall-clock budget "
        f"({seconds} s per run, one process with one torch "
        f"thread each), up to {result.seeds()} seeds"
        + (f", on {machine}" if machine else "")
        + ". The planner stops at the deadline, mid-game if need be; ES, random play and "
        "EGRL at the first generation that ends past it; only layouts measured within the "
        "budget count. Returns are over each program's return bound "
        "(every instruction's all-HBM minus all-CMEM latency, the return if CMEM size and "
        "copy bandwidth were unlimited; the paper does not state its normaliser). "
        "`muzero-true` is the planner with the true game dynamics (AlphaZero-style). "
        "docs/planner.md describes the agents and what was scaled down for a CPU."
    )


def agents_line(cfg: DictConfig, result: Result) -> str:
    """The agents of the section with their egrl-train overrides, in the plan's order."""
    over = cfg.get("agent_overrides") or {}
    return (
        "Agents (egrl-train overrides): "
        + "; ".join(f"`{a}` (`{' '.join(over.get(a, []))}`)" for a in result.agents)
        + "."
    )


def render(cfg: DictConfig, result: Result, page: Page) -> str:
    """The ``tpu-study`` section: Tables 2 and 3, Figures 5, 6, 1 and 8."""
    curves = plot_curves(result, page.figure(CURVES_FIGURE))
    correlation = plot_correlation(result.correlations, page.figure(CORRELATION_FIGURE))
    layout_problem = cfg.get("layout_problem") or result.problems[0]
    layouts = plot_layouts(result, layout_problem, page)
    learning = plot_learning(result, page.figure(LEARNING_FIGURE))
    lines = [
        "## TPU memory mapping: the planner against ES, random play, EGRL and the heuristic",
        "",
        intro(result, page.machine),
        "",
        agents_line(cfg, result),
        "",
        *(
            [
                "Not in this section yet (the study was stopped before these runs; its "
                "command continues it): " + ", ".join(result.missing) + ".",
                "",
            ]
            if result.missing
            else []
        ),
        "### Final normalised return (Table 2): mean ± std over seeds (runs)",
        "",
        table2_markdown(result),
        "",
        "A `-` is a run that measured no layout within its budget; `not run`: the plan "
        "leaves the agent out of that program (`left_out`).",
        "",
        "### Layouts played and paid within the budget: median [min-max] per run",
        "",
        "Played: every layout an agent answered in its time, paid or already measured "
        "(a game each for the planner, ES and random play, a proposed map each for EGRL).",
        "",
        counts_markdown(result, lambda r: r.played),
        "",
        "Paid: the distinct layouts among them (a layout is measured once per run).",
        "",
        counts_markdown(result, lambda r: r.paid),
        "",
        "### At equal paid layouts: mean ± std over seeds (runs)",
        "",
        "The best return of each run's first M paid layouts over the bound, M the fewest "
        "any run on the program paid in its time: what each agent found per measurement, "
        "where a measurement is what a real chip charges for.",
        "",
        equal_paid_markdown(result),
        "",
        "### Best return against wall time (Figure 5)",
        "",
        "Mean ± std over the seeds that have measured a layout by then (so a curve can "
        "step down where a weaker seed's first layout arrives).",
        "",
        f"![reward against time]({page.link(curves)})",
        "",
        "### Latency speedup over the heuristic (Table 3)",
        "",
        "Each run's best layout by return (as the paper picks it), its program latency "
        "(with copy contention) against the heuristic's; `-prod` takes the better of the "
        "two (the paper's MMap-MuZero-prod), so it is never below 1.",
        "",
        table3_markdown(result),
        "",
        "### Return against latency (Figure 6)",
        "",
        "Over the distinct layouts measured on each program (every agent and seed, at "
        f"most {result.sample:,} sampled); a strong negative correlation means that a higher "
        "return is a faster program.",
        "",
        correlation_markdown(result),
        "",
        f"![return against latency]({page.link(correlation)})",
        "",
        f"### Memory layouts on {layout_problem} (Figures 1 and 8)",
        "",
    ]
    for label, path in layouts.items():
        lines += [f"![{label}]({page.link(path)})", ""]
    if learning is not None:
        lines += [
            "### The planners' learning curves",
            "",
            "Per generation of each run (one line per seed): the value loss and the "
            "predicted policy's entropy over the generation's training steps, and the mean "
            "return of its games over the bound (the heuristic's dashed).",
            "",
            f"![planner learning curves]({page.link(learning)})",
            "",
        ]
    lines += reproduce(page.command)
    return "\n".join(lines)
