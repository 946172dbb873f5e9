"""Noise: what a run on a noisy board reports, against what its map truly gives.

The plan (``configs/study/noise.yaml``) names one chip (the example chip, a script and its
arguments), a workload, the noise levels (``--noise-cv``, lognormal of mean 1 on every
reading), the agents and two ways to report: ``raw`` (``confirm.top=0``: the best single
reading) and ``confirm`` (the run's confirmed best, :mod:`egrl.confirm`). Every agent runs
at every level, each way, for ``seeds`` seeds at one budget of board runs, in
``OUT/<agent>/noise<cv>/<report>/seed<S>``; at noise 0 the chip is deterministic and the
run confirms nothing, so it runs once (``raw``), the noiseless reference.

Each run's noise draws are reproducible: the chip counts its readings in the run's own
directory (``--noise-state``) and draws from the run's seed.

For every run the map it returns (the confirmed best, else the best single reading's) is
measured again on the same chip without noise: its *true* speedup. The section gives,
per agent and level: reported over true speedup (the overstatement), the true speedup and
its share of the same agent's noiseless runs at the same budget, how often the 95%
interval held the true speedup, and the board runs per distinct map.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.report.runs import mapping_from_dict
from egrl.rundir import RunDir
from egrl.runs import Run
from studies.render import left_out, markdown_table, reproduce
from studies.runner import Page, RunSpec, StudyError, hydra_quote, read_runs, script_command
from studies.stats import median_range

log = logging.getLogger(__name__)

SECTION = "noise"
#: the two ways a run reports its best
REPORTS = ("raw", "confirm")


# ------------------------------------------------------------------ plan
def level_name(cv: float) -> str:
    """A noise level's directory: ``noise0``, ``noise0.05``."""
    return f"noise{float(cv):g}"


def group(agent: str, cv: float, report: str) -> str:
    return f"{agent}/{level_name(cv)}/{report}"


def chip_command(cfg: DictConfig, cv: float) -> str:
    """The chip's command line at noise ``cv``; its draws are seeded by the run's seed and
    counted in its own directory (Hydra resolves both when the run starts)."""
    command = script_command(cfg.chip)
    if not cv:
        return command
    state = "${hydra:runtime.output_dir}/noise.txt"
    return f"{command} --noise-cv {float(cv):g} --noise-seed ${{seed}} --noise-state {state}"


def check(cfg: DictConfig) -> None:
    if int(cfg.seeds) < 1 or int(cfg.budget) < 1:
        raise StudyError(f"noise: seeds={cfg.seeds} and budget={cfg.budget} must be >= 1")
    for agent in cfg.agents:
        if agent not in cfg.agent_overrides:
            raise StudyError(f"noise: agent {agent!r} has no overrides in the plan")
    if any(float(cv) < 0 for cv in cfg.levels):
        raise StudyError(f"noise: levels {list(cfg.levels)} must be >= 0")


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """One stage: every agent x level x report x seed (noise 0: ``raw`` only)."""
    check(cfg)
    specs = []
    for agent in cfg.agents:
        for cv in cfg.levels:
            for report in REPORTS if float(cv) else ("raw",):
                overrides = (
                    "hwmodel=external",
                    f"workload={cfg.workload}",
                    f"hwmodel.params.command={hydra_quote(chip_command(cfg, float(cv)))}",
                    *cfg.agent_overrides[agent],
                    *cfg.report_overrides[report],
                    f"budget={cfg.budget}",
                )
                g = group(agent, float(cv), report)
                specs += [RunSpec(g, seed, overrides) for seed in range(cfg.seeds)]
    yield specs


# ------------------------------------------------------------------ analysis
@dataclass
class Returned:
    """What one run returned and what it truly gives."""

    reported: float
    true: float
    low: float
    high: float
    readings_per_map: float

    @property
    def held(self) -> bool:
        return bool(self.low <= self.true <= self.high)


@dataclass
class Cell:
    agent: str
    cv: float
    report: str
    runs: list[Returned] = field(default_factory=list)

    def values(self, name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in self.runs], dtype=np.float64)

    @property
    def overstatement(self) -> np.ndarray:
        return self.values("reported") / self.values("true")


@dataclass
class StudyResult:
    cells: list[Cell]
    left_out: list[str]
    compiler_latency_s: float


def returned_map(best: dict) -> tuple[dict, float, float, float]:
    """The map a run returns (its confirmed best, else its best reading's), the speedup it
    reports and its interval (NaN without a confirmation)."""
    found = best.get("confirmed")
    if found is not None:
        return found["mapping"], found["speedup"], found["low"], found["high"]
    return best["mapping"], best["speedup"], float("nan"), float("nan")


def paid_maps(run: Path, fallback: int) -> int:
    """The distinct maps the search of the run at ``run`` paid for (its newest checkpoint's
    ``paid_maps``: board runs that read a kept map again are not maps), ``fallback`` for a
    run whose checkpoint predates the count."""
    from egrl.checkpoint import load_plain

    checkpoint = RunDir(run).latest_checkpoint()
    state = load_plain(checkpoint) if checkpoint is not None else {}
    paid = state.get("paid_maps")
    return fallback if paid is None else int(paid)


def noiseless_env(cfg: DictConfig):
    """The chip without noise, bound to the plan's workload."""
    from egrl import make_env

    return make_env("external", str(cfg.workload), command=shlex.split(script_command(cfg.chip)))


def read_cell_runs(runs: Sequence[Run], env, notes: list[str]) -> list[Returned]:
    """Each finished run's report and the true speedup of its map, one batch on ``env``."""
    found, maps = [], []
    for run in runs:
        best = RunDir(run.path).read_best_map()
        if best is None:
            notes.append(f"{run.path}: no best_mapping.json")
            continue
        mapping, reported, low, high = returned_map(best)
        if mapping is None:
            notes.append(f"{run.path}: no map earned a speedup")
            continue
        confirmed = best.get("confirmed") or {}
        confirm = confirmed.get("board_runs", confirmed.get("readings", 0))  # older: readings
        iterations = int(best["iterations"])
        searched = paid_maps(Path(run.path), iterations - confirm)
        distinct = searched + (len(best["confirmed"]["candidates"]) + 1 if confirm else 0)
        maps.append(mapping_from_dict(env, mapping, str(RunDir(run.path).best_map)))
        found.append((reported, low, high, iterations / max(distinct, 1)))
    if not found:
        return []
    true = env.evaluate(np.stack(maps)).speedup
    return [
        Returned(reported=r, true=float(t), low=lo, high=hi, readings_per_map=per)
        for (r, lo, hi, per), t in zip(found, true)
    ]


def analyse(cfg: DictConfig, out: Path) -> StudyResult:
    env = noiseless_env(cfg)
    cells, notes = [], []
    for agent in cfg.agents:
        for cv in cfg.levels:
            for report in REPORTS if float(cv) else ("raw",):
                found = read_runs(out / group(agent, float(cv), report))
                runs = [r for r in found.runs if r.budget == int(cfg.budget)]
                notes += [f"{r.path}: unfinished" for r in found.incomplete]
                cell = Cell(agent, float(cv), report, read_cell_runs(runs, env, notes))
                if cell.runs:
                    cells.append(cell)
    return StudyResult(cells, notes, float(env.baseline_latency_s))


# ------------------------------------------------------------------ rendering
def cell_of(result: StudyResult, agent: str, cv: float, report: str) -> Cell | None:
    return next((c for c in result.cells if (c.agent, c.cv, c.report) == (agent, cv, report)), None)


def table_markdown(cfg: DictConfig, result: StudyResult) -> str:
    rows = []
    for agent in cfg.agents:
        clean = cell_of(result, agent, 0.0, "raw")
        reference = np.median(clean.values("true")) if clean else float("nan")
        for cv in cfg.levels:
            for report in REPORTS if float(cv) else ("raw",):
                c = cell_of(result, agent, float(cv), report)
                if c is None:
                    continue
                true = c.values("true")
                held = (
                    f"{sum(r.held for r in c.runs)}/{len(c.runs)}" if report == "confirm" else "-"
                )
                rows.append(
                    (
                        agent,
                        f"{100 * float(cv):g}%",
                        report,
                        median_range(c.overstatement),
                        median_range(c.values("reported")),
                        median_range(true),
                        f"{np.median(true) / reference:.3f}" if clean else "-",
                        held,
                        f"{np.median(c.values('readings_per_map')):.3f}",
                        str(len(c.runs)),
                    )
                )
    return markdown_table(
        (
            "agent",
            "noise",
            "report",
            "reported / true",
            "reported",
            "true",
            "true vs noiseless",
            "interval held",
            "board runs per map",
            "runs",
        ),
        rows,
    )


def target_text(cfg: DictConfig, result: StudyResult) -> str:
    """The targets at the plan's ``target_cv`` (5%), per agent, read off the table."""
    cv = float(cfg.target_cv)
    lines = []
    for agent in cfg.agents:
        clean, c = cell_of(result, agent, 0.0, "raw"), cell_of(result, agent, cv, "confirm")
        if c is None:
            continue
        over = float(np.median(c.overstatement))
        held = np.mean([r.held for r in c.runs])
        share = (
            float(np.median(c.values("true")) / np.median(clean.values("true")))
            if clean
            else np.nan
        )
        lines.append(
            f"- {agent} at {100 * cv:g}% noise with confirmation: reported / true "
            f"{over:.3f} (target <= 1.02: {'met' if over <= 1.02 else 'not met'}); true "
            f"speedup {share:.3f} of the noiseless runs' (target >= 0.95: "
            f"{'met' if share >= 0.95 else 'not met'}); the interval held in "
            f"{100 * held:.0f}% of runs (target >= 90%: {'met' if held >= 0.9 else 'not met'})."
        )
    confirmed = [r for c in result.cells if c.report == "confirm" for r in c.runs]
    if confirmed:
        held = np.mean([r.held for r in confirmed])
        lines.append(
            f"- Over every confirming run of the study ({len(confirmed)}), the 95% interval "
            f"held the true speedup in {100 * held:.0f}% (target >= 90%: "
            f"{'met' if held >= 0.9 else 'not met'})."
        )
    return "\n".join(lines)


def render(cfg: DictConfig, result: StudyResult, page: Page) -> str:
    chip = " ".join([str(cfg.chip.script), *map(str, cfg.chip.get("args", []))])
    lines = [
        "## Noise: reported against true speedup on a noisy board",
        "",
        f"The example chip (`{chip}`) on {cfg.workload}, every latency reading multiplied by "
        f"lognormal noise of mean 1 and the level's coefficient of variation "
        f"(`--noise-cv`), {cfg.seeds} seeds per cell, a budget of {cfg.budget} board runs"
        + (f", on {page.machine}" if page.machine else "")
        + ". `raw`: the run reports its best single reading (`confirm.top=0`); `confirm`: "
        f"its confirmed best ({', '.join(f'`{o}`' for o in cfg.report_overrides.confirm)}, "
        'reserved from the budget, `docs/training.md`, "Noisy targets"). `true`: the '
        "returned map measured on the same chip without noise, over the compiler's map "
        f"likewise ({result.compiler_latency_s * 1e6:.2f} us). `reported / true`: how "
        "much the run overstates its map; `true vs noiseless`: the median true speedup "
        "over the same agent's at noise 0 (same budget); `interval held`: runs whose 95% "
        "interval held the true speedup; `board runs per map`: the run's board runs over "
        "the distinct maps it read (the compiler's included). Median [min-max] over seeds.",
        "",
        table_markdown(cfg, result),
        "",
    ]
    target = target_text(cfg, result)
    lines += [target, ""] if target else []
    lines += left_out(result.left_out)
    lines += reproduce(page.command)
    return "\n".join(lines)
