"""The EGRL paper's claims about its Figure 3 and Figure 4, checked against measured numbers.

Each check reads only the study's final speedups (and, for zero-shot transfer, the
transfer outputs) and returns a :class:`Claim` with a verdict and the numbers behind it:

* ordering: EGRL > EA > Greedy-DP > PG on every workload (means over seeds);
* EGRL and EA beat the compiler (mean > 1) on every workload;
* PG alone stays below the compiler;
* Greedy-DP breaks down on BERT: below the compiler there, and below its own ResNet results;
* zero-shot transfer beats the compiler: a policy trained on one workload, evaluated on
  another without training (its greedy map), reaches a speedup above 1 at some snapshot.

A verdict is ``holds``, ``does not hold``, ``holds where measured`` (some cells missing),
``holds for some pairs`` (zero-shot) or ``not measured``. Neighbours in the observed order whose mean ± std intervals overlap
are flagged "[within one std]": the order is measured but not clearly separated.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from egrl.experiments.summary import PAPER_AGENTS, PAPER_WORKLOADS, GroupStats
from egrl.experiments.tables import mean_std

#: the paper's claimed order of final speedups, best first
PAPER_ORDER = PAPER_AGENTS
NAMES = {"egrl": "EGRL", "ea": "EA", "greedy-dp": "Greedy-DP", "pg": "PG"}

HOLDS = "holds"
FAILS = "does not hold"
PARTIAL = "holds where measured"
SOME = "holds for some pairs"
UNMEASURED = "not measured"


@dataclass
class Claim:
    """One claim of the paper, its verdict on the measured numbers, and the numbers."""

    statement: str
    verdict: str
    evidence: list[str]


def cells(groups: Sequence[GroupStats]) -> dict[tuple[str, str], GroupStats]:
    """``(workload, agent) -> stats`` for studies without other swept keys.

    Groups that differ in another swept key are ambiguous for these claims and are left
    out.
    """
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
        observed = sorted(measured, key=lambda a: -table[w, a].mean)
        line = f"{w}: observed {NAMES[observed[0]]} {_fmt(table[w, observed[0]])}"
        for a, b in zip(observed, observed[1:]):
            first, second = table[w, a], table[w, b]
            sign = "=" if first.mean == second.mean else ">"
            flag = "" if _separated(first, second) else " [within one std]"
            line += f" {sign}{flag} {NAMES[b]} {_fmt(second)}"
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
    """Each of ``agents`` has mean final speedup above 1 (``above``) or below 1 on every workload."""
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


# ----------------------------------------------------------------- zero-shot
TRANSFER_FILE = "transfer.csv"


def _source_workload(csv_path: Path) -> str:
    """The training workload of ``RUN_DIR/transfer/transfer.csv`` (from RUN_DIR/config.yaml)."""
    import yaml

    for cfg in (csv_path.parent.parent / "config.yaml", csv_path.parent / "config.yaml"):
        if cfg.exists():
            data = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
            name = (data.get("workload") or {}).get("name")
            if name:
                return str(name)
    return "?"


def read_transfer(paths: Sequence[str | Path]) -> list[dict]:
    """Zero-shot rows of ``egrl-transfer`` outputs (``transfer.csv`` files or folders above them).

    Only ``role == "holdout"`` rows count (the policy never trained on that target). Each
    returned row holds ``source`` (the run's training workload, ``?`` if unknown),
    ``target``, ``policy``, ``iterations``, ``greedy`` (greedy map's speedup),
    ``sampled`` (best sampled map's speedup, NaN if none) and ``run`` (the file read).
    """
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob(TRANSFER_FILE)) if p.is_dir() else [p])
    rows = []
    for f in files:
        source = _source_workload(f)
        with open(f, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                if row.get("role") != "holdout":
                    continue
                try:
                    greedy = float(row["greedy_speedup"])
                except (KeyError, TypeError, ValueError):
                    continue
                try:
                    sampled = float(row.get("best_sampled_speedup") or "nan")
                except ValueError:
                    sampled = math.nan
                rows.append(
                    {
                        "run": str(f),
                        "source": source,
                        "target": row.get("target", "?"),
                        "policy": row.get("policy", "?"),
                        "iterations": row.get("iterations", "?"),
                        "greedy": greedy,
                        "sampled": sampled,
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
    for r in rows:
        key = (r["source"], r["target"], r["policy"])
        if key not in best or r["greedy"] > best[key]["greedy"]:
            best[key] = r
    sampled: dict[tuple[str, str, str], float] = {}
    for r in rows:
        key = (r["source"], r["target"], r["policy"])
        if math.isfinite(r["sampled"]):
            sampled[key] = max(sampled.get(key, -math.inf), r["sampled"])
    runs: dict[tuple[str, str, str], set] = {}
    for r in rows:
        runs.setdefault((r["source"], r["target"], r["policy"]), set()).add(r.get("run"))
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
