"""The multi-chip study: the paper's Figure 5 and Table 2 on the mcm87 test graphs.

    python -m studies run mcm-study [seeds=5 budget=2000 out=...]
    python -m studies report mcm-study out=...

The plan (``configs/study/mcm-study.yaml``) names the dataset; its split gives the graphs
of each role (``workloads.datasets.split``): ``train`` pretrains, ``val`` picks the
snapshot, ``test`` is searched. Layout of the study's output ``OUT``::

    OUT/pretrain/              egrl-transfer pretrain on the training graphs (stage 1)
    OUT/selection.json         the validation geomean of every snapshot and the chosen one
    OUT/zero-shot/W/seedS/     agent=zero-shot: the chosen snapshot's greedy, then sampled maps
    OUT/scratch/W/AGENT/seedS/ random, sa, pg, egrl from scratch
    OUT/finetune/W/AGENT/seedS/  pg, egrl with init_from=the chosen snapshot
    OUT/limits.json            contiguous DP and CP-SAT optimum per test graph (cache)
    OUT/report/curves.csv      every method's mean curve (Figure 5's data)

The pretraining trains one learner on many workloads, which only ``egrl-transfer
pretrain`` does: it is the one step not launched as an ``egrl-train`` run
(:class:`studies.runner.CommandSpec`; a killed one resumes from its last checkpoint).
Runs are read by their config wherever they sit under ``scratch/``, ``finetune/`` and
``zero-shot/``, so the runs of the former ``scripts/mcm_study.py`` (Hydra's
``scratch/agent=...,seed=S,workload.name=W`` directories) are read unchanged, and a run it
finished is not planned again.

The numbers (geomean curves, Table 2, the CP-SAT limits) are :mod:`studies.mcm_curves`'s.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

import workloads
import workloads.datasets as ds
from egrl.agents.egrl.init_from import list_snapshots
from egrl.agents.egrl.transfer import read_csv, read_run_info
from egrl.env import make_env
from egrl.rundir import RunDir
from egrl.runs import Problem
from studies.mcm_curves import (
    FINETUNE,
    ZERO_SHOT,
    LevelCell,
    LevelRow,
    MethodCurve,
    default_levels,
    level_table,
    limits,
    method_curves,
    method_label,
    method_of,
    seed_curves,
)
from studies.render import markdown_table, pyplot, save_figure
from studies.runner import CommandSpec, Page, RunSpec, hydra_quote, read_runs
from studies.stats import format_mean_std, geomean

log = logging.getLogger(__name__)

SECTION = "mcm-study"
FIGURE = "mcm_figure5.png"
SELECTION_FILE = "selection.json"
LIMITS_FILE = "limits.json"
CURVES_FILE = Path("report") / "curves.csv"
PRETRAIN, SCRATCH, FINETUNE_DIR, ZERO_SHOT_DIR = "pretrain", "scratch", "finetune", "zero-shot"


# ------------------------------------------------------------------ graphs
@dataclass
class Graphs:
    """The graphs of each role, and the test graphs left out (name -> why)."""

    train: list[str]
    val: list[str]
    test: list[str]
    excluded: dict[str, str] = field(default_factory=dict)


def smallest(names: list[str], k: int) -> list[str]:
    """The ``k`` graphs of ``names`` with the fewest nodes (ties by name)."""
    return sorted(names, key=lambda n: (workloads.load(n).num_nodes, n))[:k]


def split(cfg: DictConfig) -> dict[str, list[str]]:
    """The plan's dataset split, part -> graphs (``cfg.smallest``, part -> k: only the k
    smallest graphs of that part)."""
    parts = ds.split(str(cfg.dataset))
    for part, k in dict(cfg.get("smallest") or {}).items():
        parts[part] = smallest(parts[part], int(k))
    return parts


def study_graphs(cfg: DictConfig, hw_params: Mapping | None = None) -> Graphs:
    """The plan's split less the test graphs no partition fits on the package (with
    ``hw_params``), the reason kept."""
    parts = split(cfg)
    graphs = Graphs(parts["train"], parts["val"], [])
    params = {k: v for k, v in (hw_params or {}).items() if k not in ("native", "seed")}
    for w in parts["test"]:
        try:
            make_env("mcm", w, **params)
        except ValueError as exc:
            graphs.excluded[w] = str(exc)
            log.warning("left out of the study: %s", exc)
        else:
            graphs.test.append(w)
    return graphs


def pretrain_params(out: Path) -> dict:
    """The pretraining's hardware parameters, its seed aside ({} before it exists)."""
    pre = out / PRETRAIN
    if not RunDir(pre).config.exists():
        return {}
    return {k: v for k, v in read_run_info(pre).hw_params.items() if k != "seed"}


# ------------------------------------------------------------------ the plan
def pretrain_step(cfg: DictConfig, out: Path) -> CommandSpec:
    """``egrl-transfer pretrain`` of one learner on the training graphs, the validation
    graphs held out (or the resume of a killed one); done once its ``transfer.csv`` exists."""
    pre = RunDir(out / PRETRAIN)
    parts = split(cfg)
    argv = [sys.executable, "-m", "egrl.cli.transfer", "pretrain"]
    if pre.checkpoints.is_dir() and any(pre.checkpoints.iterdir()):
        argv += ["--resume", str(pre.path)]
    else:
        argv += ["--train", *parts["train"], "--holdout", *parts["val"]]
        argv += ["--budget", str(cfg.pretrain_budget), "--seed", "0", "--out", str(pre.path)]
        argv += [f"snapshot_every={cfg.snapshot_every}", *cfg.overrides, *cfg.target]
        argv += [*cfg.policy, *cfg.pretrain_overrides]
    return CommandSpec(PRETRAIN, tuple(argv), str(pre.transfer_csv.relative_to(out)))


def select_snapshot(out: Path, val: Sequence[str]) -> dict:
    """The snapshot whose greedy maps have the best geomean speedup on the ``val`` graphs.

    Ties go to the earliest snapshot. The choice and every snapshot's geomean are written
    to ``OUT/selection.json``.
    """
    pre = RunDir(out / PRETRAIN)
    by_iter: dict[int, dict[str, float]] = {}
    for r in read_csv(pre.transfer_csv):
        if r["policy"] == "learner" and r["target"] in val:
            by_iter.setdefault(r["iterations"], {})[r["target"]] = r["greedy_speedup"]
    scores = {
        it: geomean([v[w] for w in val]) if set(v) >= set(val) else math.nan
        for it, v in sorted(by_iter.items())
    }
    ranked = [it for it in scores if math.isfinite(scores[it])]
    if not ranked:
        raise RuntimeError(f"no snapshot of {pre.path} has a valid geomean on {list(val)}")
    best = max(ranked, key=lambda it: (scores[it], -it))
    snapshot = next(s for s in list_snapshots(pre.path) if s.iterations == best)
    choice = {
        "snapshot": str(snapshot.path),
        "iterations": best,
        "val_geomean_greedy": scores[best],
        "validation": list(val),
        "scores": {str(k): v for k, v in scores.items()},
    }
    (out / SELECTION_FILE).write_text(json.dumps(choice, indent=1), encoding="utf-8")
    log.info("chosen snapshot %s (validation geomean %.4f)", snapshot.path.name, scores[best])
    return choice


def specs(
    cfg: DictConfig, root: str, agents: Sequence[str], test: Sequence[str], extra: Sequence[str]
) -> list[RunSpec]:
    """One run per test graph, agent and seed under ``root/W/AGENT``."""
    common = [f"budget={cfg.budget}", *cfg.target, *cfg.policy, *extra]
    return [
        RunSpec(f"{root}/{w}/{a}", seed, (f"agent={a}", f"workload.name={w}", *common))
        for w in test
        for a in agents
        for seed in range(int(cfg.seeds))
    ]


def zero_shot_specs(cfg: DictConfig, test: Sequence[str], snapshot: Path) -> list[RunSpec]:
    """The frozen snapshot's maps (``agent=zero-shot``) per test graph and seed."""
    policy = f"agent.policy={hydra_quote(str(snapshot))}"
    common = (f"budget={cfg.budget}", *cfg.target, *cfg.policy)
    return [
        RunSpec(
            f"{ZERO_SHOT_DIR}/{w}", seed, ("agent=zero-shot", policy, f"workload.name={w}", *common)
        )
        for w in test
        for seed in range(int(cfg.seeds))
    ]


def spec_key(spec: RunSpec) -> tuple[str, str, int, int]:
    """``(method, graph, seed, budget)`` of a planned run (:func:`method_of` of its run)."""
    o = dict(item.split("=", 1) for item in spec.overrides)
    agent = o["agent"]
    method = agent if agent == ZERO_SHOT else agent + (FINETUNE if "init_from" in o else "")
    return method, o["workload.name"], spec.seed, int(o["budget"])


def not_made_before(out: Path, stage: list[RunSpec]) -> list[RunSpec]:
    """``stage`` less the runs finished elsewhere under the study's run roots (the former
    script's directories): the same method, graph, seed and budget."""
    found = read_runs(*(out / d for d in (SCRATCH, FINETUNE_DIR, ZERO_SHOT_DIR))).runs
    elsewhere = {(method_of(r), r.workload, r.seed, r.budget): r.path.resolve() for r in found}
    kept = []
    for spec in stage:
        there = elsewhere.get(spec_key(spec))
        if there is not None and there != (out / spec.path).resolve():
            log.info("%s: finished before in %s; not run again", spec.path, there)
            continue
        kept.append(spec)
    return kept


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """Stage 1: the pretraining; then the snapshot choice and stage 2: zero-shot, from
    scratch and fine-tuned runs on every test graph and seed."""
    yield [pretrain_step(cfg, out)]
    graphs = study_graphs(cfg, pretrain_params(out))
    stage = specs(cfg, SCRATCH, cfg.scratch_agents, graphs.test, cfg.search_overrides)
    if RunDir(out / PRETRAIN).transfer_csv.exists():
        snapshot = Path(select_snapshot(out, graphs.val)["snapshot"]).resolve()
        stage += zero_shot_specs(cfg, graphs.test, snapshot)
        finetune = [*cfg.search_overrides, f"init_from={hydra_quote(str(snapshot))}"]
        stage += specs(cfg, FINETUNE_DIR, cfg.finetune_agents, graphs.test, finetune)
    else:
        log.warning("the pretraining has not finished: no zero-shot or fine-tuned runs")
    yield not_made_before(out, stage)


# ------------------------------------------------------------------ analysis
@dataclass
class Result:
    """What the study's runs say: curves, Table 2, the limits and what was left out."""

    graphs: Graphs
    curves: list[MethodCurve]
    rows: list[LevelRow]
    levels: list[tuple[str, float]]
    limits: dict[str, dict]
    limit_geomean: dict[str, float]
    choice: dict
    problems: list[Problem]


def analyse(cfg: DictConfig, out: Path) -> Result:
    """Limits (solved once, cached in ``OUT/limits.json``), curves and Table 2 from the runs
    under ``OUT/scratch``, ``OUT/finetune`` and ``OUT/zero-shot``."""
    out = Path(out)
    params = pretrain_params(out)
    graphs = study_graphs(cfg, params)
    lim = limits(
        graphs.test, out / LIMITS_FILE, params, float(cfg.optimum_time_s), int(cfg.optimum_workers)
    )
    selection = out / SELECTION_FILE
    choice = json.loads(selection.read_text(encoding="utf-8")) if selection.exists() else {}
    found = read_runs(*(out / d for d in (SCRATCH, FINETUNE_DIR, ZERO_SHOT_DIR)))
    seeds, missing = seed_curves(found.runs, graphs.test)
    curves = method_curves(seeds)
    geo = {k: geomean([lim[w][k] for w in graphs.test]) for k in ("dp", "optimum")}
    levels = default_levels(geo["dp"], geo["optimum"])
    rows = level_table(curves, [v for _, v in levels], str(cfg.reference))
    return Result(graphs, curves, rows, levels, lim, geo, choice, [*found.problems, *missing])


# ------------------------------------------------------------------ rendering
def plot_figure5(curves: Sequence[MethodCurve], path: Path, limits: Mapping[str, float]) -> Path:
    """Geomean improvement over greedy against paid samples (log x), mean ± 1 std over seeds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=120)
    cmap = plt.get_cmap("tab10")
    for i, c in enumerate(curves):
        ok = [j for j in range(len(c.x)) if math.isfinite(c.mean[j])]
        x, mean, std = c.x[ok], c.mean[ok], c.std[ok]
        label = f"{method_label(c.method)} (n={len(c.curves)})"
        ax.step(x, mean, where="post", color=cmap(i % 10), label=label, linewidth=1.5)
        ax.plot(x[-1:], mean[-1:], "o", color=cmap(i % 10), markersize=3)  # end of the budget
        ax.fill_between(x, mean - std, mean + std, step="post", color=cmap(i % 10), alpha=0.15)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="greedy heuristic")
    styles = {"dp": ("-.", "contiguous DP"), "optimum": (":", "CP-SAT optimum")}
    for key, (style, name) in styles.items():
        value = limits.get(key, math.nan)
        if math.isfinite(value):
            ax.axhline(
                value, color="black", linestyle=style, linewidth=1, label=f"{name} {value:.3f}"
            )
    ax.set_xscale("log")
    ax.set_xlabel("paid samples (hardware evaluations)")
    ax.set_ylabel("geomean throughput improvement over greedy")
    ax.set_title("test graphs: mean ± 1 std over seeds")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def write_mean_curves(curves: Sequence[MethodCurve], path: Path) -> Path:
    """``method, samples, geomean_mean, geomean_std, seeds``: one row per point of each mean curve."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "samples", "geomean_mean", "geomean_std", "seeds"])
        for c in curves:
            for x, m, s in zip(c.x, c.mean, c.std):
                writer.writerow([c.method, int(x), repr(float(m)), repr(float(s)), len(c.curves)])
    return path


def format_cell(cell: LevelCell) -> str:
    """``samples (reduction; reached/seeds)``, or ``N.A. (reached/seeds)`` if never reached."""
    if cell.samples is None:
        return f"N.A. ({cell.reached}/{cell.seeds})"
    red = "-" if cell.reduction is None else f"{'>' if cell.bound else ''}{cell.reduction:.2f}x"
    return f"{cell.samples} ({red}; {cell.reached}/{cell.seeds})"


def table2(rows: Sequence[LevelRow], levels: Sequence[tuple[str, float]]) -> str:
    """Table 2: one row per method, one column per level, the final geomean, samples, seeds."""
    header = ["method", *(f">= {v:.4f}x ({name})" for name, v in levels)]
    header += ["geomean at end (mean ± std)", "samples", "seeds"]
    body = [
        [
            method_label(r.method),
            *map(format_cell, r.cells),
            format_mean_std(r.final, "{:.4f}", empty="nan"),
            r.samples,
            r.final.n,
        ]
        for r in rows
    ]
    return markdown_table(header, body)


def limits_table(limits: Mapping[str, Mapping], test: Sequence[str]) -> str:
    """Per test graph: nodes, the DP's, the optimum's and the bound's ratio, status, seconds."""
    header = [
        "test graph",
        "nodes",
        "contiguous DP / greedy",
        "optimum / greedy",
        "bound / greedy",
        "optimum status",
        "solver s",
    ]
    body = [
        [
            w,
            limits[w]["nodes"],
            f"{limits[w]['dp']:.4f}",
            f"{limits[w]['optimum']:.4f}",
            f"{limits[w].get('bound', math.nan):.4f}",
            str(limits[w]["status"]).lower(),
            f"{limits[w]['solve_wall_s']:.1f}",
        ]
        for w in test
    ]
    return markdown_table(header, body, "lrrrrlr")


def banner(cfg: DictConfig, result: Result) -> str:
    """The study's scale, the graphs left out and the chosen snapshot, in one line."""
    g = result.graphs
    if cfg.smoke:
        text = (
            f"Smoke-scale run ({len(g.test)} test graphs, {cfg.seeds} seeds, budget {cfg.budget}, "
            f"pretraining {cfg.pretrain_budget} evaluations on {len(g.train)} graphs, tiny policy): "
            "it checks the pipeline; its numbers say nothing about the methods."
        )
    else:
        text = (
            f"{len(g.test)} test graphs, {cfg.seeds} seeds, budget {cfg.budget} paid samples per "
            f"run; pretraining {cfg.pretrain_budget} evaluations on {len(g.train)} training graphs."
        )
    if g.excluded:
        why = "; ".join(f"`{w}` ({reason})" for w, reason in g.excluded.items())
        text += f" Left out (no partition fits the package): {why}."
    if result.choice:
        text += (
            f" Pretrained snapshot: {Path(result.choice['snapshot']).name} (validation geomean "
            f"of greedy maps {result.choice['val_geomean_greedy']:.4f}x)."
        )
    return text


def render(cfg: DictConfig, result: Result, page: Page) -> str:
    """The ``mcm-study`` section: Figure 5, Table 2, the limits, the command, runs left out;
    Figure 5's data also into ``OUT/report/curves.csv``."""
    geo, reference = result.limit_geomean, str(cfg.reference)
    figure = plot_figure5(result.curves, page.figure(FIGURE), geo)
    write_mean_curves(result.curves, Path(cfg.out) / CURVES_FILE)
    text = [
        "## Multi-chip partitioning: sample efficiency on the mcm87 test graphs",
        "",
        f"> {banner(cfg, result)}",
        "",
        f"Geomean over {len(result.graphs.test)} test graphs of the best throughput improvement "
        "over the greedy heuristic (`best_speedup`) against paid samples; mean ± 1 std over seeds "
        "(the multi-chip paper's Figure 5). Every proposal is repaired by the constraint "
        "solver and scored by its repair (`reward=repaired`).",
        "",
        f"![Figure 5]({page.link(figure)})",
        "",
        "Samples to reach each geomean level on the mean curve (the paper's Table 2); in "
        f"brackets the reduction against {method_label(reference)} (its samples over the "
        "method's; `>`: it never reached the level, so its whole budget is a lower bound) "
        "and how many seeds reach the level on their own curve. N.A.: the mean curve never "
        "reaches it. Levels: half and 90% of the optimum's room above greedy, the contiguous "
        "DP's and the optimum's geomean.",
        "",
        table2(result.rows, result.levels),
        "",
        f"Limits (geomean over the test graphs): contiguous DP {geo['dp']:.4f}x, "
        f"CP-SAT optimum {geo['optimum']:.4f}x the greedy heuristic. Where a solve is not "
        "proven (status `feasible`), the optimum column is only the best partition CP-SAT "
        "found in its time, and `bound` its upper bound on the improvement.",
        "",
        limits_table(result.limits, result.graphs.test),
        "",
        "### Reproduce",
        "",
        "```bash",
        page.command,
        "```",
        "",
        "### Runs left out",
        "",
        *([f"- {p}" for p in result.problems] or ["none"]),
    ]
    return "\n".join(text) + "\n"
