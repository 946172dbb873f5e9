"""EGRL speed and quality: full training runs, several seeds, against compiler and optimum.

    python benchmarks/egrl_runs.py --workloads resnet50 resnet101 bert-base --seeds 0 1 2 3 4
    python benchmarks/egrl_runs.py --workloads resnet50 --seeds 0 --budget 4000 --jobs 1
    python benchmarks/egrl_runs.py --from multirun/results/paper-egrl --out FILE

Each run is one ``Trainer`` (Table 2 defaults unless overridden) with one torch thread;
``--jobs`` runs that many in parallel processes. For every run the script records the
wall time and its breakdown (GNN inference, evaluation, learner updates, evolution) and
the best speedup over the native compiler; per workload it prints mean and standard
deviation next to the optimum's speedup (from ``benchmarks/results/foundation.json``
when present, else solved here with ``--optimum-time``). Results go to
``benchmarks/results/egrl_runs.json`` (merged with earlier runs of other workloads/seeds).
``--from`` trains nothing: it reads the finished ``egrl`` runs of ``egrl-train`` run or
sweep directories (e.g. the results study) and reports them the same way.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from egrl.experiments import results_page

RESULTS = Path(__file__).resolve().parent / "results"


def one_run(workload: str, seed: int, budget: int, overrides: dict) -> dict:
    """Train once; returns timings and the best speedup."""
    import torch

    torch.set_num_threads(1)
    from egrl import make_env
    from egrl.config import from_mapping
    from egrl.trainer import Trainer

    env = make_env("nnpi", workload)
    cfg = from_mapping({"seed": seed, "budget": budget, "progress": False, **overrides})
    start = time.perf_counter()
    trainer = Trainer(env, cfg)
    best = trainer.run()
    wall = time.perf_counter() - start
    return {
        "workload": workload,
        "seed": seed,
        "budget": budget,
        "iterations": trainer.iterations,
        "generations": trainer.generation,
        "wall_s": wall,
        "breakdown_s": dict(trainer.timer.totals),
        "best_speedup": best.speedup,
        "best_iteration": best.iteration,
        "curve": [(r["iterations"], r["best_speedup"]) for r in trainer.rows],
    }


def from_run(run) -> dict:
    """The record of :func:`one_run` for a finished ``egrl-train`` run directory."""
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


def train(jobs: list[tuple[str, int]], budget: int, overrides: dict, workers: int):
    """Records of :func:`one_run` for every ``(workload, seed)``, yielded in ``jobs`` order."""
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one_run, w, s, budget, overrides) for w, s in jobs]
        for future in futures:
            yield future.result()


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
    parser.add_argument("--workloads", nargs="+", default=["resnet50", "resnet101", "bert-base"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--optimum-time", type=float, default=600.0)
    parser.add_argument("--set", nargs="*", default=[], help="config overrides key=value (dotted)")
    parser.add_argument("--from", dest="roots", nargs="+", help="read finished runs instead")
    parser.add_argument("--out", default=str(RESULTS / "egrl_runs.json"), help="results JSON")
    args = parser.parse_args()

    overrides: dict = {}
    for item in args.set:
        key, value = item.split("=", 1)
        node = overrides
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = json.loads(value) if value[:1] in "0123456789-[{tf" else value

    jobs = [(w, s) for w in args.workloads for s in args.seeds]
    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out)
    machine = results_page.machine()
    merged = json.loads(out.read_text())["runs"] if out.exists() else []
    results = collect(args.roots) if args.roots else train(jobs, args.budget, overrides, args.jobs)
    for r in results:
        print(
            f"{r['workload']} seed {r['seed']}: speedup {r['best_speedup']:.4f}, {r['wall_s']:.0f} s",
            flush=True,
        )
        key = (r["workload"], r["seed"], r["budget"])
        merged = [x for x in merged if (x["workload"], x["seed"], x["budget"]) != key] + [r]
        # Written after every run: a long study interrupted half-way keeps what it measured.
        out.write_text(
            json.dumps({"machine": machine, "overrides": overrides, "runs": merged}, indent=1)
        )
    optimum = optimum_speedups(sorted({r["workload"] for r in merged}), args.optimum_time)
    out.write_text(
        json.dumps(
            {"machine": machine, "overrides": overrides, "runs": merged, "optimum": optimum},
            indent=1,
        )
    )
    if not args.roots:
        print(f"\nmachine: {machine}; {args.jobs} runs in parallel, 1 torch thread each\n")
    print(summarize(merged, optimum))


if __name__ == "__main__":
    main()
