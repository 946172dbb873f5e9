"""The comparison of Wang et al. ("Optimizing Memory Mapping Using Deep Reinforcement
Learning", arXiv:2305.07440, section 5.2) on the ``tpu-cmem`` game, at equal wall clock.

Every run is one agent on one program for ``seconds`` of wall clock (checked between
generations, and by the planner between moves: its game unfinished at the deadline is
dropped; another agent's generation that starts before the deadline finishes), in its
own process with one torch thread. The target records every layout it measures: when (seconds since
the search started), the game's return and the program's latency. From those records:

* **Table 2**: the best return found within the time budget, over the program's return
  bound (:func:`egrl.agents.tpu_game.return_bound`), mean and spread over seeds, for
  the planner, its true-dynamics ablation, ES, random legal play, EGRL and the heuristic;
* **Figure 5**: that best normalised return against wall time, mean and spread;
* **Table 3**: the latency speedup over the heuristic of each agent's best layout (by
  return, as in the paper) alone and as the -prod hybrid (the better of it and the
  heuristic's by latency);
* **Figure 6**: the correlation of return and latency over the layouts measured on each
  program (Pearson and Spearman), and a scatter plot;
* a memory-layout figure (Figures 1 and 8) of the heuristic and of the best agent.

Runs are written to ``OUT/<problem>/<agent>/seed<S>.json``; a run whose file exists is
not run again, so the same command continues a killed study.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

#: problem -> (workload, repeats): four sizes, from a few hundred to about 10,000 buffers
#: (the paper's Table 2 has 300, 3,020, 9,084 and 9,888)
PROBLEMS: dict[str, tuple[str, int]] = {
    "resnet50-op": ("resnet50@op", 1),
    "gpt2-op-x4": ("gpt2@op", 4),
    "bert-base-op-x14": ("bert-base@op", 14),
    "bert-large-op-x8": ("bert-large@op", 8),
}
#: agent label -> egrl-train overrides of the agent
AGENTS: dict[str, tuple[str, ...]] = {
    "muzero": ("agent=muzero",),
    "muzero-true": ("agent=muzero", "agent.dynamics=true"),
    "es": ("agent=es",),
    "random-legal": ("agent=random-legal",),
    "egrl": ("agent=egrl",),
}
HEURISTIC = "heuristic"
#: paid samples no run reaches in its time (the time is the budget)
UNBOUNDED = 10**7


# --------------------------------------------------------------------- runs
def recording_target_class():
    """:class:`hwmodels.tpu.target.TPUTarget` that records every layout it plays."""
    from hwmodels.tpu.target import TPUTarget

    class RecordingTarget(TPUTarget):
        """Records ``(seconds since start(), return, latency)`` of every layout played."""

        def start(self) -> None:
            self.t0 = time.perf_counter()
            self.records: list[tuple[float, float, float]] = []
            self.best: tuple[float, np.ndarray | None] = (-math.inf, None)

        def play(self, actions: np.ndarray) -> tuple:
            result, layout = super().play(actions)
            if hasattr(self, "t0"):
                lat = layout.latency_s(self.contention)
                self.records.append((time.perf_counter() - self.t0, result.ret, lat))
                if result.ret > self.best[0]:
                    self.best = (result.ret, result.actions.copy())
            return result, layout

    return RecordingTarget


@cache
def program_of(problem: str):
    """The problem's program (cached per process)."""
    import hwmodels
    import workloads

    name, repeats = PROBLEMS[problem]
    return hwmodels.make("tpu-cmem", repeats=repeats).program(workloads.load(name))


def train_config(agent: str, seed: int, overrides: Sequence[str] = ()):
    """The :class:`egrl.config.TrainConfig` ``egrl-train`` would build for the agent."""
    from hydra import compose, initialize_config_dir

    import configs
    from egrl.config import from_mapping

    args = [
        "hwmodel=tpu-cmem",
        *AGENTS[agent],
        f"seed={seed}",
        f"budget={UNBOUNDED}",
        "progress=false",
        *overrides,
    ]
    config_dir = str(Path(configs.__file__).resolve().parent)
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(compose(config_name="train", overrides=args), resolve=True)
    return from_mapping({k: v for k, v in cfg.items() if k not in ("hwmodel", "workload")})


def run_one(
    problem: str, agent: str, seed: int, seconds: float, overrides: Sequence[str] = ()
) -> dict:
    """One agent on one problem for ``seconds``; the run's record (plain data)."""
    import torch

    import workloads
    from egrl.agents import make_agent
    from egrl.agents.tpu_game import return_bound
    from egrl.env import Env

    torch.set_num_threads(1)
    program = program_of(problem)
    target = recording_target_class()(program)
    env = Env(target, workloads.load(PROBLEMS[problem][0]))
    agent_obj = make_agent(env, train_config(agent, seed, overrides), None)
    target.start()
    if hasattr(agent_obj, "deadline"):  # game-playing agents stop inside a game
        agent_obj.deadline = target.t0 + seconds

    def stop_at_deadline(_row: dict) -> None:
        if time.perf_counter() - target.t0 >= seconds:
            agent_obj.stop_reason = f"time budget of {seconds:g} s spent"

    agent_obj.run(on_generation=stop_at_deadline)
    rec = np.array(target.records, dtype=np.float64).reshape(-1, 3)
    best_ret, best_actions = target.best
    return {
        "problem": problem,
        "agent": agent,
        "seed": seed,
        "seconds": seconds,
        "wall_s": time.perf_counter() - target.t0,
        "iterations": agent_obj.iterations,
        "bound": return_bound(program),
        "time_s": rec[:, 0].tolist(),
        "ret": rec[:, 1].tolist(),
        "latency_s": rec[:, 2].tolist(),
        "best_return": best_ret,
        "best_actions": None if best_actions is None else best_actions.tolist(),
    }


def run_path(out: str | Path, problem: str, agent: str, seed: int) -> Path:
    return Path(out) / problem / agent / f"seed{seed}.json"


def _run_and_save(args: tuple) -> str:
    out, problem, agent, seed, seconds, overrides = args
    path = run_path(out, problem, agent, seed)
    record = run_one(problem, agent, seed, seconds, overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
    return str(path)


def run_study(
    out: str | Path,
    problems: Sequence[str],
    agents: Sequence[str],
    seeds: int,
    seconds: float,
    n_jobs: int = 2,
    overrides: Sequence[str] = (),
) -> list[str]:
    """Run every (problem, agent, seed) not run yet, ``n_jobs`` at a time."""
    todo = [
        (str(out), p, a, s, seconds, tuple(overrides))
        for p in problems
        for s in range(seeds)
        for a in agents
        if not run_path(out, p, a, s).exists()
    ]
    log.info("tpu study: %d runs to do, %g s each, %d at a time", len(todo), seconds, n_jobs)
    if n_jobs <= 1:
        return [_run_and_save(t) for t in todo]
    with ProcessPoolExecutor(max_workers=n_jobs) as pool:
        return list(pool.map(_run_and_save, todo))


# ----------------------------------------------------------------- analysis
@dataclass
class Run:
    """One run's records: per measured layout ``time_s``, ``ret`` and ``latency_s``
    (arrays ``[R]``, in measurement order)."""

    problem: str
    agent: str
    seed: int
    seconds: float
    bound: float
    time_s: np.ndarray
    ret: np.ndarray
    latency_s: np.ndarray
    best_actions: np.ndarray | None = None

    @classmethod
    def from_record(cls, rec: Mapping) -> Run:
        best = rec.get("best_actions")
        return cls(
            problem=rec["problem"],
            agent=rec["agent"],
            seed=int(rec["seed"]),
            seconds=float(rec["seconds"]),
            bound=float(rec["bound"]),
            time_s=np.asarray(rec["time_s"], dtype=np.float64),
            ret=np.asarray(rec["ret"], dtype=np.float64),
            latency_s=np.asarray(rec["latency_s"], dtype=np.float64),
            best_actions=None if best is None else np.asarray(best, dtype=np.int64),
        )

    def within(self, seconds: float | None = None) -> np.ndarray:
        """bool ``[R]``: layouts measured within the time budget."""
        return self.time_s <= (self.seconds if seconds is None else seconds)

    def final(self) -> float:
        """Best normalised return within the budget (NaN: no layout in time)."""
        ok = self.within()
        return float(self.ret[ok].max() / self.bound) if ok.any() else math.nan

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


def load_runs(out: str | Path) -> list[Run]:
    """Every finished run under ``out``."""
    return [
        Run.from_record(json.loads(p.read_text())) for p in sorted(Path(out).glob("*/*/seed*.json"))
    ]


@dataclass
class Heuristic:
    """The native heuristic on a problem: its normalised return and latency."""

    norm_return: float
    latency_s: float
    actions: np.ndarray


def heuristic_of(problem: str) -> Heuristic:
    from egrl.agents.tpu_game import return_bound
    from hwmodels.tpu.heuristic import native_play

    p = program_of(problem)
    result, layout = native_play(p)
    return Heuristic(result.ret / return_bound(p), layout.latency_s(), result.actions)


def mean_std(x: Sequence[float]) -> tuple[float, float, int]:
    """Mean, sample standard deviation and count of the finite values."""
    a = np.asarray(x, dtype=np.float64)
    a = a[np.isfinite(a)]
    if not a.size:
        return math.nan, math.nan, 0
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0, int(a.size)


@dataclass
class Speedups:
    """Latency speedups over the heuristic of one agent's best layouts ``[runs]``."""

    alone: list[float] = field(default_factory=list)
    prod: list[float] = field(default_factory=list)


def speedups(runs: Sequence[Run], heuristics: Mapping[str, Heuristic]) -> dict[str, Speedups]:
    """Per agent: the heuristic's latency over its best layout's (alone) and over the
    -prod hybrid's (the better of the two by latency), one value per run."""
    out: dict[str, Speedups] = {}
    for r in runs:
        lat = r.best_latency()
        if not math.isfinite(lat):
            continue
        h = heuristics[r.problem].latency_s
        s = out.setdefault(r.agent, Speedups())
        s.alone.append(h / lat)
        s.prod.append(h / min(lat, h))
    return out


@dataclass
class Correlation:
    """Return against latency over the layouts measured on one problem."""

    problem: str
    layouts: int
    pearson: float
    spearman: float
    ret: np.ndarray  # normalised returns of the sample
    latency: np.ndarray  # latencies over the heuristic's


def correlations(
    runs: Sequence[Run],
    heuristics: Mapping[str, Heuristic],
    sample: int = 2000,
    seed: int = 0,
) -> list[Correlation]:
    """Pearson and Spearman correlation of return and latency per problem, over at most
    ``sample`` of the distinct layouts measured there (all agents and seeds)."""
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(seed)
    out = []
    for problem in ordered({r.problem for r in runs}, list(PROBLEMS)):
        mine = [r for r in runs if r.problem == problem]
        pairs = np.unique(
            np.concatenate([np.column_stack([r.ret / r.bound, r.latency_s]) for r in mine]), axis=0
        )
        if len(pairs) < 3:
            continue
        if len(pairs) > sample:
            pairs = pairs[rng.choice(len(pairs), sample, replace=False)]
        ret, lat = pairs[:, 0], pairs[:, 1] / heuristics[problem].latency_s
        out.append(
            Correlation(
                problem,
                len(pairs),
                float(pearsonr(ret, lat)[0]),
                float(spearmanr(ret, lat)[0]),
                ret,
                lat,
            )
        )
    return out


def ordered(names, order: Sequence[str]) -> list[str]:
    """``names`` in ``order`` first, then the rest sorted."""
    names = set(names)
    return [n for n in order if n in names] + sorted(names - set(order))


def table2_markdown(runs: Sequence[Run], heuristics: Mapping[str, Heuristic]) -> str:
    """Table 2: final normalised return, mean ± std over seeds (n), per problem and agent."""
    agents = ordered({r.agent for r in runs}, list(AGENTS))
    problems = ordered({r.problem for r in runs}, list(PROBLEMS))
    head = "| program | buffers | " + " | ".join(agents) + f" | {HEURISTIC} |"
    lines = [head, "|---|---:|" + "---:|" * (len(agents) + 1)]
    for p in problems:
        cells = []
        for a in agents:
            m, s, n = mean_std([r.final() for r in runs if r.problem == p and r.agent == a])
            cells.append("-" if n == 0 else f"{m:.4f} ± {s:.4f} ({n})")
        buffers = program_of(p).num_buffers
        lines.append(
            f"| {p} | {buffers:,} | " + " | ".join(cells) + f" | {heuristics[p].norm_return:.4f} |"
        )
    return "\n".join(lines)


def table3_markdown(speed: Mapping[str, Speedups]) -> str:
    """Table 3: mean, max and min speedup over the heuristic, alone and as -prod."""
    lines = [
        "| agent | runs | mean | max | min | runs faster than the heuristic |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for a in ordered(speed, list(AGENTS)):
        for label, values in ((a, speed[a].alone), (f"{a}-prod", speed[a].prod)):
            v = np.asarray(values)
            lines.append(
                f"| {label} | {len(v)} | {v.mean():.4f} | {v.max():.4f} | {v.min():.4f} "
                f"| {int((v > 1 + 1e-12).sum())}/{len(v)} |"
            )
    return "\n".join(lines)


def correlation_markdown(corr: Sequence[Correlation]) -> str:
    lines = [
        "| program | layouts | Pearson r | Spearman rho |",
        "|---|---:|---:|---:|",
    ]
    for c in corr:
        lines.append(f"| {c.problem} | {c.layouts} | {c.pearson:.4f} | {c.spearman:.4f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ figures
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(runs: Sequence[Run], heuristics: Mapping[str, Heuristic], path: str | Path) -> Path:
    """Figure 5: best normalised return against wall time, mean ± std over seeds."""
    plt = _pyplot()
    problems = ordered({r.problem for r in runs}, list(PROBLEMS))
    cols = min(2, len(problems))
    rows = math.ceil(len(problems) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False)
    for ax, p in zip(axes.flat, problems):
        mine = [r for r in runs if r.problem == p]
        end = max(max(r.seconds for r in mine), 1e-9)
        grid = np.linspace(0, end, 200)
        for a in ordered({r.agent for r in mine}, list(AGENTS)):
            curves = np.array([r.curve(grid) for r in mine if r.agent == a])
            with np.errstate(all="ignore"), _quiet():
                mean = np.nanmean(curves, axis=0)
                std = np.nanstd(curves, axis=0)
            (line,) = ax.plot(grid, mean, label=f"{a} ({len(curves)})")
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        ax.axhline(heuristics[p].norm_return, color="black", linestyle="--", label=HEURISTIC)
        ax.set_title(f"{p} ({program_of(p).num_buffers:,} buffers)")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("best return / return bound")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(problems) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


class _quiet:
    """Silence NumPy's all-NaN warnings inside a ``with``."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def plot_correlation(corr: Sequence[Correlation], path: str | Path) -> Path:
    """Figure 6: latency over the heuristic's against normalised return, per problem."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, max(len(corr), 1), figsize=(4 * max(len(corr), 1), 3.6))
    for ax, c in zip(np.atleast_1d(axes), corr):
        ax.scatter(c.ret, c.latency, s=4, alpha=0.4)
        ax.set_title(f"{c.problem}\nPearson {c.pearson:.3f}, Spearman {c.spearman:.3f}", fontsize=9)
        ax.set_xlabel("return / return bound")
        ax.set_ylabel("latency / heuristic's")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_layouts(
    runs: Sequence[Run], heuristics: Mapping[str, Heuristic], problem: str, figures: Path
) -> dict[str, Path]:
    """The heuristic's layout and the best run's (by return) on ``problem``."""
    from hwmodels.tpu.game import Game
    from hwmodels.tpu.plot import plot_layout

    plt = _pyplot()
    p = program_of(problem)
    out = {}
    best = max(
        (r for r in runs if r.problem == problem and r.best_actions is not None),
        key=lambda r: r.final() if math.isfinite(r.final()) else -math.inf,
        default=None,
    )
    choices = [(HEURISTIC, heuristics[problem].actions)]
    if best is not None:
        choices.append((best.agent, best.best_actions))
    for label, actions in choices:
        game = Game(p)
        game.play(actions)
        layout = game.layout()
        path = figures / f"tpu_layout_{problem}_{label}.png"
        fig = plot_layout(
            layout,
            path,
            title=f"{label} on {problem}: return {layout.ret / _bound(p):.3f} of the bound, "
            f"latency {layout.latency_s() * 1e6:.1f} us",
        )
        plt.close(fig)
        out[label] = path
    return out


def _bound(program) -> float:
    from egrl.agents.tpu_game import return_bound

    return return_bound(program)


# ------------------------------------------------------------------- report
@dataclass
class StudyReport:
    text: str
    runs: list[Run]
    figures: dict[str, Path]


def report(
    out: str | Path,
    figures: str | Path,
    page: str | Path,
    command: str = "",
    machine: str = "",
    layout_problem: str | None = None,
) -> StudyReport:
    """Analyse every run under ``out``: figures into ``figures``, the section's markdown
    (figure links relative to ``page``'s folder)."""
    runs = load_runs(out)
    if not runs:
        raise FileNotFoundError(f"no tpu-study run under {out}")
    figures = Path(figures)
    figures.mkdir(parents=True, exist_ok=True)
    problems = ordered({r.problem for r in runs}, list(PROBLEMS))
    heuristics = {p: heuristic_of(p) for p in problems}
    paths = {
        "curves": plot_curves(runs, heuristics, figures / "tpu_reward_curves.png"),
    }
    corr = correlations(runs, heuristics)
    paths["correlation"] = plot_correlation(corr, figures / "tpu_reward_latency.png")
    layout_problem = layout_problem or problems[0]
    for label, path in plot_layouts(runs, heuristics, layout_problem, figures).items():
        paths[f"layout-{label}"] = path
    rel = {k: os.path.relpath(v, Path(page).resolve().parent) for k, v in paths.items()}
    speed = speedups(runs, heuristics)
    seeds = max(len({r.seed for r in runs if r.problem == p}) for p in problems)
    seconds = sorted({r.seconds for r in runs})
    lines = [
        "## TPU memory mapping: the planner against ES, random play, EGRL and the heuristic",
        "",
        f"The comparison of Wang et al. 2023 (arXiv:2305.07440, Table 2, Figure 5, Table 3, "
        f"Figure 6) on the `tpu-cmem` game: every agent gets the same wall-clock budget "
        f"({', '.join(f'{s:g}' for s in seconds)} s per run, one process with one torch "
        f"thread each), up to {seeds} seeds"
        + (f", on {machine}" if machine else "")
        + ". The planner stops at the deadline, mid-game if need be; ES, random play and "
        "EGRL at the first generation that ends past it; only layouts measured within the "
        "budget count. Returns are over each program's return bound "
        "(every instruction's all-HBM minus all-CMEM latency, the return if CMEM size and "
        "copy bandwidth were unlimited; the paper does not state its normaliser). "
        "`muzero-true` is the planner with the true game dynamics (AlphaZero-style). "
        "docs/planner.md describes the agents and what was scaled down for a CPU.",
        "",
        "### Final normalised return (Table 2): mean ± std over seeds (runs)",
        "",
        table2_markdown(runs, heuristics),
        "",
        "A `-` is a run that measured no layout within its budget.",
        "",
        "### Best return against wall time (Figure 5)",
        "",
        "Mean ± std over the seeds that have measured a layout by then (so a curve can "
        "step down where a weaker seed's first layout arrives).",
        "",
        f"![reward against time]({rel['curves']})",
        "",
        "### Latency speedup over the heuristic (Table 3)",
        "",
        "Each run's best layout by return (as the paper picks it), its program latency "
        "(with copy contention) against the heuristic's; `-prod` takes the better of the "
        "two (the paper's MMap-MuZero-prod), so it is never below 1.",
        "",
        table3_markdown(speed),
        "",
        "### Return against latency (Figure 6)",
        "",
        "Over the distinct layouts measured on each program (every agent and seed, at "
        "most 2,000 sampled); a strong negative correlation means that a higher return is a "
        "faster program.",
        "",
        correlation_markdown(corr),
        "",
        f"![return against latency]({rel['correlation']})",
        "",
        f"### Memory layouts on {layout_problem} (Figures 1 and 8)",
        "",
    ]
    for key in rel:
        if key.startswith("layout-"):
            lines += [f"![{key[7:]}]({rel[key]})", ""]
    if command:
        lines += ["Reproduce:", "", "```", command, "```", ""]
    return StudyReport("\n".join(lines), runs, paths)
