"""The NNP-I comparison: the head of the results page (the paper's Figure 3 and claims).

Every agent of the plan (``configs/study/compare.yaml``) runs on every workload for
``seeds`` seeds at one ``budget`` on the NNP-I cost model, in ``OUT/<workload>/<agent>/
seed<S>``. Finished sweeps of the old layout (``egrl-train -m experiment=compare
hydra.sweep.dir=ROOT``: Hydra's ``override_dirname`` directories under ROOT, e.g.
``multirun/results/paper-egrl``) are listed under ``from:``; they are read as well, and a
(workload, agent, seed) finished there at the plan's budget is not run again.

A second stage is the zero-shot transfer of the paper's Figure 4: ``egrl-transfer RUN
--targets ...`` (a :class:`~studies.runner.CommandSpec`, done once ``RUN/transfer/
transfer.csv`` exists) on every finished EGRL run: every policy snapshot, its greedy map and
``samples`` sampled maps, on the plan's other workloads. It is not made of ``agent=zero-shot``
runs: one such run per snapshot, policy and target (``budget=1+samples agent.batch=samples
agent.max_draw_factor=1 seed=0``) measures the same maps, but that is about 1,100
egrl-train launches at the paper's scale against 15 ``egrl-transfer`` commands, and the
best of the sampled maps alone is in such a run's records only per map
(``record_evaluations=true``) or as its second generation's best reward.

The analysis aggregates every run (:func:`egrl.aggregate.aggregate`: final speedups by
workload and agent, the optimum of each workload, cached in ``<first root>/aggregate``),
reads how each sweep was launched (``multirun.yaml``) and the transfer outputs, and
checks the paper's claims (section 5) on the numbers. :data:`SECTION` is None: the study
writes the page's unmarked head, and the runner keeps every marked section after it.
"""

from __future__ import annotations

import csv
import logging
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from egrl.aggregate import Aggregate, aggregate
from egrl.aggregate.aggregate import draw_figures
from egrl.aggregate.launch import MULTIRUN_FILE, SweepRecord, sweep_record
from egrl.aggregate.summary import PAPER_AGENTS, PAPER_WORKLOADS, GroupStats
from egrl.aggregate.tables import final_table, mean_std, optimum_table, pivot_table, problems_list
from egrl.rundir import TRANSFER_CSV, RunDir
from studies import runner
from studies.render import markdown_table
from studies.runner import CommandSpec, Page, RunSpec, read_runs

log = logging.getLogger(__name__)

SECTION = None
#: the paper's final speedups on the NNP-I chip (Khadka et al., arXiv:2007.07298, 2020,
#: section 5 and Figure 3)
PAPER_SPEEDUPS = {
    "resnet50": {"egrl": 1.28, "ea": 1.06, "greedy-dp": 0.72, "pg": 0.29},
    "resnet101": {"egrl": 1.78, "ea": 1.47, "greedy-dp": 1.27, "pg": 0.23},
    "bert-base": {"egrl": 1.66, "ea": 1.64, "greedy-dp": 0.67, "pg": 0.21},
}
PAPER_BUDGET = 4000
PAPER_SEEDS = 5
#: the paper's claimed order of final speedups, best first
PAPER_ORDER = PAPER_AGENTS
NAMES = {"egrl": "EGRL", "ea": "EA", "greedy-dp": "Greedy-DP", "pg": "PG"}
#: the plan of the paper-scale study, named under "Reproduce"
PAPER_PLAN = "compare"

HOLDS = "holds"
FAILS = "does not hold"
PARTIAL = "holds where measured"
SOME = "holds for some pairs"
UNMEASURED = "not measured"


# ------------------------------------------------------------------ plan
def group(workload: str, agent: str) -> str:
    """A cell's directory under the study's output: ``<workload>/<agent>``."""
    return f"{workload}/{agent}"


def from_roots(cfg: DictConfig) -> list[Path]:
    """The plan's existing sweeps (``from:``) that are there; the others are skipped."""
    roots = []
    for root in map(Path, cfg.get("from") or []):
        if root.is_dir():
            roots.append(root)
        else:
            log.info("from: %s is not there; skipped", root)
    return roots


def roots_of(cfg: DictConfig, out: Path) -> list[Path]:
    """Every directory the study's runs are read from: the ``from:`` sweeps, then ``out``."""
    return [*from_roots(cfg), *([out] if out.is_dir() else [])]


#: the hardware model of a plan that names none (``configs/train.yaml``'s default)
DEFAULT_HWMODEL = "nnpi"


def plan_hwmodel(cfg: DictConfig) -> str:
    """The hardware model the plan's runs are made on: the last ``hwmodel=`` (or
    ``hwmodel.name=``) of its ``overrides`` and ``set``, else :data:`DEFAULT_HWMODEL`."""
    name = DEFAULT_HWMODEL
    for item in [*(cfg.get("overrides") or []), *(cfg.get("set") or [])]:
        key, sep, value = str(item).partition("=")
        if sep and key.lstrip("+~") in ("hwmodel", "hwmodel.name"):
            name = value.strip()
    return name


def other_hardware(cfg: DictConfig):
    """What leaves a run of another hardware model out of the study (the comparison is of
    agents on one model: runs of others are never averaged in)."""
    hwmodel = plan_hwmodel(cfg)

    def why(run) -> str | None:
        if run.hwmodel == hwmodel:
            return None
        return f"hwmodel={run.hwmodel}: not the study's hardware model ({hwmodel}); left out"

    return why


def finished_elsewhere(cfg: DictConfig) -> set[tuple[str, str, int]]:
    """``(workload, agent, seed)`` finished at the plan's budget on its hardware model in
    the ``from:`` sweeps."""
    cells = set()
    hwmodel = plan_hwmodel(cfg)
    for root in from_roots(cfg):
        for run in read_runs(root).runs:
            if run.budget == cfg.budget and run.hwmodel == hwmodel:
                cells.add((run.workload, run.agent, run.seed))
    return cells


def comparison(cfg: DictConfig, out: Path) -> list[RunSpec]:
    """Every agent x workload x seed at the plan's budget, less the cells done elsewhere."""
    done = finished_elsewhere(cfg)
    specs = []
    for workload in cfg.workloads:
        for agent in cfg.agents:
            overrides = (f"agent={agent}", f"workload={workload}", f"budget={cfg.budget}")
            for seed in range(cfg.seeds):
                if (workload, agent, seed) not in done:
                    specs.append(RunSpec(group(workload, agent), seed, overrides))
    return specs


def transfer_targets(cfg: DictConfig, workload: str) -> list[str]:
    """The workloads a policy trained on ``workload`` is evaluated on zero-shot."""
    targets = cfg.zero_shot.get("targets") or cfg.workloads
    return [str(w) for w in targets if w != workload]


def transfer_specs(cfg: DictConfig, out: Path) -> list[CommandSpec]:
    """``egrl-transfer RUN --targets ...`` for every finished EGRL run (in ``out`` and the
    ``from:`` sweeps); each is done once ``RUN/transfer/transfer.csv`` exists.

    The outputs (``transfer.csv``: one row per snapshot, policy and target) go to
    ``RUN/transfer/``, where ``--zero-shot`` of the former script put them.
    """
    zs = cfg.zero_shot
    specs = []
    for root in roots_of(cfg, out):
        for run in read_runs(root).runs:
            targets = transfer_targets(cfg, run.workload)
            if run.agent != "egrl" or not targets:
                continue
            argv = (
                sys.executable,
                "-m",
                "egrl.cli.transfer",
                str(run.path),
                "--targets",
                *targets,
                f"--which={zs.which}",
                f"--samples={int(zs.samples)}",
                f"--seed={int(zs.seed)}",
            )
            done = RunDir(run.path.resolve()).transfer_csv
            specs.append(CommandSpec(str(run.path), argv, str(done)))
    return specs


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """The comparison's runs; then (``zero_shot.run``) the transfer of the EGRL runs."""
    yield comparison(cfg, out)
    if cfg.zero_shot.run:
        yield transfer_specs(cfg, out)


# ------------------------------------------------------------------ claims
@dataclass
class Claim:
    """One claim of the paper, its verdict on the measured numbers, and the numbers."""

    statement: str
    verdict: str
    evidence: list[str]


def cells(groups: Sequence[GroupStats]) -> dict[tuple[str, str], GroupStats]:
    """``(workload, agent) -> stats``; groups that differ in another swept key are
    ambiguous for the claims and are left out."""
    out: dict[tuple[str, str], GroupStats] = {}
    seen: dict[tuple[str, str], int] = {}
    for g in groups:
        key = (g.get("workload"), g.get("agent"))
        seen[key] = seen.get(key, 0) + 1
        out[key] = g
    return {k: v for k, v in out.items() if seen[k] == 1}


def _fmt(g: GroupStats) -> str:
    return f"{mean_std(g.mean, g.std)} (n={g.n})"


def _separated(a: GroupStats, b: GroupStats) -> bool:
    """``a``'s mean - std above ``b``'s mean + std (a single seed counts as std 0)."""
    sa = a.std if math.isfinite(a.std) else 0.0
    sb = b.std if math.isfinite(b.std) else 0.0
    return a.mean - sa > b.mean + sb


def _combine(verdicts: Sequence[str], complete: bool) -> str:
    if not verdicts:
        return UNMEASURED
    if FAILS in verdicts:
        return FAILS
    return HOLDS if complete else PARTIAL


def _observed(table: dict[tuple[str, str], GroupStats], w: str, measured: list[str]) -> str:
    """``w: observed A m ± s (n=N) > B ...``, best first, flagging overlapping neighbours."""
    observed = sorted(measured, key=lambda a: -table[w, a].mean)
    line = f"{w}: observed {NAMES[observed[0]]} {_fmt(table[w, observed[0]])}"
    for a, b in zip(observed, observed[1:]):
        first, second = table[w, a], table[w, b]
        sign = "=" if first.mean == second.mean else ">"
        flag = "" if _separated(first, second) else " [within one std]"
        line += f" {sign}{flag} {NAMES[b]} {_fmt(second)}"
    return line


def check_ordering(table: dict[tuple[str, str], GroupStats]) -> Claim:
    """EGRL > EA > Greedy-DP > PG (final mean speedups) on each of the paper's workloads."""
    verdicts, evidence = [], []
    complete = True
    for w in PAPER_WORKLOADS:
        measured = [a for a in PAPER_ORDER if (w, a) in table]
        missing = [NAMES[a] for a in PAPER_ORDER if a not in measured]
        complete &= not missing
        if len(measured) < 2:
            evidence.append(f"{w}: fewer than two of the four agents measured")
            continue
        ok = all(table[w, a].mean > table[w, b].mean for a, b in zip(measured, measured[1:]))
        verdicts.append(HOLDS if ok else FAILS)
        line = _observed(table, w, measured)
        if missing:
            line += f"; not measured: {', '.join(missing)}"
        evidence.append(line)
    return Claim(
        "EGRL > EA > Greedy-DP > PG in final speedup on every workload",
        _combine(verdicts, complete),
        evidence,
    )


def check_beats_compiler(
    table: dict[tuple[str, str], GroupStats], agents: Sequence[str], above: bool, statement: str
) -> Claim:
    """Each of ``agents`` has mean final speedup above 1 (``above``) or below 1 everywhere."""
    verdicts, evidence = [], []
    complete = True
    for a in agents:
        for w in PAPER_WORKLOADS:
            if (w, a) not in table:
                complete = False
                continue
            g = table[w, a]
            ok = g.mean > 1.0 if above else g.mean < 1.0
            verdicts.append(HOLDS if ok else FAILS)
            evidence.append(f"{NAMES.get(a, a)} on {w}: {_fmt(g)}")
    return Claim(statement, _combine(verdicts, complete), evidence)


def check_greedy_bert(table: dict[tuple[str, str], GroupStats]) -> Claim:
    """Greedy-DP below the compiler on BERT and below its own result on each ResNet."""
    statement = (
        "Greedy-DP breaks down on BERT: below the compiler there, and lower than on the ResNets"
    )
    if ("bert-base", "greedy-dp") not in table:
        return Claim(statement, UNMEASURED, ["Greedy-DP was not run on bert-base"])
    bert = table["bert-base", "greedy-dp"]
    evidence = [f"Greedy-DP on bert-base: {_fmt(bert)}"]
    ok = bert.mean < 1.0
    resnets = [w for w in ("resnet50", "resnet101") if (w, "greedy-dp") in table]
    for w in resnets:
        g = table[w, "greedy-dp"]
        evidence.append(f"Greedy-DP on {w}: {_fmt(g)}")
        ok &= bert.mean < g.mean
    verdict = (HOLDS if len(resnets) == 2 else PARTIAL) if ok else FAILS
    return Claim(statement, verdict, evidence)


def _source_workload(csv_path: Path) -> str:
    """The training workload of ``RUN/transfer/transfer.csv`` (from the run's config)."""
    for run_dir in (csv_path.parent.parent, csv_path.parent):
        files = RunDir(run_dir)
        if files.config.exists():
            name = (files.read_config().get("workload") or {}).get("name")
            if name:
                return str(name)
    return "?"


def _float(text: str | None) -> float:
    try:
        return float(text or "nan")
    except ValueError:
        return math.nan


def read_transfer(paths: Sequence[str | Path]) -> list[dict]:
    """Zero-shot rows of ``egrl-transfer`` outputs (``transfer.csv`` files or folders above).

    Only ``role == "holdout"`` rows count (the policy never trained on that target). Each
    row holds ``source`` (the run's training workload, ``?`` if unknown), ``target``,
    ``policy``, ``iterations``, ``greedy`` (the greedy map's speedup), ``sampled`` (the best
    sampled map's speedup, NaN if none) and ``run`` (the file read).
    """
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob(TRANSFER_CSV)) if p.is_dir() else [p])
    rows = []
    for f in files:
        source = _source_workload(f)
        with open(f, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                greedy = _float(row.get("greedy_speedup"))
                if row.get("role") != "holdout" or math.isnan(greedy):
                    continue
                rows.append(
                    {
                        "run": str(f),
                        "source": source,
                        "target": row.get("target", "?"),
                        "policy": row.get("policy", "?"),
                        "iterations": row.get("iterations", "?"),
                        "greedy": greedy,
                        "sampled": _float(row.get("best_sampled_speedup")),
                    }
                )
    return rows


def check_zero_shot(rows: Sequence[dict] | None) -> Claim:
    """Per (training workload, target, policy): the best greedy zero-shot speedup over the
    snapshots (and runs) exceeds 1 (the sampled maps' best is shown, not judged)."""
    statement = "Zero-shot transfer of a trained GNN policy beats the compiler"
    if not rows:
        return Claim(statement, UNMEASURED, ["no egrl-transfer outputs were given"])
    best: dict[tuple[str, str, str], dict] = {}
    sampled: dict[tuple[str, str, str], float] = {}
    runs: dict[tuple[str, str, str], set] = {}
    for r in rows:
        key = (r["source"], r["target"], r["policy"])
        if key not in best or r["greedy"] > best[key]["greedy"]:
            best[key] = r
        if math.isfinite(r["sampled"]):
            sampled[key] = max(sampled.get(key, -math.inf), r["sampled"])
        runs.setdefault(key, set()).add(r.get("run"))
    evidence = [
        f"{s} -> {t} ({p}): best greedy {r['greedy']:.3f} over {len(runs[s, t, p])} run(s) "
        f"(snapshot at {r['iterations']} iterations)"
        + (f", best sampled {sampled[s, t, p]:.3f}" if (s, t, p) in sampled else "")
        for (s, t, p), r in sorted(best.items())
    ]
    wins = sum(r["greedy"] > 1.0 for r in best.values())
    verdict = HOLDS if wins == len(best) else FAILS if wins == 0 else SOME
    evidence.append(f"{wins} of {len(best)} (training workload, target, policy) pairs beat it")
    return Claim(statement, verdict, evidence)


def paper_claims(
    groups: Sequence[GroupStats], transfer_rows: Sequence[dict] | None = None
) -> list[Claim]:
    """Every claim above, in the order of the paper's section 5."""
    table = cells(groups)
    return [
        check_ordering(table),
        check_beats_compiler(
            table, ("egrl", "ea"), True, "EGRL and EA beat the compiler on every workload"
        ),
        check_beats_compiler(table, ("pg",), False, "PG alone stays below the compiler"),
        check_greedy_bert(table),
        check_zero_shot(transfer_rows),
    ]


# ------------------------------------------------------------------ analysis
@dataclass
class Result:
    """What the page is made of.

    Attributes:
        agg: every run aggregated (final speedups by workload and agent, the optimum).
        records: how each sweep was launched (its ``multirun.yaml``).
        transfer: zero-shot rows (:func:`read_transfer`), None when there are none.
        transfer_sources: where they were read from (stated on the page).
    """

    agg: Aggregate
    records: list[SweepRecord]
    transfer: list[dict] | None
    transfer_sources: list[str]


def sweep_records(roots: Sequence[Path]) -> list[SweepRecord]:
    """The launch record of each root: its own ``multirun.yaml``, else every one below it
    (the study's output holds one per group)."""
    records = []
    for root in roots:
        own = sweep_record(root)
        if own is not None:
            records.append(own)
            continue
        for path in sorted(root.rglob(MULTIRUN_FILE)):
            rec = sweep_record(path.parent)
            if rec is not None:
                records.append(rec)
    return records


def transfer_sources(cfg: DictConfig, agg: Aggregate) -> list[str]:
    """The transfer outputs the claim reads: the plan's ``transfer:`` paths that exist, and
    (``zero_shot.run``) the output of every EGRL run not under one of them."""
    given = [Path(p) for p in cfg.get("transfer") or []]
    sources = [str(p) for p in given if p.exists()]
    if cfg.zero_shot.run:
        for run in agg.runs:
            csv_path = RunDir(run.path).transfer_csv
            covered = any(p == csv_path or p in csv_path.parents for p in given if p.exists())
            if run.agent == "egrl" and csv_path.exists() and not covered:
                sources.append(str(csv_path))
    return sources


def analyse(cfg: DictConfig, out: Path) -> Result:
    """Aggregate every run of the plan's hardware model (the optimum solved once and
    cached; runs of other models are left out, named), read the sweeps' records and the
    transfer outputs."""
    roots = roots_of(cfg, out)
    agg = aggregate(
        roots,
        out_dir=(roots[0] if roots else out) / "aggregate",
        optimum_time_s=float(cfg.optimum.time_s),
        optimum_workers=int(cfg.optimum.workers),
        figures=False,
        leave_out=other_hardware(cfg),
    )
    sources = transfer_sources(cfg, agg)
    rows = read_transfer(sources) if sources else None
    return Result(agg, sweep_records(roots), rows, sources)


# ------------------------------------------------------------------ the page
def is_paper_scale(agg: Aggregate) -> bool:
    """The paper's study: its 4 agents x 3 workloads, >= 5 seeds each, budget 4000."""
    by_cell = {(g.get("workload"), g.get("agent")): g for g in agg.groups}
    return agg.budgets == [PAPER_BUDGET] and all(
        (w, a) in by_cell and by_cell[w, a].n >= PAPER_SEEDS
        for w in PAPER_WORKLOADS
        for a in PAPER_ORDER
    )


def banner(agg: Aggregate) -> str:
    """The scale the page was made at, and a warning when it is below the paper's."""
    ns = sorted({g.n for g in agg.groups})
    scale = (
        f"budget {', '.join(map(str, agg.budgets))} iterations per run, "
        f"seeds {', '.join(map(str, agg.seeds))} ({'/'.join(map(str, ns))} finished per cell)"
    )
    if is_paper_scale(agg):
        return f"> Paper-scale study: {scale}."
    return (
        f"> **Not the paper-scale study yet.** This page was made with {scale}, agents "
        f"{', '.join(agg.agents)} on {', '.join(agg.workloads)}. The paper's study is "
        f"{PAPER_SEEDS} seeds x {PAPER_BUDGET} iterations of EGRL, EA, Greedy-DP and PG on "
        f"{', '.join(PAPER_WORKLOADS)}; the command for it is under "
        "[Reproduce](#reproduce)."
    )


def paper_table(workloads: Sequence[str]) -> str:
    """The paper's final speedups on the chip, for the page's workloads (all if none)."""
    shown = [w for w in workloads if w in PAPER_SPEEDUPS] or list(PAPER_SPEEDUPS)
    rows = [[NAMES[a], *(f"{PAPER_SPEEDUPS[w][a]:.2f}" for w in shown)] for a in PAPER_ORDER]
    return markdown_table(["agent", *shown], rows)


def claims_section(claims: Sequence[Claim]) -> str:
    """Each claim's verdict, then its numbers."""
    out = []
    for c in claims:
        out.append(f"- **{c.verdict}**: {c.statement}.")
        out.extend(f"  - {e}" for e in c.evidence)
    return "\n".join(out)


def what_was_run(agg: Aggregate, records: Sequence[SweepRecord], machine: str) -> list[str]:
    """The bullets of "What was run"."""
    n_jobs = sorted({r.n_jobs for r in records if r.n_jobs is not None})
    hw = sorted({r.hwmodel for r in agg.runs})
    parallel = (
        f"runs in parallel: {' or '.join(map(str, n_jobs))} (per sweep), one torch thread "
        "each; wall times include that sharing and any other load on the machine."
        if n_jobs
        else "parallelism not recorded."
    )
    return [
        f"- Hardware model: {', '.join(hw)} (the cost model of `hwmodels/`, not the chip).",
        f"- Agents: {', '.join(agg.agents)}; workloads: {', '.join(agg.workloads)}.",
        f"- Budget: {', '.join(map(str, agg.budgets))} hardware evaluations per run; "
        f"seeds: {', '.join(map(str, agg.seeds))}.",
        f"- Finished runs: {len(agg.runs)}; left out: {len(agg.problems)}"
        + (" (listed at the end)." if agg.problems else "."),
        f"- Machine: {machine}; {parallel}",
    ]


def tables(agg: Aggregate) -> list[str]:
    """The section "Final speedup over the compiler": by agent and workload (speedups and
    wall times), the paper's numbers, the optimum, every cell."""
    return [
        "## Final speedup over the compiler",
        "",
        "Best valid speedup at the end of the budget, mean ± sample standard deviation over "
        "seeds (n = finished seeds). The optimum is the exact (or best found) solution of "
        "the same cost model.",
        "",
        pivot_table(agg.groups, agg.optimum, agg.workloads),
        "",
        "Wall seconds per run (mean over seeds):",
        "",
        pivot_table(agg.groups, agg.optimum, agg.workloads, value="wall"),
        "",
        "For comparison, the paper's final speedups on the NNP-I chip (5 seeds, 4000 "
        "iterations; EGRL paper, section 5). Its compiler and chip are not this cost model, "
        "so only orderings, not values, carry over:",
        "",
        paper_table(agg.workloads),
        "",
        "### Optimum per workload",
        "",
        optimum_table(agg.optimum) if agg.optimum else "not computed",
        "",
        "### Every cell",
        "",
        final_table(agg.groups, agg.optimum),
        "",
    ]


def figures(agg: Aggregate, page: Page) -> list[str]:
    """Figure 3, one panel per workload, drawn into the page's figures and linked."""
    lines = [
        "## Figures",
        "",
        "Best speedup so far against iterations, mean over seeds with a band of one "
        "standard deviation (the paper's Figure 3); compiler at 1.0, optimum dotted.",
        "",
    ]
    drawn = draw_figures(agg, page.figures) if agg.runs else {}
    for w, path in drawn.items():
        lines += [f"![{w}]({Path(page.link(path)).as_posix()})", ""]
    return lines


def reproduce(cfg: DictConfig, records: Sequence[SweepRecord], command: str) -> list[str]:
    """The commands of this page, of the runs behind it and of the paper-scale study."""
    paper = runner.load_plan(PAPER_PLAN)
    lines = ["## Reproduce", "", "This page:", "", "```bash", command, "```", ""]
    if records:
        lines += ["The runs behind it:", "", "```bash", *(r.command for r in records), "```", ""]
    return lines + [
        f"The paper-scale study ({paper.seeds} seeds x {paper.budget} iterations, agents "
        f"{', '.join(paper.agents)} on {', '.join(paper.workloads)}):",
        "",
        "```bash",
        f"python -m studies run {PAPER_PLAN}",
        "```",
        "",
    ]


def render(cfg: DictConfig, result: Result, page: Page) -> str:
    """The page's head: what was run, the tables, Figure 3, the claims, how to redo it."""
    agg = result.agg
    sources = result.transfer_sources
    lines = [
        "# Results: agents against the native compiler",
        "",
        f"<!-- generated by python -m studies report {cfg.study}: do not edit -->",
        "",
        banner(agg),
        "",
        "## What was run",
        "",
        *what_was_run(agg, result.records, page.machine),
        "",
        *tables(agg),
        *figures(agg, page),
        "## The paper's claims on these numbers",
        "",
        "Verdicts are computed from the table above"
        + (f" and the zero-shot outputs in {', '.join(sources)}" if sources else "")
        + '. "[within one std]" marks neighbours whose mean ± std intervals overlap.',
        "",
        claims_section(paper_claims(agg.groups, result.transfer)),
        "",
        *reproduce(cfg, result.records, page.command),
        "## Runs left out",
        "",
        problems_list(agg.problems),
    ]
    return "\n".join(lines) + "\n"
