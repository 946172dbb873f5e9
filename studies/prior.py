"""The solved prior: what a chip's datasheet, solved, gives in one board run, and what
learning adds to it.

The plan (``configs/study/prior.yaml``) has the peers study's shape
(:mod:`studies.agent_runs`): the chip problems of the studies and agents as egrl-train
overrides, every agent on every problem for ``seeds`` seeds at one ``budget``, in
``OUT/<problem>/<agent>/seed<S>``. Every problem's prior (the chip's datasheet as NNP-I
figures, the plan's ``prior``; :mod:`studies.prior_map`) is solved and its map read once
first (``OUT/<problem>/prior.json``), and the runs get it as ``hwmodel.params.prior``.
``starts`` pairs each agent that starts from the prior's map (``agent.start=prior``) with
the same agent from the compiler's map (``agent.start=native``).

The section gives, per problem, the compiler's map and the prior's, each read once, the
solve's time and status, the room the best known map leaves over each, and each pair's
finals at the budget (Mann-Whitney p, two-sided); then what the runs from the prior add
to its map; whether the targets hold (no run from the prior ends below its map, the solve
within its time on ResNet-101 and BERT-base); and per problem the peers study's table of
every agent. A problem whose runs are not all there yet is reported from what exists, and
the section says what is missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from studies import agent_runs, cells, prior_map
from studies.agent_runs import AgentResult, PriorResult
from studies.cells import test_text
from studies.prior_map import PriorReading, room_over
from studies.render import left_out, markdown_table, reproduce
from studies.runner import CommandSpec, Page, RunSpec, script_label
from studies.stats import format_mean_std, mean_std

SECTION = "prior"
#: the solve's target: a map (proven or not) within this many seconds on these workloads
SOLVE_TARGET_S, SOLVE_TARGET_WORKLOADS = 60.0, ("resnet101", "bert-base")
#: how far past its time limit CP-SAT may stop (it checks the clock between steps)
OVERSHOOT_S = 2.0
#: finals level with the prior's map to the section's 4 decimals count as not below it
DECIMALS = 4


# ------------------------------------------------------------------ plan
def check(cfg: DictConfig) -> None:
    """The peers study's checks, and: every problem has a prior to read; every agent of
    ``starts`` and the agent it is held against are agents of the plan."""
    agent_runs.check(cfg)
    prior_map.check_priors(cfg)
    agent_runs.check_pairs(cfg, "starts", "[FROM_PRIOR, BASE]", cfg.agents)


def pairs(cfg: DictConfig) -> list[tuple[str, str]]:
    """``(agent from the prior's map, the same agent from the compiler's map)`` pairs."""
    return [(str(a), str(b)) for a, b in cfg.get("starts") or []]


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """One stage: every problem's prior read, then agent by agent (the plan's order)
    every problem x seed (:func:`studies.agent_runs.plan_by_agent`)."""
    check(cfg)
    yield from agent_runs.plan_by_agent(cfg, out)


# ------------------------------------------------------------------ analysis
def analyse(cfg: DictConfig, out: Path) -> list[PriorResult]:
    """Every problem's reading and runs (:func:`studies.agent_runs.prior_results`)."""
    return agent_runs.prior_results(cfg, out)


# ------------------------------------------------------------------ figures
def pair_text(result: PriorResult, agent: str, against: str) -> tuple[str, str, str]:
    """An agent from the prior against the same agent from the compiler's map: both
    finals (mean ± std) and the test (p, the share of pairs the prior's runs ended
    higher); empty where either has no run."""
    mine, base = result.agent(agent), result.agent(against)
    texts = ["" if a is None else format_mean_std(a.cell.final) for a in (base, mine)]
    if mine is None or base is None:
        return texts[0], texts[1], ""
    return texts[0], texts[1], test_text(agent_runs.higher(mine.cell.final, base.cell.final))


def summary_markdown(cfg: DictConfig, results: Sequence[PriorResult]) -> str:
    """Per problem: the compiler's map, the prior's, the solve, the best known and the room
    over each, and every pair of ``starts``."""
    rows = []
    for r in results:
        p = r.prior
        row = [
            r.problem,
            "1.0000",
            "-" if p is None else f"{p.speedup:.4f}",
            "-" if p is None else p.solve_text,
            f"{r.reference:.4f} ({r.source})",
            room_over(r.reference, 1.0),
            "-" if p is None else room_over(r.reference, p.speedup),
        ]
        for agent, against in pairs(cfg):
            row += pair_text(r, agent, against)
        rows.append(row)
    head = [
        "problem",
        "compiler's map",
        "prior's map, one board run",
        "the prior's solve",
        "best known",
        "room over the compiler",
        "room over the prior",
    ]
    for agent, against in pairs(cfg):
        head += [
            f"{against} at {cfg.budget}",
            f"{agent} at {cfg.budget}",
            f"{agent} against {against} (p, higher)",
        ]
    return markdown_table(head, rows)


def over_prior(agent: AgentResult, prior: PriorReading) -> np.ndarray:
    """float ``[S]``: each run's final over the prior's map, less 1."""
    return agent.cell.final / prior.speedup - 1.0


def gain_text(gains: np.ndarray) -> str:
    """``+0.43% ± 0.43%``: the mean gain, signed, and its spread over seeds."""
    ms = mean_std(gains)
    spread = f" ± {ms.std:.2%}" if np.isfinite(ms.std) else ""
    return f"{ms.mean:+.2%}{spread}"


def below_prior(agent: AgentResult, prior: PriorReading) -> int:
    """The runs whose final is below the prior's map (to :data:`DECIMALS` decimals)."""
    finals = np.round(agent.cell.final, DECIMALS)
    return int((finals < round(prior.speedup, DECIMALS)).sum())


def gains_markdown(cfg: DictConfig, results: Sequence[PriorResult]) -> str:
    """Per problem and agent: the final over the prior's map (mean ± std over seeds), and
    how many runs ended above it and below it."""
    rows = []
    for r in results:
        if r.prior is None or r.agents is None or not r.prior.speedup > 0:
            continue
        for a in r.agents.agents:
            finals = np.round(a.cell.final, DECIMALS)
            above = int((finals > round(r.prior.speedup, DECIMALS)).sum())
            rows.append(
                (
                    r.problem,
                    a.agent,
                    len(a.cell.runs),
                    gain_text(over_prior(a, r.prior)),
                    f"{above}/{len(a.cell.runs)}",
                    f"{below_prior(a, r.prior)}/{len(a.cell.runs)}",
                )
            )
    head = (
        "problem",
        "agent",
        "runs",
        f"final at {cfg.budget} over the prior's map",
        "runs above it",
        "runs below it",
    )
    return markdown_table(head, rows)


# ------------------------------------------------------------------ targets
def target_lines(cfg: DictConfig, results: Sequence[PriorResult]) -> list[str]:
    """Whether each target holds, from the numbers, with the problems that decide it."""
    below, assessed = [], 0
    for r in results:
        if r.prior is None:
            continue
        for name, _ in pairs(cfg):
            a = r.agent(name)
            if a is None:
                continue
            assessed += len(a.cell.runs)
            if below_prior(a, r.prior):
                below.append(f"{r.problem} ({name}: {below_prior(a, r.prior)})")
    if not assessed:
        first = "**not assessed**, no run from the prior has finished"
    elif below:
        first = f"**not met**: {', '.join(below)}"
    else:
        first = f"**met** ({assessed} runs)"
    slow, timed = [], []
    for r in results:
        workload = next((w for w in SOLVE_TARGET_WORKLOADS if r.problem.endswith(w)), None)
        if r.prior is None or workload is None:
            continue
        timed.append(f"{r.problem} {r.prior.solve_s:.1f} s, {r.prior.status}")
        if r.prior.solve_s > SOLVE_TARGET_S + OVERSHOOT_S or r.prior.fell_back:
            slow.append(r.problem)
    if not timed:
        second = "**not assessed**, no such problem read"
    else:
        verdict = "**met**" if not slow else f"**not met** on {', '.join(slow)}"
        second = f"{verdict} ({'; '.join(timed)})"
    return [
        f"- No run from the prior ends below the prior's map: {first}.",
        f"- The solve, hinted with the compiler's map, gives a map within {SOLVE_TARGET_S:.0f} s "
        f"(its time limit; proven or not) on {' and '.join(SOLVE_TARGET_WORKLOADS)}: {second}.",
    ]


# ------------------------------------------------------------------ the section
def intro(cfg: DictConfig, machine: str) -> str:
    agents = ", ".join(f"`{a}`: {' '.join(cfg.agent_overrides[a])}" for a in cfg.agents)
    return (
        "A compiler engineer with the chip's datasheet would give it to a model and solve "
        "that: here the datasheet as NNP-I figures (`hwmodel.params.prior`: "
        f"{prior_map.figures_text(cfg)}), solved by CP-SAT on the model's costs (at most "
        f"{prior_map.time_limit_of(cfg):.0f} s, hinted with the compiler's map), checked by "
        "the chip's compiler and read once on the chip. Beside it, each agent from the "
        "prior's map (`agent.start=prior`) and from the compiler's map "
        f"(`agent.start=native`), {cfg.seeds} seeds, {cfg.budget} board runs each"
        + (f", on {machine}" if machine else "")
        + f". The agents: {agents}. Speedups are over the chip's compiler; the best known "
        "is the best map any run or the prior read (the compiler's when none beat it). "
        "`room over the compiler` and `over the prior`: how far the best known map is "
        "above each. Tests: two-sided Mann-Whitney U of the finals, with the share of pairs "
        "where the run from the prior ended higher. The chip: "
        f"`{script_label(cfg.chip)}` (docs/external.md)" + cells.problem_chips_text(cfg) + "."
    )


def render(cfg: DictConfig, result: list[PriorResult], page: Page) -> str:
    """The ``prior`` section; one figure per problem with runs, ``prior_<problem>.png``."""
    lines = ["## The solved prior: the chip's datasheet as the baseline", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        lines += ["The targets, from the numbers below:", "", *target_lines(cfg, result), ""]
        lines += [
            "Per problem, the compiler's map and the solved prior's, each read once, and "
            f"each agent's final at {cfg.budget} from the compiler's map and from the "
            "prior's:",
            "",
            summary_markdown(cfg, result),
            "",
        ]
        gains = gains_markdown(cfg, result)
        if gains.count("\n") > 1:  # a row beyond the head
            lines += [
                "What the runs add to the prior's map (finals over it; level to 4 decimals "
                "counts as neither above nor below):",
                "",
                gains,
                "",
            ]
    lines += left_out(agent_runs.prior_missing_notes(cfg, result))
    for r in result:
        if r.agents is None:
            continue
        png = agent_runs.plot_problem(r.agents, page.figure(f"prior_{r.problem}.png"))
        lines += agent_runs.problem_markdown(r.agents, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
