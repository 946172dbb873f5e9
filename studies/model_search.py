"""Model search: does searching a learned cost model between paid batches save measurements?

The plan (``configs/study/model-search.yaml``) has the shape of the screening study's
(:mod:`studies.screening`): problems, agents and screens as egrl-train overrides, every
agent on every problem with every screen for ``seeds`` seeds at one ``budget``, in
``OUT/<problem>/<agent>/<screen>/seed<S>``. Its screens are no screen (the reference),
today's pool re-ranking (``screen=forest``) and model search (``screen.search=G``: the
agent's own operators run ``G`` generations or steps on the model between paid batches,
and the screen pays the best unseen maps they visited), with and without a model
pre-trained on the chip's other workloads (``screen.init_from`` the unscreened runs of
``pretrain.problems``, run first).

Problems listed under ``oracles`` are ones whose description carries the measured
quantity itself (NNP-I's description holds the cost model's latency): there the model
is exact, and the rows check the search machinery rather than learning. They are
reported apart and count toward no claim.

The section gives the screening study's tables (samples to 99% of the reference and to
the unscreened agent's median final, the final, the model's rank quality and the wall
time per paid map, Mann-Whitney against no screen), and the best speedup each cell had
after ``early`` paid measurements beside the unscreened agent's final: what model search
reaches at a quarter of the budget. The runs are the budget's, read at ``early``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from studies import cells
from studies.cells import REFERENCE, CellResult, ProblemResult, best_at
from studies.render import markdown_table, reproduce
from studies.runner import Page, RunSpec, script_label
from studies.stats import format_mean_std, median_range

SECTION = "model-search"


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """The screening study's plan (:func:`studies.cells.plan`) on this study's plan."""
    return cells.plan(cfg, out)


def analyse(cfg: DictConfig, out: Path) -> list[ProblemResult]:
    """Every problem's cells (:func:`studies.cells.analyse`)."""
    return cells.analyse(cfg, out)


def early_markdown(results: Sequence[ProblemResult], early: int) -> str:
    """Per problem and agent: each screen's best speedup after ``early`` paid maps (mean ±
    std over seeds), beside the unscreened agent's final at the whole budget."""
    screens = list(dict.fromkeys(c.screen for r in results for c in r.cells))
    rows = []
    for r in results:
        base = {c.agent: c for c in r.cells if c.screen == REFERENCE}
        for agent, b in base.items():
            row = [r.problem, agent, format_mean_std(b.final)]
            for screen in screens:
                cell = next((c for c in r.cells if c.agent == agent and c.screen == screen), None)
                row.append("" if cell is None else format_mean_std(best_at(cell, early)))
            rows.append(row)
    head = (
        "problem",
        "agent",
        "none's final",
        *(f"{s} at {early}" for s in screens),
    )
    return markdown_table(head, rows)


def screen_ms(cell: CellResult) -> np.ndarray:
    """float ``[S]``: each run's screening time (fits, model search, picks; the
    ``t_screening`` column) over its paid measurements, in ms."""
    out = []
    for run in cell.runs:
        seconds = float(run.last_row.get("t_screening") or "nan")
        out.append(1000 * seconds / max(int(run.iterations[-1]), 1))
    return np.array(out)


def cost_markdown(results: Sequence[ProblemResult]) -> str:
    """Per problem, agent and screen: the screen's own time per paid map (median [min-max]
    over seeds) beside the run's whole wall time per paid map."""
    rows = [
        (
            r.problem,
            c.agent,
            c.screen,
            median_range(screen_ms(c), "{:.0f}"),
            median_range(c.ms_per_sample, "{:.0f}"),
        )
        for r in results
        for c in r.cells
        if c.screen != REFERENCE
    ]
    head = ("problem", "agent", "screen", "screen ms per paid map", "run ms per paid map")
    return markdown_table(head, rows)


def intro(cfg: DictConfig, machine: str) -> str:
    search = ", ".join(f"`{s}`: {' '.join(cfg.screen_overrides[s])}" for s in screens_in(cfg))
    return (
        "Each agent without a screen, with the pool re-ranking of the screening section, and "
        "searching the model between paid batches, at the same budget of paid measurements, "
        f"{cfg.seeds} seeds per cell" + (f", on {machine}" if machine else "") + ". "
        f"The screens: {search}. The tables read as the screening section's; "
        f"problems marked as oracles have the measured quantity in the model's description, "
        f"so their model is exact and their rows are a check of the search, apart from the "
        f"claims. The chip: `{script_label(cfg.chip)}` (docs/external.md), no "
        "optimum"
        + "".join(
            f"; {problem}'s: `{script_label(cells.chip_of(cfg, problem))}`"
            for problem in (cfg.get("problem_chips") or {})
            if problem in cfg.problems
        )
        + "."
    )


def screens_in(cfg: DictConfig) -> list[str]:
    """Every screen of the plan, in order."""
    return list(dict.fromkeys(s for p in cfg.problems for s in cells.screens_of(cfg, p)))


def render(cfg: DictConfig, result: list[ProblemResult], page: Page) -> str:
    """The ``model-search`` section; one figure per problem, ``model-search_<problem>.png``."""
    oracles = set(cfg.get("oracles") or [])
    learned = [r for r in result if r.problem not in oracles]
    exact = [r for r in result if r.problem in oracles]
    early = int(cfg.early)
    lines = ["## Model search: the cost model searches, the chip confirms", ""]
    lines += [intro(cfg, page.machine), ""]
    for title, group in (("Problems where the model must learn", learned), ("Oracles", exact)):
        if not group:
            continue
        lines += [
            f"### {title}",
            "",
            f"Median samples to {group[0].level:.0%} of the reference with each screen, as a "
            "multiple of the unscreened agent's (Mann-Whitney p; where a median never got "
            "there, how many runs did):",
            "",
            cells.summary_markdown(group, "level"),
            "",
            f"Best speedup after {early} paid measurements, beside the unscreened agent's "
            f"final at {group[0].budget}:",
            "",
            early_markdown(group, early),
            "",
        ]
    if result:
        lines += [
            "What the screen costs: its own time per paid map (fitting, searching the model, "
            "picking), beside the run's wall time per paid map (the chip's answers included):",
            "",
            cost_markdown(result),
            "",
        ]
    for r in result:
        png = cells.plot_problem(r, page.figure(f"model-search_{r.problem}.png"))
        lines += cells.problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
