"""Peers: the toolkit's agents against the black-box optimisers a user would try first.

The plan (``configs/study/peers.yaml``) names the problems (the screening study's), the
agents as egrl-train overrides (the toolkit's EA, SA, GA, EGRL and EA with model search;
Optuna's TPE, GP and CMA-ES samplers, SMAC, Nevergrad's NGOpt and random search) and which
of them are ``peers``: the rest are the toolkit's. Every agent runs on every problem for
``seeds`` seeds at one ``budget`` of paid measurements, in ``OUT/<problem>/<agent>/seed<S>``;
a costly agent may run on some problems only (``agent_problems``), and a costly problem
only some agents (``problem_only``, as in :mod:`studies.screening`). The runs are the
budget's, read at ``early`` paid measurements too (as :mod:`studies.model_search` reads
them).

Each run is read against the problem's reference (:func:`studies.screening.reference_of`:
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

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from studies import model_search, screening
from studies.render import left_out, markdown_table, plot_median_curves, reproduce
from studies.runner import Page, RunSpec, StudyError, script_label
from studies.screening import CellResult, test_text
from studies.stats import (
    compare,
    format_mean_std,
    format_samples,
    median_range,
    room_taken,
    samples_to_level,
)

log = logging.getLogger(__name__)

SECTION = "peers"
#: the significance level of the second target
ALPHA = 0.05
#: the second target: the toolkit reaches the best peer's final at the budget in at most
#: this share of the budget, on at least ``MIN_PROBLEMS`` problems
SHARE = 0.5
MIN_PROBLEMS = 3


# ------------------------------------------------------------------ plan
def group(problem: str, agent: str) -> str:
    """An agent's directory under the study's output: ``<problem>/<agent>``."""
    return f"{problem}/{agent}"


def check(cfg: DictConfig) -> None:
    """The screening study's checks (:func:`studies.screening.check`), and: ``early`` within
    the budget; every peer and agent of ``agent_problems`` has overrides; the toolkit has
    an agent."""
    screening.check(cfg)
    if not 1 <= int(cfg.early) <= int(cfg.budget):
        raise StudyError(f"{cfg.study}: early={cfg.early} is invalid: expected 1 .. budget")
    for kind, names in (("peer", cfg.peers), ("agent", cfg.get("agent_problems") or {})):
        unknown = [n for n in names if n not in cfg.agent_overrides]
        if unknown:
            raise StudyError(f"{cfg.study}: {kind} {unknown[0]!r} has no overrides in the plan")
    if all(a in cfg.peers for a in cfg.agents):
        raise StudyError(f"{cfg.study}: every agent is a peer: no agent of the toolkit")


def agents_of(cfg: DictConfig, problem: str) -> list[str]:
    """The agents a problem runs (:func:`studies.screening.agents_of`: the plan's, or those
    of ``problem_only``), less those that ``agent_problems`` keeps to other problems (a
    costly agent on a few problems; a null list: every problem)."""
    limits = cfg.get("agent_problems") or {}
    names = screening.agents_of(cfg, problem)
    return [a for a in names if limits.get(a) is None or problem in limits[a]]


def spec(cfg: DictConfig, problem: str, agent: str, seed: int) -> RunSpec:
    """One run: the problem's overrides, the agent's, the budget."""
    overrides = (
        *screening.problem_overrides(cfg, problem),
        *cfg.agent_overrides[agent],
        f"budget={cfg.budget}",
    )
    return RunSpec(group(problem, agent), seed, overrides)


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """One stage: every problem x agent (:func:`agents_of`) x seed."""
    check(cfg)
    yield [
        spec(cfg, problem, agent, seed)
        for problem in cfg.problems
        for agent in agents_of(cfg, problem)
        for seed in range(int(cfg.seeds))
    ]


# ------------------------------------------------------------------ analysis
@dataclass
class AgentResult:
    """One agent on one problem; arrays over its ``S`` runs (seeds).

    Attributes:
        cell: the screening study's figures of the runs (final best speedup, samples to
            the compiler and to the level, wall time per paid map).
        peer: a peer (else the toolkit's).
        early: the best speedup after ``early`` paid measurements ``[S]`` (NaN: none yet).
        to_peer: paid samples to the best peer's median final ``[S]`` (inf: never; None
            when the problem has no peer or no valid peer map).
        tests: against the toolkit's best agent, ``(U, p, share of pairs this agent did
            better)``: ``"early"`` and ``"final"`` on the best speedups (higher better),
            ``"level"`` and ``"peer"`` on the samples (first better); empty for the best.
    """

    cell: CellResult
    peer: bool
    early: np.ndarray
    to_peer: np.ndarray | None = None
    tests: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @property
    def agent(self) -> str:
        return self.cell.agent

    @property
    def mean_final(self) -> float:
        return float(np.mean(self.cell.final))


@dataclass
class PeersResult:
    """Every agent of one problem, its toolkit's best agent and its best peer.

    Attributes:
        reference: what shares and the level divide by; ``source``: where it comes from.
        best: the toolkit's agent with the highest mean final.
        best_peer: the peer with the highest mean final (None: no peer ran).
        peer_final: the best peer's median final, the level of ``to_peer``.
    """

    problem: str
    reference: float
    source: str
    budget: int
    early: int
    level: float
    agents: list[AgentResult]
    best: str
    best_peer: str | None = None
    peer_final: float | None = None

    def agent(self, name: str) -> AgentResult:
        return next(a for a in self.agents if a.agent == name)


def strongest(agents: Sequence[AgentResult]) -> AgentResult | None:
    """The agent with the highest mean final; ties: fewer median samples to the level."""
    if not agents:
        return None
    return max(agents, key=lambda a: (a.mean_final, -float(np.median(a.cell.to_level))))


def samples_to(cell: CellResult, value: float) -> np.ndarray:
    """float ``[S]``: each run's paid samples to the best speedup ``value`` (inf: never)."""
    return np.array([samples_to_level(r.iterations, r.best_speedup, value) for r in cell.runs])


def higher(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """:func:`studies.stats.compare` of best speedups (higher better): ``a``'s U, p, and
    the share of pairs where ``a`` ended higher (ties half)."""
    return compare(-np.asarray(a), -np.asarray(b))


def add_tests(result: PeersResult) -> None:
    """Each agent's ``to_peer`` and its tests against the toolkit's best agent."""
    if result.peer_final is not None:
        for a in result.agents:
            a.to_peer = samples_to(a.cell, result.peer_final)
    best = result.agent(result.best)
    for a in result.agents:
        if a is best:
            continue
        a.tests = {
            "early": higher(a.early, best.early),
            "final": higher(a.cell.final, best.cell.final),
            "level": compare(a.cell.to_level, best.cell.to_level),
        }
        if a.to_peer is not None:
            a.tests["peer"] = compare(a.to_peer, best.to_peer)


def problem_result(cfg: DictConfig, out: Path, problem: str) -> PeersResult | None:
    """Every agent of ``problem``; None when no agent of the toolkit finished a run."""
    runs = {a: screening.finished_runs(out / group(problem, a)) for a in agents_of(cfg, problem)}
    every = [r for rs in runs.values() for r in rs]
    if not every:
        log.warning("%s: no finished run", problem)
        return None
    reference, source = screening.reference_of(cfg, out, problem, every)
    level = float(cfg.level) * reference
    peers = set(cfg.peers)
    early = int(cfg.early)
    agents = []
    for name, rs in runs.items():
        if not rs:
            continue
        cell = screening.cell_result(name, "none", rs, level)
        agents.append(AgentResult(cell, name in peers, model_search.best_at(cell, early)))
    best = strongest([a for a in agents if not a.peer])
    if best is None:
        log.warning("%s: no finished run of the toolkit's agents", problem)
        return None
    peer = strongest([a for a in agents if a.peer])
    peer_final = float(np.median(peer.cell.final)) if peer is not None else None
    budget = max(r.budget for r in every)
    result = PeersResult(
        problem,
        reference,
        source,
        budget,
        early,
        float(cfg.level),
        agents,
        best.agent,
        peer.agent if peer is not None else None,
        peer_final if peer_final is not None and peer_final > 0 else None,
    )
    add_tests(result)
    return result


def analyse(cfg: DictConfig, out: Path) -> list[PeersResult]:
    """Read every problem's runs, its reference, its best agents and every test."""
    results = [problem_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ targets
def peers_above(result: PeersResult) -> list[AgentResult]:
    """The peers whose mean final is above the toolkit's best agent's (and not
    :func:`level` with it), best first."""
    best = result.agent(result.best)
    above = [
        a for a in result.agents if a.peer and a.mean_final > best.mean_final and not level(a, best)
    ]
    return sorted(above, key=lambda a: -a.mean_final)


def halves_the_peer(result: PeersResult) -> bool:
    """The toolkit's best agent reaches the best peer's median final (at the budget) in a
    median of at most ``SHARE`` x the budget paid measurements, and first: its samples to
    it are below the best peer's (Mann-Whitney p < ``ALPHA``, most pairs its way)."""
    if result.best_peer is None or result.peer_final is None:
        return False
    mine = float(np.median(result.agent(result.best).to_peer))
    _, p, peer_first = result.agent(result.best_peer).tests["peer"]
    return bool(mine <= SHARE * result.budget and p < ALPHA and peer_first < 0.5)


def target_lines(cfg: DictConfig, results: Sequence[PeersResult]) -> list[str]:
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
def winner_line(result: PeersResult) -> str:
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


def summary_markdown(results: Sequence[PeersResult]) -> str:
    """One row per problem: the toolkit's best agent against the best peer."""
    rows = []
    for r in results:
        best = r.agent(r.best)
        peer = r.agent(r.best_peer) if r.best_peer is not None else None
        rows.append(
            (
                r.problem,
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
        f"toolkit's best, final at {results[0].budget}",
        f"best peer, final at {results[0].budget}",
        "peer against toolkit (p, peer higher)",
        "toolkit's samples to peer's final",
        "peer's samples to its final",
        "peer against toolkit (p, peer first)",
        f"toolkit in <= {SHARE * results[0].budget:.0f}, p < {ALPHA}",
    )
    return markdown_table(head, rows)


def table_markdown(result: PeersResult) -> str:
    """One row per agent, the toolkit's first."""
    rows = [
        (
            a.agent,
            "peer" if a.peer else ("toolkit (best)" if a.agent == result.best else "toolkit"),
            len(a.cell.runs),
            format_mean_std(a.early),
            format_mean_std(a.cell.final),
            format_mean_std(a.cell.final / result.reference, "{:.2%}"),
            format_mean_std(room_taken(a.cell.final, result.reference), "{:.0%}", "no room"),
            test_text(a.tests.get("early")),
            test_text(a.tests.get("final")),
            format_samples(a.cell.to_level),
            test_text(a.tests.get("level")),
            "" if a.to_peer is None else format_samples(a.to_peer),
            median_range(a.cell.ms_per_sample, "{:.1f}"),
        )
        for a in sorted(result.agents, key=lambda a: a.peer)
    ]
    head = (
        "agent",
        "kind",
        "runs",
        f"final at {result.early}",
        f"final at {result.budget}",
        "share of reference",
        "room taken",
        f"against best at {result.early} (p, higher)",
        f"against best at {result.budget} (p, higher)",
        f"samples to {result.level:.0%}",
        "against best (p, first)",
        "samples to best peer's final",
        "ms per paid map",
    )
    return markdown_table(head, rows)


def plot_problem(result: PeersResult, path: Path) -> Path:
    """Median best speedup against paid samples: the toolkit's agents solid, peers dashed."""
    from matplotlib import colormaps

    tab20 = colormaps["tab20"].colors
    colours = [*tab20[0::2], *tab20[1::2]]  # the ten strong colours, then their light ones
    series = [
        (a.agent, a.cell.runs, "--" if a.peer else "-", colours[i % len(colours)])
        for i, a in enumerate(result.agents)
    ]
    refs = {
        "native compiler": 1.0,
        f"{result.level:.0%} of {result.source}": result.level * result.reference,
    }
    if result.peer_final is not None:
        refs[f"{result.best_peer}'s median final"] = result.peer_final
    return plot_median_curves(series, refs, result.problem, path)


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


def problem_markdown(result: PeersResult, figure: str) -> list[str]:
    return screening.problem_block(result, table_markdown(result), figure)


def missing_notes(cfg: DictConfig, results: Sequence[PeersResult]) -> list[str]:
    """Per problem, the plan's agents it did not run (``agent_problems``, ``problem_only``),
    those without a finished run and those with fewer finished runs than the plan's seeds
    (a study still under way); a problem with no result at all."""
    found = {r.problem: r for r in results}
    notes = []
    for problem in cfg.problems:
        if problem not in found:
            notes.append(f"{problem}: no finished run of the toolkit's agents")
            continue
        planned = agents_of(cfg, problem)
        ran = {a.agent for a in found[problem].agents}
        skipped = [a for a in cfg.agents if a not in planned]
        if skipped:
            notes.append(f"{problem}: {', '.join(skipped)} not run here (the plan's limits)")
        unfinished = [a for a in planned if a not in ran]
        if unfinished:
            notes.append(f"{problem}: {', '.join(unfinished)} without a finished run")
        seeds = int(cfg.seeds)
        short = [
            f"{a.agent} {len(a.cell.runs)}"
            for a in found[problem].agents
            if len(a.cell.runs) < seeds
        ]
        if short:
            notes.append(f"{problem}: finished runs of {seeds} seeds: {', '.join(short)}")
    return notes


def render(cfg: DictConfig, result: list[PeersResult], page: Page) -> str:
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
