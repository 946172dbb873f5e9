"""Screening: does a learned cost model that decides what to measure save measurements?

The plan (``configs/study/screening.yaml``) names the problems (targets with room between
the native compiler and the optimum, and an external chip with no optimum), the agents
and the screens, each as egrl-train overrides. Every agent runs on every problem with every
screen (``screen=none`` the reference) for ``seeds`` seeds at one ``budget`` of paid
measurements, in ``OUT/<problem>/<agent>/<screen>/seed<S>`` (the plan's shape and the
cells' figures: :mod:`studies.cells`). A problem may add screens of
its own (``problem_screens``: the NNP-I model as a free prior on the chip, a model
pre-trained on the chip's other workloads), and a screen may be limited to some agents
(``screen_agents``: the learner's critic needs a learner); a costly problem may run only
some agents and screens (``problem_only``). A pre-trained screen
(``pretrain.screens``) fits on the unscreened runs of the same agent and seed on the plan's
``pretrain.problems`` (other workloads of the same chip), which run in the first stage; the
pre-trained runs follow in the second.

Each run is read against the problem's reference: the optimum of the cost model
(``env.optimum()``, cached in ``OUT/<problem>/optimum.json``) where the solver proves it,
else the best known value (solver or any run of the problem). The section gives, per agent
and screen, the paid measurements to reach the native compiler and 99% of the reference
(median [min-max] over the seeds that got there), the final best speedup, the model's
rank correlation with the measured reward (median over generations, then over seeds) and
the wall time per paid measurement; each screen against ``none`` of the same agent: a
two-sided Mann-Whitney U test on the samples to 99% (never reached ranks last).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig

from studies import cells
from studies.cells import ProblemResult, plot_problem, problem_markdown, summary_markdown
from studies.render import reproduce
from studies.runner import Page, RunSpec, script_label

SECTION = "screening"


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """Stage 1: every problem x agent x screen x seed, and the unscreened runs a pre-trained
    screen learns from; stage 2: the pre-trained screens (:func:`studies.cells.plan`)."""
    return cells.plan(cfg, out)


def analyse(cfg: DictConfig, out: Path) -> list[ProblemResult]:
    """Read every problem's runs, its reference and every cell's figures
    (:func:`studies.cells.analyse`)."""
    return cells.analyse(cfg, out)


# ------------------------------------------------------------------ report
def intro(cfg: DictConfig, machine: str) -> str:
    return (
        f"Each agent with and without a screen at the same budget of paid measurements, "
        f"{cfg.seeds} seeds per cell" + (f", on {machine}" if machine else "") + ". "
        "Speedups are over each target's native compiler; the reference is the proven "
        "optimum of the cost model (`env.optimum()`), else the best known value (the "
        "solver's or any run's, as the heading says). Samples to a level: median "
        "[min-max] over the runs that reached it (how many did). `against none`: "
        "two-sided Mann-Whitney U of the samples to the level (never reached ranks last) "
        "against the same agent unscreened, and the share of pairs where the screened run "
        "got there first. `model's Spearman`: the rank correlation of the screen's "
        "predicted against measured reward on each generation's paid maps, median over "
        "generations, then median [min-max] over seeds. `ms per paid map`: the run's "
        f"wall time over its paid measurements (screening included). The chip: "
        f"`{script_label(cfg.chip)}` (docs/external.md), no optimum."
    )


def render(cfg: DictConfig, result: list[ProblemResult], page: Page) -> str:
    """The ``screening`` section; one figure per problem, ``screening_<problem>.png``."""
    lines = ["## Screening: a learned cost model decides what to measure", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        lines += [
            f"Median samples to {result[0].level:.0%} of the reference with each screen, "
            "as a multiple of the unscreened agent's (Mann-Whitney p; where a median never "
            "got there, how many runs did):",
            "",
            summary_markdown(result, "level"),
            "",
            "Median samples to the unscreened agent's median final best speedup (what it "
            "gets from the whole budget), as a multiple of the unscreened agent's own:",
            "",
            summary_markdown(result, "match"),
            "",
        ]
    for r in result:
        png = plot_problem(r, page.figure(f"screening_{r.problem}.png"))
        lines += problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
