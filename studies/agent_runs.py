"""Every agent on every problem, read against the toolkit's best agent: the shape of the
studies of agents alone (peers, mbo, llm, prior).

The plan names the problems and the agents as egrl-train overrides (the problems' chips
and limits as in :mod:`studies.cells`) and which agents are ``peers`` (none in a study of
the toolkit's agents alone): the rest are the toolkit's. Every agent runs on every problem
for ``seeds`` seeds at one ``budget`` of paid measurements, in
``OUT/<problem>/<agent>/seed<S>``; a costly agent may run on some problems only
(``agent_problems``), and a costly problem only some agents (``problem_only``). The runs
are the budget's, read at ``early`` paid measurements too.

Each run is read against the problem's reference (:func:`studies.cells.reference_of`:
the proven optimum, else the best known value). Per problem and agent: the best speedup at
``early`` and at the budget, the paid measurements to ``level`` of the reference and to
the best peer's median final, and the wall time per paid map; every agent is tested
against the toolkit's best agent (the toolkit's agent with the highest mean final):
two-sided Mann-Whitney U on the finals and on the samples (never reached ranks last).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from studies import cells, prior_map
from studies.cells import CellResult, best_at, test_text
from studies.prior_map import PriorReading, read_prior
from studies.render import markdown_table, plot_median_curves
from studies.runner import CommandSpec, RunSpec, StudyError
from studies.stats import (
    compare,
    format_mean_std,
    format_samples,
    median_range,
    room_taken,
    samples_to_level,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ plan
def group(problem: str, agent: str) -> str:
    """An agent's directory under the study's output: ``<problem>/<agent>``."""
    return f"{problem}/{agent}"


def check(cfg: DictConfig) -> None:
    """The screening study's checks (:func:`studies.cells.check`), and: ``early`` within
    the budget; every peer and agent of ``agent_problems`` has overrides; the toolkit has
    an agent."""
    cells.check(cfg)
    if not 1 <= int(cfg.early) <= int(cfg.budget):
        raise StudyError(f"{cfg.study}: early={cfg.early} is invalid: expected 1 .. budget")
    for kind, names in (("peer", cfg.peers), ("agent", cfg.get("agent_problems") or {})):
        unknown = [n for n in names if n not in cfg.agent_overrides]
        if unknown:
            raise StudyError(f"{cfg.study}: {kind} {unknown[0]!r} has no overrides in the plan")
    if all(a in cfg.peers for a in cfg.agents):
        raise StudyError(f"{cfg.study}: every agent is a peer: no agent of the toolkit")


def check_pairs(cfg: DictConfig, key: str, expected: str, among) -> None:
    """Every pair of the plan's ``key`` is two names (``expected``: their words, e.g.
    ``[AGENT, AGAINST]``), each one of ``among``."""
    for pair in cfg.get(key) or []:
        if len(pair) != 2:
            raise StudyError(f"{cfg.study}: {key} has {list(pair)}: expected {expected}")
        for name in pair:
            if name not in among:
                raise StudyError(f"{cfg.study}: {key} names {name!r}, not among the agents")


def agents_of(cfg: DictConfig, problem: str) -> list[str]:
    """The agents a problem runs (:func:`studies.cells.agents_of`: the plan's, or those
    of ``problem_only``), less those that ``agent_problems`` keeps to other problems (a
    costly agent on a few problems; a null list: every problem)."""
    limits = cfg.get("agent_problems") or {}
    names = cells.agents_of(cfg, problem)
    return [a for a in names if limits.get(a) is None or problem in limits[a]]


def spec(cfg: DictConfig, problem: str, agent: str, seed: int) -> RunSpec:
    """One run: the problem's overrides, the agent's, the budget."""
    overrides = (
        *cells.problem_overrides(cfg, problem),
        *cfg.agent_overrides[agent],
        f"budget={cfg.budget}",
    )
    return RunSpec(group(problem, agent), seed, overrides)


def prior_spec(
    cfg: DictConfig, problem: str, agent: str, seed: int, extra: Sequence[str] = ()
) -> RunSpec:
    """One run of a study of the solved prior (prior, physics): the problem's overrides
    with its prior (:func:`studies.cells.overrides_of`), the agent's, the budget, the
    solve's time limit, then ``extra``."""
    overrides = (
        *cells.overrides_of(cfg, problem),
        *cfg.agent_overrides[agent],
        f"budget={cfg.budget}",
        f"prior_time_limit_s={prior_map.time_limit_of(cfg)}",
        *extra,
    )
    return RunSpec(group(problem, agent), seed, overrides)


def plan_by_agent(
    cfg: DictConfig, out: Path, extra: Sequence[str] = ()
) -> Iterator[list[RunSpec | CommandSpec]]:
    """One stage: every problem's prior read, then agent by agent (the plan's order) every
    problem x seed (:func:`prior_spec`), so that a study stopped early has whole agents."""
    runs = [
        prior_spec(cfg, problem, agent, seed, extra)
        for agent in cfg.agents
        for problem in cfg.problems
        if agent in agents_of(cfg, problem)
        for seed in range(int(cfg.seeds))
    ]
    yield [*cells.prior_steps(cfg, out), *runs]


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """One stage: the priors read (:func:`studies.cells.prior_steps`), then every problem x
    agent (:func:`agents_of`) x seed."""
    check(cfg)
    runs = [
        spec(cfg, problem, agent, seed)
        for problem in cfg.problems
        for agent in agents_of(cfg, problem)
        for seed in range(int(cfg.seeds))
    ]
    yield [*cells.prior_steps(cfg, out), *runs]


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
class AgentsResult:
    """Every agent of one problem, its toolkit's best agent and its best peer.

    Attributes:
        reference: what shares and the level divide by; ``source``: where it comes from.
        best: the toolkit's agent with the highest mean final.
        best_peer: the peer with the highest mean final (None: no peer ran).
        peer_final: the best peer's median final, the level of ``to_peer``.
        prior: the solved prior's map read once (None: not read).
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
    prior: PriorReading | None = None

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


def add_tests(result: AgentsResult) -> None:
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


def problem_result(cfg: DictConfig, out: Path, problem: str) -> AgentsResult | None:
    """Every agent of ``problem``; None when no agent of the toolkit finished a run."""
    runs = {a: cells.finished_runs(out / group(problem, a)) for a in agents_of(cfg, problem)}
    every = [r for rs in runs.values() for r in rs]
    if not every:
        log.warning("%s: no finished run", problem)
        return None
    reference, source = cells.reference_of(cfg, out, problem, every)
    level = float(cfg.level) * reference
    peers = set(cfg.peers)
    early = int(cfg.early)
    agents = []
    for name, rs in runs.items():
        if not rs:
            continue
        cell = cells.cell_result(name, "none", rs, level)
        agents.append(AgentResult(cell, name in peers, best_at(cell, early)))
    best = strongest([a for a in agents if not a.peer])
    if best is None:
        log.warning("%s: no finished run of the toolkit's agents", problem)
        return None
    peer = strongest([a for a in agents if a.peer])
    peer_final = float(np.median(peer.cell.final)) if peer is not None else None
    budget = max(r.budget for r in every)
    result = AgentsResult(
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
        read_prior(out, problem),
    )
    add_tests(result)
    return result


def analyse(cfg: DictConfig, out: Path) -> list[AgentsResult]:
    """Read every problem's runs, its reference, its best agents and every test."""
    results = [problem_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


@dataclass
class PriorResult:
    """One problem of a study of the solved prior: its prior's reading and its agents' runs
    (either may be missing).

    Attributes:
        reference: the best known map's speedup (the runs', the prior's, the compiler's).
        source: where it comes from (``runs``, ``prior``, ``compiler``).
        agents: every agent's figures (None: no finished run yet).
    """

    problem: str
    prior: PriorReading | None
    agents: AgentsResult | None
    reference: float
    source: str

    def agent(self, name: str) -> AgentResult | None:
        """The agent ``name`` (None: no finished run of it)."""
        if self.agents is None:
            return None
        return next((a for a in self.agents.agents if a.agent == name), None)


def prior_result(cfg: DictConfig, out: Path, problem: str) -> PriorResult | None:
    """The problem's reading and runs; None when it has neither."""
    prior = read_prior(out, problem)
    agents = problem_result(cfg, out, problem)
    if agents is not None:
        return PriorResult(problem, prior, agents, agents.reference, agents.source)
    if prior is None:
        return None
    best, source = (prior.speedup, "prior") if prior.speedup > 1.0 else (1.0, "compiler")
    return PriorResult(problem, prior, None, best, source)


def prior_results(cfg: DictConfig, out: Path) -> list[PriorResult]:
    """Every problem's reading and runs (:func:`prior_result`)."""
    results = [prior_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


def prior_missing_notes(cfg: DictConfig, results: Sequence[PriorResult]) -> list[str]:
    """The problems whose prior was not read and the runs still missing
    (:func:`missing_notes`)."""
    read = {r.problem for r in results if r.prior is not None}
    notes = [f"{p}: the prior's map not read yet" for p in cfg.problems if p not in read]
    found = [r.agents for r in results if r.agents is not None]
    notes += missing_notes(cfg, found)
    return notes


# ------------------------------------------------------------------ report
def table_markdown(result: AgentsResult) -> str:
    """One row per agent, the toolkit's first; where the prior was read, the room each
    agent took over the prior's map beside the room it took over the compiler's."""
    prior = result.prior
    rows = []
    for a in sorted(result.agents, key=lambda a: a.peer):
        over_prior = room_taken(a.cell.final, result.reference, prior.speedup) if prior else None
        rows.append(
            (
                a.agent,
                "peer" if a.peer else ("toolkit (best)" if a.agent == result.best else "toolkit"),
                len(a.cell.runs),
                format_mean_std(a.early),
                format_mean_std(a.cell.final),
                format_mean_std(a.cell.final / result.reference, "{:.2%}"),
                format_mean_std(room_taken(a.cell.final, result.reference), "{:.0%}", "no room"),
                *([] if prior is None else [format_mean_std(over_prior, "{:.0%}", "no room")]),
                test_text(a.tests.get("early")),
                test_text(a.tests.get("final")),
                format_samples(a.cell.to_level),
                test_text(a.tests.get("level")),
                "" if a.to_peer is None else format_samples(a.to_peer),
                median_range(a.cell.ms_per_sample, "{:.1f}"),
            )
        )
    head = (
        "agent",
        "kind",
        "runs",
        f"final at {result.early}",
        f"final at {result.budget}",
        "share of reference",
        "room taken",
        *([] if prior is None else ["room taken over the prior"]),
        f"against best at {result.early} (p, higher)",
        f"against best at {result.budget} (p, higher)",
        f"samples to {result.level:.0%}",
        "against best (p, first)",
        "samples to best peer's final",
        "ms per paid map",
    )
    return markdown_table(head, rows)


def plot_problem(result: AgentsResult, path: Path) -> Path:
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


def problem_markdown(result: AgentsResult, figure: str) -> list[str]:
    return cells.problem_block(result, table_markdown(result), figure)


def missing_notes(cfg: DictConfig, results: Sequence[AgentsResult]) -> list[str]:
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
