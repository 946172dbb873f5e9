"""The multi-chip study, start to finish: pretrain, pick a snapshot, search, report.

Layout of the study directory ``OUT``::

    OUT/pretrain/        egrl-transfer pretrain on the training graphs (held out: validation)
    OUT/selection.json   the validation geomean of every snapshot and the chosen one
    OUT/scratch/         Hydra multirun (experiment=mcm-study): random, sa, pg, egrl
    OUT/finetune/        Hydra multirun (experiment=mcm-finetune): pg, egrl from the snapshot
    OUT/zero-shot/W/seedS/   the chosen snapshot's greedy map, then its sampled maps
    OUT/limits.json      contiguous DP and CP-SAT optimum per test graph (cache)
    OUT/report/          figure5.png, curves.csv, mcm_study.md

Every step skips what is already finished, so the same command continues a killed study:
the pretraining resumes from its last checkpoint (``egrl-transfer pretrain --resume``), the
sweeps run with ``continue_runs=true`` (finished runs are skipped, interrupted ones resume),
and finished zero-shot runs are kept.
"""

from __future__ import annotations

import json
import logging
import math
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import workloads
import workloads.datasets as ds
from egrl.experiments.launch import launch, sweep_record
from egrl.experiments.mcm_curves import geomean
from egrl.experiments.mcm_limits import LIMITS_FILE, limits
from egrl.experiments.mcm_report import StudyReport, write_report
from egrl.experiments.mcm_zero_shot import is_finished, zero_shot_run
from egrl.transfer import OUTPUT_DIR, list_snapshots, read_csv, read_run_info

log = logging.getLogger(__name__)

SCRATCH_AGENTS = ("random", "sa", "pg", "egrl")
FINETUNE_AGENTS = ("pg", "egrl")
#: Graph U-Net sizes of the smoke study (the full study uses configs/policy/gnn.yaml)
SMOKE_POLICY = ("policy.hidden=16", "policy.out=16", "policy.depth=2", "policy.heads=2")


@dataclass
class StudyConfig:
    """One study. ``train``/``val``/``test``: the graphs of each role (mcm87's split).

    Attributes:
        out: the study directory.
        seeds: seeds ``0 .. seeds-1`` of every search on every test graph.
        budget: paid samples per search run (and per zero-shot run: distinct maps).
        pretrain_budget: evaluations of the pretraining, over all training graphs.
        snapshot_every: pretraining generations between policy snapshots.
        n_jobs: runs in parallel in the sweeps.
        overrides: Hydra overrides for every run and the pretraining (policy sizes ...).
        pretrain_overrides, search_overrides: for the pretraining / the sweeps only.
        optimum_time_s, optimum_workers: the CP-SAT limit per test graph and its threads.
        scratch_agents, finetune_agents: the searches from scratch and from the snapshot.
        reference: the method the Table 2 reductions are relative to (RL from scratch).
        smoke: a smoke-scale study (stated in the report).
        excluded: test graphs left out because they cannot be mapped, with the reason
            (:func:`drop_unmappable`).
    """

    out: Path
    train: list[str]
    val: list[str]
    test: list[str]
    seeds: int = 5
    budget: int = 2000
    pretrain_budget: int = 20000
    snapshot_every: int = 10
    n_jobs: int = 2
    overrides: list[str] = field(default_factory=list)
    pretrain_overrides: list[str] = field(default_factory=list)
    search_overrides: list[str] = field(default_factory=list)
    optimum_time_s: float = 60.0
    optimum_workers: int = 2
    zero_shot_batch: int = 100
    scratch_agents: tuple[str, ...] = SCRATCH_AGENTS
    finetune_agents: tuple[str, ...] = FINETUNE_AGENTS
    reference: str = "pg"
    smoke: bool = False
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def pretrain_dir(self) -> Path:
        return self.out / "pretrain"


def full_config(out: str | Path, dataset: str = "mcm87", **kwargs) -> StudyConfig:
    """The paper-scale study on ``dataset``'s fixed split."""
    parts = ds.split(dataset)
    return StudyConfig(
        Path(out), list(parts["train"]), list(parts["val"]), list(parts["test"]), **kwargs
    )


def smallest(names: list[str], k: int) -> list[str]:
    """The ``k`` graphs of ``names`` with the fewest nodes (ties by name)."""
    return sorted(names, key=lambda n: (workloads.load(n).num_nodes, n))[:k]


def smoke_config(out: str | Path, dataset: str = "mcm87", **kwargs) -> StudyConfig:
    """A smoke-scale study: the smallest 4 training, 2 validation and 2 test graphs, 2 seeds,
    tiny budgets and a tiny Graph U-Net. It checks the pipeline, not the method."""
    parts = ds.split(dataset)
    base = {
        "seeds": 2,
        "budget": 60,
        "pretrain_budget": 80,
        "snapshot_every": 5,
        "n_jobs": 2,
        "optimum_time_s": 10.0,
        "overrides": list(SMOKE_POLICY),
        "pretrain_overrides": ["samples=4"],
        "search_overrides": ["population.size=4", "learner.burn_in=8", "learner.batch_size=8"],
        "smoke": True,
    }
    base.update(kwargs)
    return StudyConfig(
        Path(out),
        smallest(list(parts["train"]), 4),
        smallest(list(parts["val"]), 2),
        smallest(list(parts["test"]), 2),
        **base,
    )


def drop_unmappable(cfg: StudyConfig, hw_params: dict | None = None) -> StudyConfig:
    """Leave out the test graphs that the package cannot hold (no partition fits the SRAM).

    The greedy compiler's failure names the chip and the bytes; the reason is kept in
    ``cfg.excluded`` and stated in the report. No search can map such a graph, so it would
    only fail every run of the sweeps.
    """
    from egrl.env import make_env

    params = {k: v for k, v in (hw_params or {}).items() if k not in ("native", "seed")}
    kept = []
    for w in cfg.test:
        try:
            make_env("mcm", w, **params)
        except ValueError as exc:
            cfg.excluded[w] = str(exc)
            log.warning("left out of the study: %s", exc)
        else:
            kept.append(w)
    cfg.test = kept
    return cfg


# ------------------------------------------------------------------ pretraining
def pretrain_command(cfg: StudyConfig) -> list[str]:
    """``egrl-transfer pretrain`` for the study (a new run, or ``--resume`` of one)."""
    base = [sys.executable, "-m", "egrl.cli.transfer", "pretrain"]
    if (cfg.pretrain_dir / "checkpoints").is_dir() and any(
        (cfg.pretrain_dir / "checkpoints").iterdir()
    ):
        return [*base, "--resume", str(cfg.pretrain_dir)]
    return [
        *base,
        "--train",
        *cfg.train,
        "--holdout",
        *cfg.val,
        "--budget",
        str(cfg.pretrain_budget),
        "--seed",
        "0",
        "--out",
        str(cfg.pretrain_dir),
        "hwmodel=mcm",
        "reward=repaired",
        f"snapshot_every={cfg.snapshot_every}",
        "progress=false",
        "threads=1",
        *cfg.overrides,
        *cfg.pretrain_overrides,
    ]


def run_pretrain(cfg: StudyConfig) -> Path:
    """Pretrain (or finish pretraining); returns the run's ``transfer.csv``."""
    csv_path = cfg.pretrain_dir / OUTPUT_DIR / "transfer.csv"
    if csv_path.exists():
        log.info("pretraining already done: %s", csv_path)
        return csv_path
    cmd = pretrain_command(cfg)
    log.info("pretraining: %s", " ".join(shlex.quote(c) for c in cmd))
    subprocess.run(cmd, check=True)
    return csv_path


def select_snapshot(cfg: StudyConfig) -> dict:
    """The snapshot whose greedy maps have the best geomean speedup on the validation graphs.

    Ties go to the earliest snapshot. The choice and every snapshot's geomean are written
    to ``OUT/selection.json``.
    """
    rows = [
        r
        for r in read_csv(cfg.pretrain_dir / OUTPUT_DIR / "transfer.csv")
        if r["policy"] == "learner" and r["target"] in cfg.val
    ]
    by_iter: dict[int, dict[str, float]] = {}
    for r in rows:
        by_iter.setdefault(r["iterations"], {})[r["target"]] = r["greedy_speedup"]
    scores = {
        it: geomean([v[w] for w in cfg.val]) if set(v) >= set(cfg.val) else math.nan
        for it, v in sorted(by_iter.items())
    }
    ranked = [it for it in scores if math.isfinite(scores[it])]
    if not ranked:
        raise RuntimeError(f"no snapshot of {cfg.pretrain_dir} has a valid geomean on {cfg.val}")
    best = max(ranked, key=lambda it: (scores[it], -it))
    snapshot = next(s for s in list_snapshots(cfg.pretrain_dir) if s.iterations == best)
    choice = {
        "snapshot": str(snapshot.path),
        "iterations": best,
        "val_geomean_greedy": scores[best],
        "validation": list(cfg.val),
        "scores": {str(k): v for k, v in scores.items()},
    }
    (cfg.out / "selection.json").write_text(json.dumps(choice, indent=1), encoding="utf-8")
    log.info("chosen snapshot %s (validation geomean %.4f)", snapshot.path.name, scores[best])
    return choice


# ------------------------------------------------------------------ searches
def sweep_overrides(cfg: StudyConfig, agents: tuple[str, ...]) -> list[str]:
    return [
        f"agent={','.join(agents)}",
        f"workload.name={','.join(cfg.test)}",
        f"seed=range({cfg.seeds})",
        f"budget={cfg.budget}",
        "continue_runs=true",
        *cfg.overrides,
        *cfg.search_overrides,
    ]


def run_sweeps(cfg: StudyConfig, snapshot: str | Path) -> None:
    """The from-scratch and the fine-tuning sweeps (Hydra multiruns, ``continue_runs=true``)."""
    if cfg.scratch_agents:
        scratch = sweep_overrides(cfg, cfg.scratch_agents)
        launch("mcm-study", scratch, cfg.out / "scratch", cfg.n_jobs)
    if cfg.finetune_agents:
        finetune = [
            *sweep_overrides(cfg, cfg.finetune_agents),
            f"init_from={Path(snapshot).resolve()}",
        ]
        launch("mcm-finetune", finetune, cfg.out / "finetune", cfg.n_jobs)


def run_zero_shot(cfg: StudyConfig, snapshot: str | Path) -> Path:
    """Zero-shot runs of the chosen snapshot on every test graph and seed (finished ones kept)."""
    info = read_run_info(cfg.pretrain_dir)
    root = cfg.out / "zero-shot"
    for w in cfg.test:
        for seed in range(cfg.seeds):
            run_dir = root / w / f"seed{seed}"
            if is_finished(run_dir):
                continue
            zero_shot_run(snapshot, info, w, seed, cfg.budget, run_dir, batch=cfg.zero_shot_batch)
            log.info("zero-shot %s seed %d done", w, seed)
    return root


def run_study(cfg: StudyConfig, command: str = "") -> StudyReport:
    """Every step of the study, then the report in ``OUT/report``."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    drop_unmappable(cfg)
    run_pretrain(cfg)
    choice = select_snapshot(cfg)
    run_zero_shot(cfg, choice["snapshot"])
    run_sweeps(cfg, choice["snapshot"])
    return report(cfg, command)


def report(cfg: StudyConfig, command: str = "") -> StudyReport:
    """Limits (cached) and the report from whatever runs the study directory holds.

    ``command`` (the study's command line) and the ``egrl-train -m`` command of each sweep
    (read from its ``multirun.yaml``) are stated under "Reproduce".
    """
    info = read_run_info(cfg.pretrain_dir) if (cfg.pretrain_dir / "config.yaml").exists() else None
    params = {k: v for k, v in (info.hw_params if info else {}).items() if k != "seed"}
    drop_unmappable(cfg, params)
    lim = limits(cfg.test, cfg.out / LIMITS_FILE, params, cfg.optimum_time_s, cfg.optimum_workers)
    choice_path = cfg.out / "selection.json"
    choice = json.loads(choice_path.read_text(encoding="utf-8")) if choice_path.exists() else {}
    scale = (
        f"Smoke-scale run ({len(cfg.test)} test graphs, {cfg.seeds} seeds, budget {cfg.budget}, "
        f"pretraining {cfg.pretrain_budget} evaluations on {len(cfg.train)} graphs, tiny policy): "
        "it checks the pipeline; its numbers say nothing about the methods."
        if cfg.smoke
        else f"{len(cfg.test)} test graphs, {cfg.seeds} seeds, budget {cfg.budget} paid samples per "
        f"run; pretraining {cfg.pretrain_budget} evaluations on {len(cfg.train)} training graphs."
    )
    if cfg.excluded:
        scale += " Left out (no partition fits the package): " + "; ".join(
            f"`{w}` ({why})" for w, why in cfg.excluded.items()
        )
        scale += "."
    if choice:
        scale += (
            f" Pretrained snapshot: {Path(choice['snapshot']).name} (validation geomean of greedy "
            f"maps {choice['val_geomean_greedy']:.4f}x)."
        )
    sweeps = [cfg.out / "scratch", cfg.out / "finetune"]
    commands = [command] if command else []
    commands += [r.command for r in map(sweep_record, sweeps) if r is not None]
    roots = [p for p in (*sweeps, cfg.out / "zero-shot") if p.is_dir()]
    return write_report(
        roots, cfg.test, lim, cfg.out / "report", cfg.reference, banner=scale, commands=commands
    )
