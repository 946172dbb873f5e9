"""LLM inference: how much room does the native compiler leave on a prefill and a decode
step, and how much of it do the agents take?

The plan (``configs/study/llm.yaml``) has the peers study's shape (:mod:`studies.agent_runs`):
problems (a zoo LLM entry on a hardware model) and agents as egrl-train overrides, every
agent on every problem for ``seeds`` seeds at one ``budget``. Before the runs, the decode
steps of the cache-length sweep that are not in the zoo are built (``builds``:
``scripts/build_zoo.py ENTRY --cached N`` into ``OUT/workloads``).

The section gives, per problem, the workload's bytes (weights and cache), the native
compiler's latency, the reference (the CP-SAT optimum with its bound where the target has
a solver, else the best known) and the room it leaves over the compiler, and how much of
that room each agent took; then the sweep (``sweep``: problem -> cached tokens): how the
room changes as the cache grows; and per problem the peers study's table of every agent.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

import workloads
from egrl.aggregate.optimum import CACHE_FILE, hw_params
from egrl.rundir import RunDir
from egrl.runs import Run
from hwmodels.nnpi.params import NNPIParams
from studies import agent_runs
from studies.agent_runs import AgentsResult
from studies.prior_map import PRIOR_HEAD, any_prior, prior_cells
from studies.render import left_out, markdown_table, reproduce
from studies.runner import ROOT, CommandSpec, Page, RunSpec, StudyError, script_label
from studies.stats import format_mean_std, room_taken

SECTION = "llm"
MIB = 2**20


# ------------------------------------------------------------------ plan
def check(cfg: DictConfig) -> None:
    """The peers study's checks, and: every sweep problem is a problem of the plan."""
    agent_runs.check(cfg)
    for problem in cfg.get("sweep") or {}:
        if problem not in cfg.problem_overrides:
            raise StudyError(f"{cfg.study}: sweep problem {problem!r} has no overrides")


def builds(cfg: DictConfig, out: Path) -> list[CommandSpec]:
    """The decode steps a problem of the plan reads from ``OUT/workloads`` (``builds``)."""
    wanted = " ".join(o for p in cfg.problems for o in cfg.problem_overrides[p])
    specs = []
    for name, build in (cfg.get("builds") or {}).items():
        if f"/workloads/{name}.json.gz" not in wanted:
            continue
        argv = (
            sys.executable,
            str(ROOT / "scripts" / "build_zoo.py"),
            str(build.entry),
            "--cached",
            str(int(build.cached)),
            "--out",
            str(out / "workloads"),
        )
        specs.append(CommandSpec("workloads", argv, f"workloads/{name}.json.gz"))
    return specs


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """One stage: the sweep's decode steps built, then every problem x agent x seed."""
    check(cfg)
    yield [*builds(cfg, out), *next(agent_runs.plan(cfg, out))]


# ------------------------------------------------------------------ analysis
def analyse(cfg: DictConfig, out: Path) -> list[AgentsResult]:
    """Every problem's agents (:func:`studies.agent_runs.analyse`; no peers)."""
    return agent_runs.analyse(cfg, out)


def optimum_of(out: Path, problem: str) -> dict | None:
    """The problem's solver answer (the best of its ``optimum.json``), or None."""
    path = out / problem / CACHE_FILE
    if not path.exists():
        return None
    answers = list(json.loads(path.read_text(encoding="utf-8")).values())
    return max(answers, key=lambda a: a["speedup"]) if answers else None


def bound_text(answer: dict | None) -> str:
    """The solver's optimum as a speedup over the compiler, with the bound when unproven
    (none when the solver had no map of its own in its time: the compiler's is its answer)."""
    if answer is None:
        return "no solver"
    speedup, gap = float(answer["speedup"]), float(answer.get("gap", np.nan))
    if answer.get("proven") or gap == 0:
        return f"{speedup:.4f}x (proven)"
    if not np.isfinite(gap) or gap >= 1:
        return f"{speedup:.4f}x, no bound in {float(answer.get('time_limit_s', np.nan)):.0f} s"
    return f"{speedup:.4f}x, at most {speedup / (1 - gap):.4f}x"


def room_text(reference: float) -> str:
    """The room over the compiler: the reference's speedup less 1, none below it."""
    return f"{100 * max(reference - 1, 0):.2f}%"


@dataclass(frozen=True)
class Facts:
    """What a problem's rows read besides its runs' finals, found once per problem.

    Attributes:
        units: the workload's units.
        weight_bytes, cache_bytes: its weights' and its cached keys' and values' bytes.
        activation_bytes, largest_activation: its activations' bytes, all and the largest.
        compiler_ms: the native compiler's latency (a run's ``best_mapping.json``).
        solver: the solver's answer (:func:`bound_text`).
        on_chip_bytes: what the target's levels above DRAM hold (NNP-I: LLC and SRAM;
            0 where the study cannot read it: an external chip).
        on_chip_share: ``on_chip_bytes`` over the bytes the step moves (weights, cache and
            activations), at most 1 (0 where ``on_chip_bytes`` is).
    """

    units: int
    weight_bytes: int
    cache_bytes: int
    activation_bytes: int
    largest_activation: int
    compiler_ms: float
    solver: str
    on_chip_bytes: int = 0
    on_chip_share: float = 0.0


def nnpi_params(run: Run) -> NNPIParams | None:
    """An NNP-I run's chip parameters (None for other targets)."""
    return NNPIParams(**hw_params(run)) if run.hwmodel == "nnpi" else None


def facts_of(result: AgentsResult, out: Path) -> Facts:
    """The :class:`Facts` of ``result``'s problem, from its first run and its solver cache."""
    run = result.agents[0].cell.runs[0]
    w = workloads.load(run.workload)
    best = RunDir(run.path).read_best_map()
    params = nnpi_params(run)
    return Facts(
        w.num_nodes,
        w.total_weight_bytes - w.cache_bytes,
        w.cache_bytes,
        w.activation_bytes,
        int(w.output_bytes.max(initial=0)),
        1e3 * float(best["baseline_latency_s"]),
        bound_text(optimum_of(out, result.problem)),
        params.on_chip_bytes if params else 0,
        params.on_chip_share(w.moved_bytes) if params else 0.0,
    )


def best_text(result: AgentsResult) -> str:
    """The problem's best agent and its finals' mean and spread."""
    best = result.agent(result.best)
    return f"{best.agent} {format_mean_std(best.cell.final)}"


def room_markdown(results: Sequence[AgentsResult], facts: dict[str, Facts]) -> str:
    """Per problem: bytes, the compiler, the reference and its room (over the prior's map
    too, where it was read), each agent's share."""
    priors = any_prior(results)
    rows = []
    for r in results:
        f = facts[r.problem]
        taken = [
            format_mean_std(room_taken(a.cell.final, r.reference), "{:.0%}", "no room")
            for a in r.agents
        ]
        rows.append(
            (
                r.problem,
                f.units,
                f"{f.weight_bytes / MIB:.0f} + {f.cache_bytes / MIB:.0f}",
                f"{f.compiler_ms:.3f}",
                f.solver,
                f"{r.reference:.4f}x ({r.source})",
                room_text(r.reference),
                *(prior_cells(r) if priors else []),
                best_text(r),
                "; ".join(f"{a.agent} {t}" for a, t in zip(r.agents, taken)),
            )
        )
    head = (
        "problem",
        "units",
        "weights + cache MiB",
        "compiler ms",
        "solver",
        "reference",
        "room over the compiler",
        *(PRIOR_HEAD if priors else ()),
        f"best agent at {results[0].budget}",
        "room taken",
    )
    return markdown_table(head, rows)


def sweep_markdown(
    cfg: DictConfig, results: Sequence[AgentsResult], facts: dict[str, Facts]
) -> str:
    """The sweep's problems by cache length: bytes, compiler, reference, room, best agent."""
    by_problem = {r.problem: r for r in results}
    rows = []
    for problem, tokens in sorted((cfg.get("sweep") or {}).items(), key=lambda kv: kv[1]):
        r = by_problem.get(problem)
        if r is None:
            continue
        f = facts[problem]
        rows.append(
            (
                f"{int(tokens):,}",
                f"{f.cache_bytes / MIB:.0f}",
                f"{f.activation_bytes / MIB:.0f} ({f.largest_activation / MIB:.1f})",
                f"{f.on_chip_share:.1%}",
                f"{f.compiler_ms:.3f}",
                f.solver,
                room_text(r.reference),
                best_text(r),
            )
        )
    head = (
        "cached tokens",
        "cache MiB",
        "activations MiB (largest)",
        "on-chip share of the bytes",
        "compiler ms",
        "solver",
        "room over the compiler",
        "best agent",
    )
    return markdown_table(head, rows)


def on_chip_text(cfg: DictConfig, facts: dict[str, Facts]) -> str:
    """What bounds a decode step's room: the on-chip share of its bytes, over the sweep."""
    shares = [
        (int(tokens), facts[p])
        for p, tokens in sorted(cfg.sweep.items(), key=lambda kv: kv[1])
        if p in facts and facts[p].on_chip_bytes
    ]
    if not shares:
        return ""
    (t0, f0), (t1, f1) = shares[0], shares[-1]
    at_t1 = t1 != t0
    return (
        "A decode step reads each weight and each cached key and value once, and streams "
        "activations that grow with the cache (the largest: "
        f"{f0.largest_activation / MIB:.1f} MiB at {t0:,} cached tokens"
        + (f", {f1.largest_activation / MIB:.1f} MiB at {t1:,}" if at_t1 else "")
        + "). The map decides which of those bytes the on-chip levels hold, "
        f"{f0.on_chip_bytes / MIB:.0f} MiB at a time (a weight or the cache for the whole "
        "step, an activation while it is live): "
        f"{f0.on_chip_share:.1%} of the bytes the step moves at {t0:,} tokens"
        + (f" and {f1.on_chip_share:.1%} at {t1:,}" if at_t1 else "")
        + '. docs/nnpi.md, "Decode steps", says which physical effects the model leaves out.'
    )


# ------------------------------------------------------------------ the section
def intro(cfg: DictConfig, machine: str) -> str:
    agents = ", ".join(f"`{a}`: {' '.join(cfg.agent_overrides[a])}" for a in cfg.agents)
    return (
        f"Each agent at the same paid measurements, {cfg.seeds} seeds per agent"
        + (f", on {machine}" if machine else "")
        + f"; each run pays {cfg.budget} maps and is read at {cfg.early} and at "
        f"{cfg.budget}. The agents: {agents}. The workloads: the zoo's Llama 3.2 1B and "
        "Qwen2.5 0.5B (docs/workloads.md), a prefill of 512 tokens and a decode step of one "
        "token with 4,096 cached, at int8; the decode step's cached keys and values are "
        "placed by the map beside the weights. The solver is CP-SAT on NNP-I's cost model "
        f"({cfg.optimum_time_s} s); `room over the compiler` is the reference's speedup "
        "less 1, `room taken` each agent's share of it. The chip: "
        f"`{script_label(cfg.chip)}` (docs/external.md), no solver."
    )


def render(cfg: DictConfig, result: list[AgentsResult], page: Page) -> str:
    """The ``llm`` section; one figure per problem, ``llm_<problem>.png``."""
    out = Path(cfg.out)
    lines = ["## LLM inference: prefill, decode and the KV cache in the map", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        facts = {r.problem: facts_of(r, out) for r in result}
        lines += [
            "The room each problem leaves and what the agents took of it:",
            "",
            room_markdown(result, facts),
            "",
        ]
        sweep = sweep_markdown(cfg, result, facts)
        if sweep.count("\n") > 1:
            lines += ["The decode step as its cache grows (NNP-I):", "", sweep, ""]
            lines += [on_chip_text(cfg, facts), ""]
    lines += left_out(agent_runs.missing_notes(cfg, result))
    for r in result:
        png = agent_runs.plot_problem(r, page.figure(f"llm_{r.problem}.png"))
        lines += agent_runs.problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
