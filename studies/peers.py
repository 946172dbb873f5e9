"""Peers: the toolkit's agents against the black-box optimisers a user would try first.

The plan (``configs/study/peers.yaml``) names the problems (the screening study's), the
agents as egrl-train overrides (the toolkit's EA, SA, GA, EGRL and EA with model search;
Optuna's TPE, GP and CMA-ES samplers, SMAC, Nevergrad's NGOpt and random search) and which
of them are ``peers``: the rest are the toolkit's. Every agent runs on every problem for
``seeds`` seeds at one ``budget`` of paid measurements, in ``OUT/<problem>/<agent>/seed<S>``;
a costly agent may run on some problems only (``agent_problems``), and a costly problem
only some agents (``problem_only``, as in :mod:`studies.screening`). The runs are the
budget's, read at ``early`` paid measurements too (as :mod:`studies.model_search` reads
them). The plan's shape and every agent's figures: :mod:`studies.agent_runs`.

Each run is read against the problem's reference (:func:`studies.cells.reference_of`:
the proven optimum, else the best known value). Per problem and agent the section gives
the best speedup at ``early`` and at the budget, the paid measurements to 99% of the
reference and to the best peer's median final, and the wall time per paid map; every
agent is tested against the toolkit's best agent (the toolkit's agent with the highest
mean final): two-sided Mann-Whitney U on the finals and on the samples (never reached
ranks last). It states, from these numbers, whether the toolkit's best agent ends at or
above every peer on every problem, and on how many problems it reaches the best peer's
final at the budget within half the budget (p < 0.05).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from studies import agent_runs
from studies.agent_runs import (
    AgentResult,
    AgentsResult,
    missing_notes,
    plot_problem,
    problem_markdown,
)
from studies.cells import test_text
from studies.prior_map import PRIOR_HEAD, any_prior, prior_cells
from studies.render import left_out, markdown_table, reproduce
from studies.runner import Page, RunSpec, script_label
from studies.stats import format_mean_std, format_samples

SECTION = "peers"
#: the significance level of the second target
ALPHA = 0.05
#: the second target: the toolkit reaches the best peer's final at the budget in at most
#: this share of the budget, on at least ``MIN_PROBLEMS`` problems
SHARE = 0.5
MIN_PROBLEMS = 3


# ------------------------------------------------------------------ plan and analysis
def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """One stage: every problem x agent x seed (:func:`studies.agent_runs.plan`)."""
    return agent_runs.plan(cfg, out)


def analyse(cfg: DictConfig, out: Path) -> list[AgentsResult]:
    """Every problem's agents, its best agents and every test
    (:func:`studies.agent_runs.analyse`)."""
    return agent_runs.analyse(cfg, out)


# ------------------------------------------------------------------ targets
def peers_above(result: AgentsResult) -> list[AgentResult]:
    """The peers whose mean final is above the toolkit's best agent's (and not
    :func:`level` with it), best first."""
    best = result.agent(result.best)
    above = [
        a for a in result.agents if a.peer and a.mean_final > best.mean_final and not level(a, best)
    ]
    return sorted(above, key=lambda a: -a.mean_final)


def halves_the_peer(result: AgentsResult) -> bool:
    """The toolkit's best agent reaches the best peer's median final (at the budget) in a
    median of at most ``SHARE`` x the budget paid measurements, and first: its samples to
    it are below the best peer's (Mann-Whitney p < ``ALPHA``, most pairs its way)."""
    if result.best_peer is None or result.peer_final is None:
        return False
    mine = float(np.median(result.agent(result.best).to_peer))
    _, p, peer_first = result.agent(result.best_peer).tests["peer"]
    return bool(mine <= SHARE * result.budget and p < ALPHA and peer_first < 0.5)


def target_lines(cfg: DictConfig, results: Sequence[AgentsResult]) -> list[str]:
    """Whether each target is met, from the numbers, with the problems that decide it."""
    missing = [p for p in cfg.problems if p not in {r.problem for r in results}]
    above = {r.problem: peers_above(r) for r in results}
    beaten = [f"{p} ({', '.join(a.agent for a in peers)})" for p, peers in above.items() if peers]
    if beaten:
        first = f"**not met**: a peer ends above on {', '.join(beaten)}"
    elif missing:
        first = f"**not assessed**: {', '.join(missing)} without runs"
    else:
        first = f"**met** on all {len(results)} problems"
    halved = [r.problem for r in results if halves_the_peer(r)]
    second = "**met**" if len(halved) >= MIN_PROBLEMS else "**not met**"
    where = f" ({', '.join(halved)})" if halved else ""
    return [
        f"- The toolkit's best agent ends at or above every peer at {results[0].budget} paid "
        f"measurements on every problem (mean final): {first}.",
        f"- It reaches the best peer's median final at {results[0].budget} in a median of at "
        f"most {SHARE * results[0].budget:.0f} paid measurements, p < {ALPHA} against the best "
        f"peer's samples to it, on at least {MIN_PROBLEMS} problems: {second}, on "
        f"{len(halved)} of {len(results)}{where}.",
    ]


# ------------------------------------------------------------------ report
def winner_line(result: AgentsResult) -> str:
    """Which agent ends highest on the problem and, where a peer does, by how much."""
    best = result.agent(result.best)
    above = peers_above(result)
    if not above:
        text = f"**{result.problem}**: {best.agent} wins ({format_mean_std(best.cell.final)})"
        if result.best_peer is None:
            return text + ", no peer ran."
        peer = result.agent(result.best_peer)
        text += (
            f"; the best peer, {peer.agent}, ends at {format_mean_std(peer.cell.final)}, "
            f"{margin(peer, best)} ({test_text(peer.tests['final'])})"
        )
        if not level(peer, best):
            return text + "."
        return text + (
            f"; to {result.level:.0%} of the reference it takes "
            f"{format_samples(peer.cell.to_level)} paid measurements, {best.agent} "
            f"{format_samples(best.cell.to_level)} ({test_text(peer.tests['level'])}, "
            f"{peer.agent} first)."
        )
    top = above[0]
    return (
        f"**{result.problem}**: a peer wins, {top.agent} ({format_mean_std(top.cell.final)}), "
        f"{margin(top, best)} the toolkit's best, {best.agent} "
        f"({format_mean_std(best.cell.final)}; {test_text(top.tests['final'])})."
    )


def level(a: AgentResult, b: AgentResult) -> bool:
    """Whether ``a`` and ``b`` end level: equal mean finals to the section's 4 decimals."""
    return round(a.mean_final, 4) == round(b.mean_final, 4)


def margin(a: AgentResult, b: AgentResult) -> str:
    """``+2.4% over`` / ``-13.0% under`` / ``level with``: ``a``'s mean final against
    ``b``'s."""
    if level(a, b):
        return "level with"
    if b.mean_final <= 0:
        return f"{a.mean_final - b.mean_final:+.4f} against"
    change = a.mean_final / b.mean_final - 1.0
    return f"{change:+.1%} {'over' if change > 0 else 'under'}"


def summary_markdown(results: Sequence[AgentsResult]) -> str:
    """One row per problem: the prior's map where it was read, the toolkit's best agent
    against the best peer."""
    priors = any_prior(results)
    rows = []
    for r in results:
        best = r.agent(r.best)
        peer = r.agent(r.best_peer) if r.best_peer is not None else None
        rows.append(
            (
                r.problem,
                *(prior_cells(r) if priors else []),
                f"{best.agent} {format_mean_std(best.cell.final)}",
                "-" if peer is None else f"{peer.agent} {format_mean_std(peer.cell.final)}",
                "" if peer is None else f"{margin(peer, best)} ({test_text(peer.tests['final'])})",
                "" if peer is None or best.to_peer is None else format_samples(best.to_peer),
                "" if peer is None or peer.to_peer is None else format_samples(peer.to_peer),
                "" if peer is None else test_text(peer.tests.get("peer")),
                "yes" if halves_the_peer(r) else "no",
            )
        )
    head = (
        "problem",
        *(PRIOR_HEAD if priors else ()),
        f"toolkit's best, final at {results[0].budget}",
        f"best peer, final at {results[0].budget}",
        "peer against toolkit (p, peer higher)",
        "toolkit's samples to peer's final",
        "peer's samples to its final",
        "peer against toolkit (p, peer first)",
        f"toolkit in <= {SHARE * results[0].budget:.0f}, p < {ALPHA}",
    )
    return markdown_table(head, rows)


def intro(cfg: DictConfig, machine: str) -> str:
    agents = ", ".join(f"`{a}`: {' '.join(cfg.agent_overrides[a])}" for a in cfg.agents)
    return (
        f"The toolkit's agents against the peers ({', '.join(cfg.peers)}) at the same "
        f"paid measurements, {cfg.seeds} seeds per agent"
        + (f", on {machine}" if machine else "")
        + f". Each run pays {cfg.budget} measurements and is read at {cfg.early} and at "
        f"{cfg.budget}. The agents, each at its defaults: {agents}. Speedups are over each "
        "target's native compiler; the reference is the proven optimum of the cost model "
        "(`env.optimum()`), else the best known value (the solver's or any run's, as the "
        "heading says). `room taken`: the share of the room between the compiler and the "
        "reference that the final took, (final - 1) / (reference - 1): 100% at the "
        "reference, 0% at the compiler's map or below it. The toolkit's best agent of a "
        "problem is its agent with the highest mean final; every other agent is tested "
        "against it: two-sided Mann-Whitney U of the "
        "best speedups (with the share of pairs where the agent ended higher) and of the "
        "samples to a level (never reached ranks last; the share of pairs where the agent "
        "got there first). Samples to a level: the paid measurements (`iterations`) by the end "
        "of the generation in which the run's best speedup first reached it, median [min-max] "
        "over the runs that reached it (how many did). `ms per paid map`: the run's wall time "
        "over its paid measurements." + chip_text(cfg)
    )


def chip_text(cfg: DictConfig) -> str:
    """The chip of the plan's ``external`` problems (none: no text)."""
    if not any("hwmodel=external" in cfg.problem_overrides[p] for p in cfg.problems):
        return ""
    return f" The chip: `{script_label(cfg.chip)}` (docs/external.md), no optimum."


def render(cfg: DictConfig, result: list[AgentsResult], page: Page) -> str:
    """The ``peers`` section; one figure per problem, ``peers_<problem>.png``."""
    lines = ["## Peers: the toolkit's agents against Optuna, SMAC, Nevergrad and random", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        lines += ["The targets, from the numbers below:", "", *target_lines(cfg, result), ""]
        lines += [
            "Per problem, the toolkit's best agent against the best peer: the finals, and the "
            "paid measurements each needs to reach the best peer's median final:",
            "",
            summary_markdown(result),
            "",
        ]
        lines += ["Who wins each problem at the budget (mean final):", ""]
        lines += [f"- {winner_line(r)}" for r in result] + [""]
    lines += left_out(missing_notes(cfg, result))
    for r in result:
        png = plot_problem(r, page.figure(f"peers_{r.problem}.png"))
        lines += problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
