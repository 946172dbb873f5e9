"""From cost model to chip: pretrain EGRL on the NNP-I model, fine-tune it on another chip.

The multi-chip paper pre-trains its policy on an analytical model and fine-tunes it on the
hardware. Here the analytical model is NNP-I's (``hwmodel=nnpi``) and the hardware is a
chip behind the ``external`` protocol (``docs/external.md``): by default the example chip
``examples/external_chip.py`` with :data:`DEFAULT_CHIP_ARGS`, a cost model that is not
NNP-I's (transfers that share each memory level's bandwidth, half the SRAM, twice the
compute). Three multiruns, each with ``continue_runs=true``::

    OUT/pretrain/egrl/seed0/      EGRL on NNP-I (one run, the pretraining budget)
    OUT/scratch/egrl/seed<k>/     EGRL on the chip from scratch
    OUT/finetune/egrl/seed<k>/    EGRL on the chip with init_from=OUT/pretrain/egrl/seed0

Read per chip run: the paid measurements (chip runs) to reach the chip compiler's map
(1.0x) and 99% of the best map any chip run found, the final best speedup, and the first
generation's best (the pretrained policy's zero-shot maps, for the fine-tuned runs). The
samples saved are the medians' difference (never reached = +inf), with a two-sided
Mann-Whitney U of fine-tuning against scratch over seeds. The pretraining's measurements,
on the cost model, are not counted.
"""

from __future__ import annotations

import logging
import math
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from egrl.experiments.launch import launch
from egrl.experiments.runs import Run
from egrl.experiments.samples import (
    SUBDIR,
    compare,
    finished,
    hydra_quote,
    plot_curves,
    read_runs,
    samples_to,
    spread,
    value_spread,
)

log = logging.getLogger(__name__)

CHIP_SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "external_chip.py"
#: the chip of the study: shared bandwidth, half NNP-I's SRAM, twice its compute
DEFAULT_CHIP_ARGS = ("--shared-bandwidth", "--sram-kib", "2048", "--tmacs", "50")
MODES = ("scratch", "finetune")
LEVEL_NAMES = ("compiler", "99%")


@dataclass
class TransferConfig:
    """One study.

    Attributes:
        out: the study's directory.
        workload: the workload of the pretraining on NNP-I.
        chip_workload: the workload on the chip (default: ``workload``).
        pretrain_budget: paid measurements of the pretraining (on NNP-I).
        budget: paid measurements of every chip run.
        seeds: chip runs ``0 .. seeds-1`` from scratch and fine-tuned.
        chip_args: options of ``examples/external_chip.py``.
        command: the chip's command (default: the example chip with ``chip_args``).
        overrides: Hydra overrides for every run (policy sizes ...).
    """

    out: Path
    workload: str = "resnet50"
    chip_workload: str | None = None
    pretrain_budget: int = 4000
    budget: int = 1000
    seeds: int = 5
    n_jobs: int = 2
    chip_args: tuple[str, ...] = DEFAULT_CHIP_ARGS
    command: str | None = None
    overrides: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        for name in ("pretrain_budget", "budget", "seeds", "n_jobs"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)} is invalid: expected >= 1")

    @property
    def target_workload(self) -> str:
        return self.chip_workload or self.workload

    @property
    def chip_command(self) -> str:
        """The chip's command line (``hwmodel.params.command``)."""
        if self.command:
            return self.command
        return shlex.join([sys.executable, str(CHIP_SCRIPT), *self.chip_args])

    @property
    def chip_label(self) -> str:
        """The chip as the report names it (the example chip without the interpreter's path)."""
        if self.command:
            return self.command
        return shlex.join(["examples/external_chip.py", *self.chip_args])

    @property
    def pretrain_run(self) -> Path:
        return self.out / "pretrain" / "egrl" / "seed0"


def pretrain_overrides(cfg: TransferConfig) -> list[str]:
    """EGRL on NNP-I, one seed."""
    return [
        "hwmodel=nnpi",
        f"workload.name={cfg.workload}",
        "agent=egrl",
        "seed=range(1)",
        f"budget={cfg.pretrain_budget}",
        "continue_runs=true",
        SUBDIR,
        *cfg.overrides,
    ]


def chip_overrides(cfg: TransferConfig, finetune: bool) -> list[str]:
    """EGRL on the chip, ``seeds`` seeds; from the pretraining run when ``finetune``."""
    args = [
        "hwmodel=external",
        f"hwmodel.params.command={hydra_quote(cfg.chip_command)}",
        f"workload.name={cfg.target_workload}",
        "agent=egrl",
        f"seed=range({cfg.seeds})",
        f"budget={cfg.budget}",
        "continue_runs=true",
        SUBDIR,
    ]
    if finetune:
        args.append(f"init_from={hydra_quote(str(cfg.pretrain_run.resolve()))}")
    return [*args, *cfg.overrides]


def run_transfer(cfg: TransferConfig) -> None:
    """Pretrain, then the chip runs from scratch and fine-tuned (finished runs are kept)."""
    launch("parallel", pretrain_overrides(cfg), cfg.out / "pretrain", cfg.n_jobs)
    launch("parallel", chip_overrides(cfg, False), cfg.out / "scratch", cfg.n_jobs)
    if not finished(cfg.pretrain_run):
        log.warning("fine-tuning skipped: the pretraining %s has not finished", cfg.pretrain_run)
        return
    launch("parallel", chip_overrides(cfg, True), cfg.out / "finetune", cfg.n_jobs)


# ------------------------------------------------------------------ analysis
@dataclass
class ModeResult:
    """The chip runs of one mode; arrays over its ``S`` runs.

    Attributes:
        samples: level name -> paid measurements to reach it ``[S]`` (inf: never).
        final: best speedup at the end ``[S]``.
        first: best speedup after the first generation ``[S]``.
        first_samples: paid measurements of the first generation ``[S]``.
    """

    mode: str
    runs: list[Run]
    samples: dict[str, np.ndarray]
    final: np.ndarray
    first: np.ndarray
    first_samples: np.ndarray


@dataclass
class TransferResult:
    """The study's result: the pretraining, the chip runs, the best known map, the savings.

    Attributes:
        best: best speedup any chip run found (the 99% level's reference).
        saved: level name -> median samples from scratch minus fine-tuned (inf/nan where
            one side's median never reached it).
        tests: level name -> fine-tuned against scratch ``(U, p, share fine-tuned first)``.
    """

    workload: str
    chip_workload: str
    chip: str  # the chip as the report names it
    pretrain: Run | None
    modes: dict[str, ModeResult]
    best: float
    levels: dict[str, float]
    saved: dict[str, float]
    tests: dict[str, tuple[float, float, float]]
    notes: list[str] = field(default_factory=list)


def median_samples(samples: np.ndarray) -> float:
    """Median over all runs, a run that never reached the level counted as +inf."""
    return float(np.median(samples)) if len(samples) else math.nan


def samples_saved(scratch: np.ndarray, finetune: np.ndarray) -> float:
    """Median samples from scratch minus fine-tuned (+inf: scratch's median never reached it,
    -inf: fine-tuning's did not; NaN: neither)."""
    a, b = median_samples(scratch), median_samples(finetune)
    if math.isinf(a) and math.isinf(b):
        return math.nan
    return a - b


def mode_result(mode: str, runs: Sequence[Run], level: dict[str, float]) -> ModeResult:
    runs = sorted(runs, key=lambda r: r.seed)
    return ModeResult(
        mode=mode,
        runs=list(runs),
        samples={k: np.array([samples_to(r, v) for r in runs]) for k, v in level.items()},
        final=np.array([r.final_speedup for r in runs]),
        first=np.array([r.best_speedup[0] for r in runs]),
        first_samples=np.array([r.iterations[0] for r in runs], dtype=np.float64),
    )


def analyse(cfg: TransferConfig) -> TransferResult | None:
    """Read the pretraining and the chip runs; None when no chip run has finished."""
    notes: list[str] = []
    pre, left = read_runs(cfg.out / "pretrain")
    notes += left
    by_mode: dict[str, list[Run]] = {}
    for mode in MODES:
        runs, left = read_runs(cfg.out / mode)
        notes += left
        runs = [r for r in runs if r.budget == cfg.budget]
        if runs:
            by_mode[mode] = runs
    every = [r for rs in by_mode.values() for r in rs]
    if not every:
        log.warning("%s: no finished chip run", cfg.out)
        return None
    best = max(r.final_speedup for r in every)
    level = {"compiler": 1.0, "99%": 0.99 * best}
    modes = {m: mode_result(m, rs, level) for m, rs in by_mode.items()}
    saved: dict[str, float] = {}
    tests: dict[str, tuple[float, float, float]] = {}
    if set(MODES) <= set(modes):
        for name in LEVEL_NAMES:
            scratch, tuned = modes["scratch"].samples[name], modes["finetune"].samples[name]
            saved[name] = samples_saved(scratch, tuned)
            tests[name] = compare(tuned, scratch)
    return TransferResult(
        workload=cfg.workload,
        chip_workload=cfg.target_workload,
        chip=cfg.chip_label,
        pretrain=pre[0] if pre else None,
        modes=modes,
        best=best,
        levels=level,
        saved=saved,
        tests=tests,
        notes=notes,
    )


# ------------------------------------------------------------------ report
def saved_sentence(result: TransferResult) -> str:
    """What fine-tuning saved, in words, level by level (or that it saved none)."""
    if not result.saved:
        return "Fine-tuning was not compared: the study lacks the runs from scratch or fine-tuned."
    parts = []
    for name, label in (("compiler", "the chip compiler's map"), ("99%", "99% of the best map")):
        value = result.saved[name]
        scratch = median_samples(result.modes["scratch"].samples[name])
        tuned = median_samples(result.modes["finetune"].samples[name])
        p = result.tests[name][1]
        noise = "" if p < 0.05 else ", not significant at 5%"
        where = (
            f"(median {_count(tuned)} fine-tuned against {_count(scratch)} from scratch, a "
            f"run that never got there counted as +inf; Mann-Whitney p = {p:.3f}{noise})"
        )
        if math.isnan(value):
            parts.append(f"to reach {label} neither got there in half of its runs {where}")
        elif math.isinf(value) and value > 0:
            parts.append(f"to reach {label} only fine-tuning got there in half of its runs {where}")
        elif value > 0:
            ratio = f", {scratch / tuned:.1f}x fewer" if tuned > 0 else ""
            noun = "sample" if round(value) == 1 else "samples"
            parts.append(f"to reach {label} fine-tuning saved {value:.0f} {noun}{ratio} {where}")
        else:
            parts.append(f"to reach {label} fine-tuning saved none {where}")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def _count(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.0f}"


def report_markdown(
    result: TransferResult,
    figure: str | None,
    seeds: int,
    commands: Sequence[str] = (),
    machine: str = "",
) -> str:
    """The ``chip-transfer`` section of the results page."""
    pre = result.pretrain
    pre_text = (
        f"EGRL pretrained on NNP-I `{result.workload}` for {pre.budget} paid measurements "
        f"(seed {pre.seed}, final {pre.final_speedup:.4f}x over the NNP-I compiler)"
        if pre is not None
        else "no finished pretraining run"
    )
    lines = [
        "## From cost model to chip",
        "",
        f"{pre_text}, then EGRL on the chip `{result.chip}` (workload "
        f"`{result.chip_workload}`), from scratch and fine-tuned from the pretrained policy "
        f"(`init_from=`), {seeds} seeds each" + (f", on {machine}" if machine else "") + ". "
        "The pretraining's measurements, on the cost model, are not counted. A cell is the "
        "paid chip measurements by the end of the generation in which the run's best speedup "
        "over the chip's compiler first reached the level: median [min-max] over the runs "
        "that reached it (how many did). `first generation`: the best speedup after the first "
        f"generation (the fine-tuned runs: the pretrained policy's zero-shot maps). 99% is of "
        f"the best map any chip run found, {result.best:.4f}x (the chip has no exact optimum).",
        "",
        "| EGRL on the chip | runs | to the chip compiler (1.0x) "
        f"| to 99% of the best ({result.levels['99%']:.4f}x) | first generation (samples) "
        "| final speedup |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in result.modes.values():
        first = f"{value_spread(m.first)} ({value_spread(m.first_samples, '{:.0f}')})"
        lines.append(
            f"| {m.mode} | {len(m.runs)} | {spread(m.samples['compiler'])} "
            f"| {spread(m.samples['99%'])} | {first} | {value_spread(m.final)} |"
        )
    lines += ["", saved_sentence(result), ""]
    if figure:
        lines += [f"![chip transfer]({figure})", ""]
    if result.notes:
        lines += ["Left out:", "", *(f"- {n}" for n in result.notes), ""]
    if commands:
        lines += ["Reproduce:", "", "```", *commands, "```", ""]
    return "\n".join(lines)


def plot_transfer(result: TransferResult, path: str | Path) -> Path:
    """Median best speedup on the chip against paid chip measurements, log x axis."""
    styles = {"scratch": ("-", "C0"), "finetune": ("-", "C3")}
    series = [
        (f"EGRL {m.mode}", m.runs, *styles.get(m.mode, ("-", None))) for m in result.modes.values()
    ]
    references = {"chip compiler": 1.0, f"best found ({result.best:.4f}x)": result.best}
    title = f"NNP-I {result.workload} -> chip, {result.chip_workload}"
    return plot_curves(series, references, title, path)
