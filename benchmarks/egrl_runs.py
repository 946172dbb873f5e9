"""EGRL speed and quality: finished training runs, several seeds, against compiler and optimum.

    egrl-train -m agent=egrl workload=resnet50,resnet101,bert-base 'seed=range(5)' budget=4000 \
        hydra/launcher=parallel hydra.sweep.dir=multirun/egrl-runs
    python benchmarks/egrl_runs.py --from multirun/egrl-runs
    python benchmarks/egrl_runs.py --from multirun/results/paper-egrl --out FILE

Trains nothing: it reads the finished ``egrl`` runs of ``egrl-train`` run or sweep
directories (a sweep as above, the results study's, single runs). For every run it records
the wall time and its breakdown (GNN inference, evaluation, learner updates, evolution:
the ``t_*`` columns of its metrics) and the best speedup over the native compiler; per
workload it prints mean and standard deviation next to the optimum's speedup (from
``benchmarks/results/foundation.json`` when present, else solved here with
``--optimum-time``). Results go to ``benchmarks/results/egrl_runs.json`` (merged with
earlier runs of other workloads/seeds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's studies/
from studies.render import machine as machine_text  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def from_run(run) -> dict:
    """The record of one finished ``egrl-train`` run directory: its timings (seconds,
    ``breakdown_s`` by phase), best speedup and the iteration it was found at, its curve."""
    from egrl.rundir import RunDir

    best = RunDir(run.path).read_best_map()
    return {
        "workload": run.workload,
        "seed": run.seed,
        "budget": run.budget,
        "iterations": int(run.iterations[-1]),
        "generations": int(run.last_row["generation"]),
        "wall_s": run.final_wall_s,
        "breakdown_s": {
            k[2:]: float(v) for k, v in run.last_row.items() if k.startswith("t_") and v
        },
        "best_speedup": run.final_speedup,
        "best_iteration": best["iteration"],
        "curve": list(zip(run.iterations.tolist(), run.best_speedup.tolist(), strict=True)),
        "run_dir": str(run.path),
    }


def collect(roots: list[str]) -> list[dict]:
    """Records of every finished EGRL run under ``roots``."""
    from egrl.runs import collect_runs

    found = collect_runs(roots)
    for problem in found.problems:
        print(f"left out: {problem}")
    return [from_run(r) for r in found.runs if r.agent == "egrl"]


def optimum_speedups(workloads: list[str], time_limit: float) -> dict[str, dict]:
    """The optimum's speedup per workload, from the foundation benchmark or solved now."""
    known = {}
    path = RESULTS / "foundation.json"
    if path.exists():
        for row in json.loads(path.read_text()).get("results", []):
            if "optimum_speedup_over_compiler" in row:
                known[row["workload"]] = {
                    "speedup": row["optimum_speedup_over_compiler"],
                    "proven": bool(row.get("optimum_proven", False)),
                }
    from egrl import make_env

    for w in workloads:
        if w not in known:
            env = make_env("nnpi", w)
            opt = env.optimum(time_limit_s=time_limit)
            known[w] = {"speedup": env.baseline_latency_s / opt.latency_s, "proven": opt.proven}
    return known


def summarize(runs: list[dict], optimum: dict[str, dict]) -> str:
    lines = [
        "| workload | seeds | budget | EGRL speedup (mean ± std) | min – max | optimum | % of optimum | wall per run (s) | inference / evaluation / learner / evolution (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in sorted({r["workload"] for r in runs}):
        rs = [r for r in runs if r["workload"] == w]
        s = np.array([r["best_speedup"] for r in rs])
        wall = np.array([r["wall_s"] for r in rs])
        bd = {k: np.mean([r["breakdown_s"][k] for r in rs]) for k in rs[0]["breakdown_s"]}
        opt = optimum.get(w, {})
        o = opt.get("speedup", float("nan"))
        tag = "" if opt.get("proven", False) else " (best found)"
        lines.append(
            f"| {w} | {len(rs)} | {rs[0]['budget']} | {s.mean():.3f} ± {s.std(ddof=1) if len(s) > 1 else 0:.3f} | "
            f"{s.min():.3f} – {s.max():.3f} | {o:.3f}{tag} | {100 * s.mean() / o:.1f}% | "
            f"{wall.mean():.0f} ± {wall.std(ddof=1) if len(wall) > 1 else 0:.0f} | "
            + " / ".join(
                f"{bd[k]:.0f}" for k in ("inference", "evaluation", "learner", "evolution")
            )
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="roots", nargs="+", required=True, help="egrl-train run or sweep directories"
    )
    parser.add_argument("--optimum-time", type=float, default=600.0)
    parser.add_argument("--out", default=str(RESULTS / "egrl_runs.json"), help="results JSON")
    args = parser.parse_args()

    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out)
    machine = machine_text()
    merged = json.loads(out.read_text())["runs"] if out.exists() else []
    for r in collect(args.roots):
        print(
            f"{r['workload']} seed {r['seed']}: speedup {r['best_speedup']:.4f}, {r['wall_s']:.0f} s",
            flush=True,
        )
        key = (r["workload"], r["seed"], r["budget"])
        merged = [x for x in merged if (x["workload"], x["seed"], x["budget"]) != key] + [r]
    optimum = optimum_speedups(sorted({r["workload"] for r in merged}), args.optimum_time)
    out.write_text(json.dumps({"machine": machine, "runs": merged, "optimum": optimum}, indent=1))
    print(summarize(merged, optimum))


if __name__ == "__main__":
    main()
