"""Model-based optimisation: does ``agent=mbo`` save board runs over the plain agents?

The plan (``configs/study/mbo.yaml``) has the peers study's shape (:mod:`studies.agent_runs`):
problems and agents as egrl-train overrides, every agent on every problem for ``seeds``
seeds at one ``budget``, in ``OUT/<problem>/<agent>/seed<S>``, read at ``early`` paid
measurements too. Its agents are the plain ones (``plain``: EA, SA, GA, EGRL and EA with
today's model search), ``mbo`` and its ablations (without ``check``, one searcher at a
time) and, under ``pretrained``, mbo fitted on earlier runs of the chip's other workloads:
the runs of ``from`` with the same seed on ``problems``, which run in a first stage and
are passed as ``screen.init_from``.

Each run is read against the problem's reference (:func:`studies.cells.reference_of`).
The section gives: the paid measurements to ``level`` of the reference, as a multiple of
the ``baseline`` agent's (plain EA); the finals at the budget against the best plain
agent; mbo's best at ``early`` against the baseline's final; the compiler's checks and the
model side's time per paid map; each target of the study, met or not, from these numbers;
and per problem the peers study's table of every agent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.rundir import RunDir
from egrl.runs import Run
from studies import agent_runs, cells
from studies.agent_runs import AgentsResult
from studies.cells import test_text
from studies.prior_map import PRIOR_HEAD, any_prior, prior_cells
from studies.render import left_out, markdown_table, reproduce
from studies.runner import CommandSpec, Page, RunSpec, StudyError, hydra_quote, script_label
from studies.stats import compare, format_mean_std, format_samples, median_range

SECTION = "mbo"
#: significance level of the targets
ALPHA = 0.05
#: the targets: mbo's median samples at most a third of the baseline's on at least
#: ``SAMPLE_PROBLEMS`` chip problems, at most half wherever the baseline gets there
THIRD, HALF, SAMPLE_PROBLEMS = 1 / 3, 0.5, 3
#: at ``early``, mbo's final at least the baseline's final at the budget on this many problems
EARLY_PROBLEMS = 5
#: the model side's seconds per paid map on ResNet-101, and the share of refused paid maps
MODEL_SIDE_S, REFUSED_SHARE = 1.0, 0.05
#: pre-trained: at most this share of the baseline's samples; the moonshot's board runs
PRETRAINED_SHARE, MOONSHOT_RUNS = 0.1, 10
#: the paid measurements at which the model's rank quality is read
RANK_AT = (40, 60, 100, 200, 400)


# ------------------------------------------------------------------ plan
def check(cfg: DictConfig) -> None:
    """The peers study's checks, and: ``baseline``, ``mbo`` and every ``plain`` and
    ``pretrained`` agent are agents of the plan."""
    agent_runs.check(cfg)
    named = [cfg.baseline, cfg.mbo, *cfg.plain, *(cfg.get("pretrained") or {})]
    for name in named:
        if name not in cfg.agents:
            raise StudyError(f"{cfg.study}: agent {name!r} is not among the plan's agents")
    for name, source in (cfg.get("pretrained") or {}).items():
        if source["from"] not in cfg.agent_overrides:
            raise StudyError(f"{cfg.study}: {name} learns from {source['from']!r}, no agent")
        for problem in source.problems:
            if problem not in cfg.problem_overrides:
                raise StudyError(f"{cfg.study}: problem {problem!r} has no overrides")


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """Stage 1: the priors read (:func:`studies.cells.prior_steps`), every problem x agent
    x seed but the pre-trained agents, and the runs they learn from; stage 2: the
    pre-trained agents (``screen.init_from`` those runs)."""
    check(cfg)
    later = cfg.get("pretrained") or {}
    first: dict[str, RunSpec] = {}
    second: list[RunSpec] = []
    for problem in cfg.problems:
        for agent in agent_runs.agents_of(cfg, problem):
            for seed in range(int(cfg.seeds)):
                if agent not in later:
                    s = agent_runs.spec(cfg, problem, agent, seed)
                    first.setdefault(s.path, s)
                    continue
                source = later[agent]
                groups = [agent_runs.group(p, source["from"]) for p in source.problems]
                for p in source.problems:
                    s = agent_runs.spec(cfg, p, source["from"], seed)
                    first.setdefault(s.path, s)
                paths = [str(out / f"{g}/seed{seed}") for g in groups]
                init = f"screen.init_from=[{','.join(hydra_quote(p) for p in paths)}]"
                run = agent_runs.spec(cfg, problem, agent, seed)
                second.append(
                    RunSpec(run.group, seed, (*run.overrides, init), f"{groups[-1]}/seed{seed}")
                )
    yield [*cells.prior_steps(cfg, out), *first.values()]
    if second:
        yield second


def analyse(cfg: DictConfig, out: Path) -> list[AgentsResult]:
    """Every problem's agents (:func:`studies.agent_runs.analyse`; no peers)."""
    return agent_runs.analyse(cfg, out)


# ------------------------------------------------------------------ figures
def found(result: AgentsResult, name: str):
    """The agent ``name`` of ``result`` (None: it did not run there)."""
    return next((a for a in result.agents if a.agent == name), None)


def sample_ratio(agent, base) -> tuple[float, float, str]:
    """``agent``'s median samples to the level over ``base``'s (inf: ``agent`` never got
    there in most runs; NaN: ``base`` did not), the Mann-Whitney p of the samples (never
    ranked last), and the text of both."""
    mine, theirs = np.median(agent.cell.to_level), np.median(base.cell.to_level)
    _, p, first = compare(agent.cell.to_level, base.cell.to_level)
    if not np.isfinite(theirs):
        reached = int(np.isfinite(agent.cell.to_level).sum())
        return np.nan, p, f"{reached}/{len(agent.cell.runs)} reached (p = {p:.3f})"
    ratio = mine / theirs
    text = "never" if not np.isfinite(ratio) else f"{ratio:.2f}x"
    return ratio, p, f"{text} (p = {p:.3f}, {first:.0%} first)"


def best_plain(cfg: DictConfig, result: AgentsResult):
    """The plain agent with the highest mean final."""
    return agent_runs.strongest([a for a in result.agents if a.agent in cfg.plain])


def samples_markdown(cfg: DictConfig, results: Sequence[AgentsResult]) -> str:
    """Per problem: the baseline's samples to the level, and each other agent's as a
    multiple of it (Mann-Whitney p; the share of pairs where that agent got there first)."""
    others = [a for a in cfg.agents if a != cfg.baseline]
    rows = []
    for r in results:
        base = found(r, cfg.baseline)
        if base is None:
            continue
        row = [r.problem, format_samples(base.cell.to_level)]
        for name in others:
            agent = found(r, name)
            row.append("" if agent is None else sample_ratio(agent, base)[2])
        rows.append(row)
    return markdown_table(("problem", cfg.baseline, *others), rows)


def finals_markdown(cfg: DictConfig, results: Sequence[AgentsResult]) -> str:
    """Per problem: the prior's map where it was read, the best plain agent's final, mbo's
    and its ablations', with p."""
    mbos = [a for a in cfg.agents if a not in cfg.plain]
    priors = any_prior(results)
    rows = []
    for r in results:
        best = best_plain(cfg, r)
        if best is None:
            continue
        row = [
            r.problem,
            *(prior_cells(r) if priors else []),
            f"{best.agent} {format_mean_std(best.cell.final)}",
        ]
        for name in mbos:
            a = found(r, name)
            row.append(
                ""
                if a is None
                else f"{format_mean_std(a.cell.final)} "
                f"({test_text(agent_runs.higher(a.cell.final, best.cell.final))})"
            )
        rows.append(row)
    head = (
        "problem",
        *(PRIOR_HEAD if priors else ()),
        f"best plain at {results[0].budget}",
        *mbos,
    )
    return markdown_table(head, rows)


def early_markdown(cfg: DictConfig, results: Sequence[AgentsResult]) -> str:
    """Per problem: mbo at ``early`` against the baseline's final at the budget."""
    rows = []
    for r in results:
        mbo, base = found(r, cfg.mbo), found(r, cfg.baseline)
        if mbo is None or base is None:
            continue
        _, p, higher = agent_runs.higher(mbo.early, base.cell.final)
        rows.append(
            (
                r.problem,
                format_mean_std(base.cell.final),
                format_mean_std(mbo.early),
                f"p = {p:.3f}, {higher:.0%} higher",
            )
        )
    head = (
        "problem",
        f"{cfg.baseline} at {results[0].budget}",
        f"{cfg.mbo} at {results[0].early}",
        "mbo against it",
    )
    return markdown_table(head, rows)


def per_paid(agent, column: str, scale: float = 1.0) -> np.ndarray:
    """float ``[S]``: each run's last ``column`` over its paid measurements, times ``scale``."""
    return np.array(
        [
            scale * float(run.last_row.get(column) or "nan") / max(int(run.iterations[-1]), 1)
            for run in agent.cell.runs
        ]
    )


def refused_share(run: Run) -> float:
    """The share of a run's answered maps the compiler refused (its ``metrics.csv``: each
    generation's ``batch_valid_fraction`` weighed by the maps it answered)."""
    rows = RunDir(run.path).read_metrics_rows()
    answered = np.diff([0, *(int(r["proposals"]) for r in rows)])
    valid = np.array([float(r["batch_valid_fraction"] or "nan") for r in rows])
    seen = np.isfinite(valid) & (answered > 0)
    return float(((1 - valid[seen]) * answered[seen]).sum() / max(answered[seen].sum(), 1))


def cost_markdown(cfg: DictConfig, results: Sequence[AgentsResult]) -> str:
    """Per problem and mbo agent, per paid map: the compiler's checks and their time, the
    searchers' own time, the model's (fits, scores, picks) and the run's; and the share
    of paid maps the compiler refused."""
    rows = []
    for r in results:
        for a in r.agents:
            if a.agent in cfg.plain:
                continue
            refused = np.array([refused_share(run) for run in a.cell.runs])
            rows.append(
                (
                    r.problem,
                    a.agent,
                    median_range(per_paid(a, "checks"), "{:.0f}"),
                    median_range(per_paid(a, "t_check", 1000), "{:.0f}"),
                    median_range(per_paid(a, "t_evolution", 1000), "{:.0f}"),
                    median_range(per_paid(a, "t_screening", 1000), "{:.0f}"),
                    median_range(a.cell.ms_per_sample, "{:.0f}"),
                    median_range(refused, "{:.1%}"),
                )
            )
    head = (
        "problem",
        "agent",
        "checks per paid map",
        "check ms per paid map",
        "search ms per paid map (the searchers' moves)",
        "model ms per paid map (fit, scores, pick)",
        "run ms per paid map",
        "paid maps refused",
    )
    return markdown_table(head, rows)


def spearman_at(run: Run, paid: int) -> float:
    """The model's rank correlation on the round that brought ``run`` to ``paid`` paid
    maps (its ``metrics.csv``'s ``screen_spearman``; NaN: none by then)."""
    for row in RunDir(run.path).read_metrics_rows():
        if int(row["iterations"]) >= paid:
            value = row.get("screen_spearman")
            return float(value) if value not in (None, "") else np.nan
    return np.nan


def rank_markdown(cfg: DictConfig, results: Sequence[AgentsResult]) -> str:
    """Per problem and screened agent: the model's Spearman on each round's paid maps at
    :data:`RANK_AT` paid maps, median [min-max] over seeds."""
    rows = []
    for r in results:
        for a in r.agents:
            if not np.isfinite(a.cell.spearman).any():
                continue
            at = [np.array([spearman_at(run, k) for run in a.cell.runs]) for k in RANK_AT]
            rows.append(
                (r.problem, a.agent, *(median_range(v[np.isfinite(v)], "{:.2f}") for v in at))
            )
    return markdown_table(("problem", "agent", *(f"at {k}" for k in RANK_AT)), rows)


def model_side_s(agent) -> np.ndarray:
    """float ``[S]``: each run's model side (fits, scores, picks and the searchers' moves)
    in seconds per paid map."""
    return per_paid(agent, "t_screening") + per_paid(agent, "t_evolution")


# ------------------------------------------------------------------ targets
def target_lines(cfg: DictConfig, results: Sequence[AgentsResult]) -> list[str]:
    """Whether each target is met, from the numbers, with the problems that decide it."""
    chips = [r for r in results if r.problem.startswith("chip-")]
    third, half_misses = [], []
    for r in results:
        mbo, base = found(r, cfg.mbo), found(r, cfg.baseline)
        if mbo is None or base is None:
            continue
        ratio, p, _ = sample_ratio(mbo, base)
        if r in chips and ratio <= THIRD and p < ALPHA:
            third.append(r.problem)
        if np.isfinite(np.median(base.cell.to_level)) and not ratio <= HALF:
            half_misses.append(r.problem)
    lower = []
    for r in results:
        mbo, best = found(r, cfg.mbo), best_plain(cfg, r)
        if mbo is None or best is None:
            continue
        _, p, _ = agent_runs.higher(mbo.cell.final, best.cell.final)
        if mbo.mean_final < best.mean_final and p < ALPHA:
            lower.append(f"{r.problem} ({best.agent})")
    early = []
    for r in results:
        mbo, base = found(r, cfg.mbo), found(r, cfg.baseline)
        if mbo is not None and base is not None and np.mean(mbo.early) >= base.mean_final:
            early.append(r.problem)
    slow = [
        f"{r.problem} ({np.median(model_side_s(m)):.2f} s)"
        for r in results
        if "resnet101" in r.problem
        and (m := found(r, cfg.mbo)) is not None
        and np.median(model_side_s(m)) > MODEL_SIDE_S
    ]
    refused = [
        f"{r.problem} ({share:.1%})"
        for r in results
        if (m := found(r, cfg.mbo)) is not None
        and (share := float(np.median([refused_share(run) for run in m.cell.runs]))) > REFUSED_SHARE
    ]
    met = "**met**" if len(third) >= SAMPLE_PROBLEMS else "**not met**"
    if not chips:
        met = "**not assessed**, no chip problem"
    return [
        f"- mbo's median samples to {results[0].level:.0%} at most a third of "
        f"{cfg.baseline}'s, p < {ALPHA}, on at least {SAMPLE_PROBLEMS} of the "
        f"{len(chips)} chip problems: {met} ({len(third)}: {', '.join(third) or 'none'}).",
        "- at most half wherever the baseline gets there: "
        + ("**met**." if not half_misses else f"**not met** on {', '.join(half_misses)}."),
        f"- mbo's final at {results[0].budget} never below the best plain agent's with "
        f"p < {ALPHA}: " + ("**met**." if not lower else f"**not met** on {', '.join(lower)}."),
        f"- mbo's mean best at {results[0].early} at least {cfg.baseline}'s mean final at "
        f"{results[0].budget} on at least {EARLY_PROBLEMS} problems: "
        + ("**met**" if len(early) >= EARLY_PROBLEMS else "**not met**")
        + f" ({len(early)} of {len(results)}: {', '.join(early) or 'none'}).",
        f"- the model side (fits, scores, picks, the searchers' moves) at most {MODEL_SIDE_S:.0f} s "
        "per paid map on ResNet-101 (median over seeds): "
        + ("**met**." if not slow else f"**not met** on {', '.join(slow)}."),
        f"- at most {REFUSED_SHARE:.0%} of mbo's paid maps refused by the compiler (median over "
        "seeds): " + ("**met**." if not refused else f"**not met** on {', '.join(refused)}."),
        *pretrained_lines(cfg, results),
    ]


def pretrained_lines(cfg: DictConfig, results: Sequence[AgentsResult]) -> list[str]:
    """The pre-trained agents' targets: at most a tenth of the baseline's samples on one of
    their problems, and the moonshot (the level within :data:`MOONSHOT_RUNS` board runs)."""
    lines = []
    for name in cfg.get("pretrained") or {}:
        ratios, moonshots, met = [], [], False
        for r in results:
            agent, base = found(r, name), found(r, cfg.baseline)
            if agent is None or base is None:
                continue
            ratio, p, text = sample_ratio(agent, base)
            here = ratio <= PRETRAINED_SHARE or (np.isnan(ratio) and p < ALPHA)
            met = met or here
            ratios.append(f"{r.problem} {text}" + (" (met)" if here else ""))
            reached = int((agent.cell.to_level <= MOONSHOT_RUNS).sum())
            moonshots.append(f"{r.problem} {reached}/{len(agent.cell.runs)}")
        if not ratios:
            lines.append(f"- {name}: **not run**.")
            continue
        lines += [
            f"- {name}: at most {PRETRAINED_SHARE:.0%} of {cfg.baseline}'s samples on one of its "
            "problems: " + ("**met**" if met else "**not met**") + f" ({'; '.join(ratios)}).",
            f"- the moonshot, {results[0].level:.0%} of the reference within {MOONSHOT_RUNS} "
            f"board runs ({name}): runs that did: {'; '.join(moonshots)}.",
        ]
    return lines


# ------------------------------------------------------------------ report
def intro(cfg: DictConfig, machine: str) -> str:
    agents = ", ".join(f"`{a}`: {' '.join(cfg.agent_overrides[a])}" for a in cfg.agents)
    pretrained = "; ".join(
        f"`{name}` is fitted on the same seed's `{s['from']}` runs on {', '.join(s.problems)}"
        for name, s in (cfg.get("pretrained") or {}).items()
    )
    return (
        f"Each agent at the same paid measurements, {cfg.seeds} seeds per agent"
        + (f", on {machine}" if machine else "")
        + f"; each run pays {cfg.budget} board runs and is read at {cfg.early} and at "
        f"{cfg.budget}. The agents: {agents}"
        + (f"; {pretrained}" if pretrained else "")
        + ". Samples to a level, tests and references read as in the peers section. "
        f"The chip: `{script_label(cfg.chip)}` (docs/external.md), no optimum"
        + cells.problem_chips_text(cfg)
        + "."
    )


def render(cfg: DictConfig, result: list[AgentsResult], page: Page) -> str:
    """The ``mbo`` section; one figure per problem, ``mbo_<problem>.png``."""
    lines = ["## Model-based optimisation: every searcher on the model, the compiler's maps", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        level = f"{result[0].level:.0%}"
        lines += ["The targets, from the numbers below:", "", *target_lines(cfg, result), ""]
        lines += [
            f"Median paid measurements to {level} of the reference: {cfg.baseline}'s, and "
            "every other agent's as a multiple of it (Mann-Whitney p, the share of pairs it "
            "got there first; where the baseline never got there, how many runs did):",
            "",
            samples_markdown(cfg, result),
            "",
            f"Finals at {result[0].budget}: the best plain agent's, and each mbo agent's "
            "against it (p, the share of pairs mbo ended higher):",
            "",
            finals_markdown(cfg, result),
            "",
            f"mbo after {result[0].early} board runs against {cfg.baseline} after "
            f"{result[0].budget}:",
            "",
            early_markdown(cfg, result),
            "",
            "The model's rank quality: Spearman of its predictions against the board's "
            "readings on each round's paid maps, at so many paid maps (median [min-max] over "
            "seeds):",
            "",
            rank_markdown(cfg, result),
            "",
            "What the model side costs (median [min-max] over seeds):",
            "",
            cost_markdown(cfg, result),
            "",
        ]
    lines += left_out(agent_runs.missing_notes(cfg, result))
    for r in result:
        png = agent_runs.plot_problem(r, page.figure(f"mbo_{r.problem}.png"))
        lines += agent_runs.problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
