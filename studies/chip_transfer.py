"""From cost model to chip: pretrain EGRL on the NNP-I model, fine-tune it on another chip.

The multi-chip paper pre-trains its policy on an analytical model and fine-tunes it on the
hardware. Here the analytical model is NNP-I's (``hwmodel=nnpi``) and the hardware is a
chip behind the ``external`` protocol (``docs/external.md``): by default the example chip
that the plan (``configs/study/chip-transfer.yaml``) names, with its options, a cost model
that is not NNP-I's (transfers that share each memory level's bandwidth, half the SRAM,
twice the compute). Two stages::

    OUT/pretrain/egrl/seed0/      EGRL on NNP-I (one run, the pretraining budget)
    OUT/scratch/egrl/seed<k>/     EGRL on the chip from scratch
    OUT/finetune/egrl/seed<k>/    EGRL on the chip with init_from=OUT/pretrain/egrl/seed0
                                  (second stage, after the pretraining)

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.runs import Run
from studies.render import left_out, markdown_table, plot_median_curves, reproduce
from studies.runner import (
    Page,
    RunSpec,
    StudyError,
    hydra_quote,
    read_runs,
    script_command,
    script_label,
)
from studies.stats import REACH_TOLERANCE, compare, format_samples, median_range, samples_to_level

log = logging.getLogger(__name__)

SECTION = "chip-transfer"
MODES = ("scratch", "finetune")
LEVEL_NAMES = ("compiler", "99%")


# ------------------------------------------------------------------ the plan
def chip_workload(cfg: DictConfig) -> str:
    """The workload on the chip (the pretraining's unless the plan names another)."""
    return str(cfg.chip_workload or cfg.workload)


def chip_command(cfg: DictConfig) -> str:
    """The chip's command line (``hwmodel.params.command``): the plan's ``chip.command``, else
    this interpreter running ``chip.script`` (relative to the repository root) with
    ``chip.args``."""
    return script_command(cfg.chip)


def chip_label(cfg: DictConfig) -> str:
    """The chip as the report names it (the script as the plan names it, no interpreter)."""
    return script_label(cfg.chip)


def pretrain_path(cfg: DictConfig) -> str:
    """The pretraining run, under the study's output."""
    return f"pretrain/egrl/seed{cfg.pretrain_seed}"


def check(cfg: DictConfig) -> None:
    """Budgets and seeds of at least 1, else the study ends with one line."""
    for name in ("pretrain_budget", "budget", "seeds"):
        if int(cfg[name]) < 1:
            raise StudyError(f"chip-transfer: {name}={cfg[name]} is invalid: expected >= 1")


def chip_specs(cfg: DictConfig, mode: str, extra: Sequence[str] = ()) -> list[RunSpec]:
    """EGRL on the chip, ``seeds`` seeds, in ``OUT/<mode>/egrl``."""
    overrides = (
        "hwmodel=external",
        f"hwmodel.params.command={hydra_quote(chip_command(cfg))}",
        f"workload.name={chip_workload(cfg)}",
        "agent=egrl",
        f"budget={cfg.budget}",
        *extra,
    )
    return [RunSpec(f"{mode}/egrl", seed, overrides) for seed in range(cfg.seeds)]


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """The pretraining on NNP-I and the chip runs from scratch; then the fine-tuned chip
    runs, from the pretraining run."""
    check(cfg)
    pretrain = RunSpec(
        "pretrain/egrl",
        int(cfg.pretrain_seed),
        (
            "hwmodel=nnpi",
            f"workload.name={cfg.workload}",
            "agent=egrl",
            f"budget={cfg.pretrain_budget}",
        ),
    )
    yield [pretrain, *chip_specs(cfg, "scratch")]
    source = pretrain_path(cfg)
    init = f"init_from={hydra_quote(str((Path(out) / source).resolve()))}"
    tuned = chip_specs(cfg, "finetune", [init])
    yield [RunSpec(s.group, s.seed, s.overrides, after=source) for s in tuned]


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


def samples_to(run: Run, level: float) -> float:
    """Paid measurements when the run's best speedup first reached ``level`` (inf: never)."""
    return samples_to_level(run.iterations, run.best_speedup, level, rtol=REACH_TOLERANCE)


def mode_result(mode: str, runs: Sequence[Run], level: dict[str, float]) -> ModeResult:
    """One mode's runs by seed and their arrays."""
    runs = sorted(runs, key=lambda r: r.seed)
    return ModeResult(
        mode=mode,
        runs=list(runs),
        samples={k: np.array([samples_to(r, v) for r in runs]) for k, v in level.items()},
        final=np.array([r.final_speedup for r in runs]),
        first=np.array([r.best_speedup[0] for r in runs]),
        first_samples=np.array([r.iterations[0] for r in runs], dtype=np.float64),
    )


def analyse(cfg: DictConfig, out: Path) -> TransferResult:
    """Read the pretraining and the chip runs (those of the plan's budget); the study ends
    with one line when no chip run has finished."""
    out = Path(out)
    found = read_runs(out / "pretrain")
    notes = [str(p) for p in found.problems]
    by_mode: dict[str, list[Run]] = {}
    for mode in MODES:
        chip = read_runs(out / mode)
        notes += [str(p) for p in chip.problems]
        runs = [r for r in chip.runs if r.budget == cfg.budget]
        if runs:
            by_mode[mode] = runs
    every = [r for rs in by_mode.values() for r in rs]
    if not every:
        raise StudyError(f"chip-transfer: no finished chip run under {out}")
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
        workload=str(cfg.workload),
        chip_workload=chip_workload(cfg),
        chip=chip_label(cfg),
        pretrain=found.runs[0] if found.runs else None,
        modes=modes,
        best=best,
        levels=level,
        saved=saved,
        tests=tests,
        notes=notes,
    )


# ------------------------------------------------------------------ report
def _count(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.0f}"


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


def intro(result: TransferResult, seeds: int, machine: str) -> str:
    pre = result.pretrain
    pre_text = (
        f"EGRL pretrained on NNP-I `{result.workload}` for {pre.budget} paid measurements "
        f"(seed {pre.seed}, final {pre.final_speedup:.4f}x over the NNP-I compiler)"
        if pre is not None
        else "no finished pretraining run"
    )
    return (
        f"{pre_text}, then EGRL on the chip `{result.chip}` (workload "
        f"`{result.chip_workload}`), from scratch and fine-tuned from the pretrained policy "
        f"(`init_from=`), {seeds} seeds each" + (f", on {machine}" if machine else "") + ". "
        "The pretraining's measurements, on the cost model, are not counted. A cell is the "
        "paid chip measurements by the end of the generation in which the run's best speedup "
        "over the chip's compiler first reached the level: median [min-max] over the runs "
        "that reached it (how many did). `first generation`: the best speedup after the first "
        f"generation (the fine-tuned runs: the pretrained policy's zero-shot maps). 99% is of "
        f"the best map any chip run found, {result.best:.4f}x (the chip has no exact optimum)."
    )


def table_markdown(result: TransferResult) -> str:
    """One row per mode: samples to each level, the first generation, the final speedup."""
    header = (
        "EGRL on the chip",
        "runs",
        "to the chip compiler (1.0x)",
        f"to 99% of the best ({result.levels['99%']:.4f}x)",
        "first generation (samples)",
        "final speedup",
    )
    rows = [
        (
            m.mode,
            len(m.runs),
            format_samples(m.samples["compiler"]),
            format_samples(m.samples["99%"]),
            f"{median_range(m.first)} ({median_range(m.first_samples, '{:.0f}')})",
            median_range(m.final),
        )
        for m in result.modes.values()
    ]
    return markdown_table(header, rows)


def plot_transfer(result: TransferResult, path: str | Path) -> Path:
    """Median best speedup on the chip against paid chip measurements, log x axis."""
    styles = {"scratch": ("-", "C0"), "finetune": ("-", "C3")}
    series = [
        (f"EGRL {m.mode}", m.runs, *styles.get(m.mode, ("-", None))) for m in result.modes.values()
    ]
    references = {"chip compiler": 1.0, f"best found ({result.best:.4f}x)": result.best}
    title = f"NNP-I {result.workload} -> chip, {result.chip_workload}"
    return plot_median_curves(series, references, title, path)


def render(cfg: DictConfig, result: TransferResult, page: Page) -> str:
    """The ``chip-transfer`` section and its figure, ``chip_transfer_<chip workload>.png``."""
    png = plot_transfer(result, page.figure(f"chip_transfer_{result.chip_workload}.png"))
    lines = [
        "## From cost model to chip",
        "",
        intro(result, cfg.seeds, page.machine),
        "",
        table_markdown(result),
        "",
        saved_sentence(result),
        "",
        f"![chip transfer]({page.link(png)})",
        "",
    ]
    lines += left_out(result.notes)
    lines += reproduce(page.command)
    return "\n".join(lines)
