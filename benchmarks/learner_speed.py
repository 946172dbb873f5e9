"""The EGRL learner's speed: whole runs and single updates, before and after, interleaved.

    python benchmarks/learner_speed.py --before af1fc66
    python benchmarks/learner_speed.py --before af1fc66 --workloads resnet50 --repeats 3 --budget 1000
    python benchmarks/learner_speed.py --runs 0 --updates 30 --compile    # updates only, with torch.compile
    python benchmarks/learner_speed.py --summarise benchmarks/results/learner_speed.json

``--before REV`` extracts that commit with ``git archive`` into a temporary directory (the
working tree and the repository's state are left alone); the "after" code is this
checkout. Every measurement runs in its own Python process with the code under test first
on ``PYTHONPATH``, one torch thread, and the two versions alternate (before, after, after,
before, ...) so that the load of a shared machine falls on both alike.

Two measurements per workload:

* ``runs``: the command of the speed target, ``egrl-train agent=egrl workload=W
  budget=B seed=S`` (defaults otherwise; its run directory goes to a temporary
  directory). Recorded: wall seconds, the process's CPU seconds, the trainer's time
  breakdown (GNN inference, evaluation, learner updates, evolution: ``metrics.csv``'s
  ``t_*`` columns), generations, iterations, proposals, gradient steps, best speedup and
  a digest of ``metrics.csv`` without its wall-clock columns; runs of the same code and
  seed must have the same digest (``deterministic`` in the output).
* ``updates``: ``SACDiscrete.update`` on the workload's decision graph, default learner,
  a buffer of 200 random maps, minibatches of 24, after two warm-up updates: wall and
  CPU milliseconds per update (median over ``--update-repeats`` blocks of ``--updates``).
  ``--compile`` adds the after code with ``torch.compile`` on the actor and critic
  (``warmup_s`` then includes the compilation); ``--two-towers`` adds the after code with
  ``shared_critic_encoder=False`` (EGRL's two critic towers).

Results go to ``benchmarks/results/learner_speed.json`` with the machine, the load
average before and after, and the after/before ratios of each interleaved pair.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TIMING = ("wall_s", "t_inference", "t_evaluation", "t_learner", "t_evolution")
PHASES = tuple(k[2:] for k in TIMING[1:])

UPDATE_SNIPPET = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from egrl import make_env
from egrl.replay import ReplayBuffer
from egrl.agents.egrl.sac import SACDiscrete
from egrl.agents.egrl.sac import SACConfig
workload, count, repeats, compiled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
config = SACConfig(**json.loads(sys.argv[5]))
env = make_env("nnpi", workload)
graph = env.graph
learner = SACDiscrete.build(int(graph.x.shape[1]), env.num_choices, seed=0, config=config)
if compiled:
    learner.actor.forward = torch.compile(learner.actor.forward, dynamic=False)
    learner.critic.forward = torch.compile(learner.critic.forward, dynamic=False)
rng = np.random.default_rng(0)
maps = np.stack([rng.integers(0, c, size=(200, env.num_units)) for c in env.num_choices], -1)
buffer = ReplayBuffer(1000, env.num_units, len(env.num_choices))
buffer.add(maps, rng.normal(size=200), "gnn")
start = time.perf_counter()
learner.train_steps([(graph, buffer)], 2, rng)
warmup = time.perf_counter() - start
wall, cpu = [], []
for _ in range(repeats):
    w, c = time.perf_counter(), time.process_time()
    learner.train_steps([(graph, buffer)], count, rng)
    wall.append(1e3 * (time.perf_counter() - w) / count)
    cpu.append(1e3 * (time.process_time() - c) / count)
print(json.dumps({"units": env.num_units, "wall_ms": wall, "cpu_ms": cpu, "warmup_s": warmup}))
"""


def extract(rev: str, into: Path) -> Path:
    """The tree of commit ``rev`` written under ``into`` (``git archive``; read-only on git)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def child_cpu_s() -> float:
    """User + system CPU seconds of the finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_python(code: Path, args: list[str], cwd: Path) -> tuple[str, float, float]:
    """Run ``python args`` with ``code`` first on the path: stdout, wall s, CPU s."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    cpu, wall = child_cpu_s(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    wall, cpu = time.perf_counter() - wall, child_cpu_s() - cpu
    if done.returncode:
        raise RuntimeError(f"{args[:3]} under {code} failed:\n{done.stderr[-3000:]}")
    return done.stdout, wall, cpu


def metrics_digest(rows: list[dict]) -> str:
    """sha256 of ``metrics.csv`` without its wall-clock columns."""
    text = json.dumps([{k: v for k, v in r.items() if k not in TIMING} for r in rows])
    return hashlib.sha256(text.encode()).hexdigest()


def train_run(code: Path, workload: str, budget: int, seed: int, extra: list[str], tmp: Path):
    """One ``egrl-train agent=egrl`` run of the code under ``code``; its record."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{workload}-", dir=tmp))
    args = [
        "-c",
        "from egrl.cli.train import main; main()",
        "agent=egrl",
        f"workload={workload}",
        f"budget={budget}",
        f"seed={seed}",
        "progress=false",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    _, wall, cpu = run_python(code, args, tmp)
    from egrl.rundir import RunDir

    rows = RunDir(run_dir).read_metrics_rows()
    last = rows[-1]
    return {
        "workload": workload,
        "seed": seed,
        "budget": budget,
        "wall_s": wall,
        "cpu_s": cpu,
        "trainer_wall_s": float(last["wall_s"]),
        "breakdown_s": {k[2:]: float(last[k]) for k in TIMING[1:]},
        "generations": int(last["generation"]),
        "iterations": int(last["iterations"]),
        "proposals": int(last["proposals"]),
        "gradient_steps": int(sum(float(r["gradient_steps"] or 0) for r in rows)),
        "best_speedup": float(last["best_speedup"]),
        "metrics_digest": metrics_digest(rows),
    }


def update_timing(
    code: Path,
    workload: str,
    count: int,
    repeats: int,
    tmp: Path,
    compiled: bool = False,
    config: dict | None = None,
):
    """Per-update wall and CPU milliseconds of the code under ``code`` on ``workload``.

    ``config``: ``SACConfig`` fields that differ from the defaults.
    """
    flag = "1" if compiled else "0"
    args = [UPDATE_SNIPPET, workload, str(count), str(repeats), flag, json.dumps(config or {})]
    out, _, _ = run_python(code, ["-c", *args], tmp)
    record = json.loads(out.strip().splitlines()[-1])
    record.update(
        workload=workload,
        wall_ms_median=float(np.median(record["wall_ms"])),
        cpu_ms_median=float(np.median(record["cpu_ms"])),
    )
    return record


def interleaved(versions: dict[str, Path], repeats: int, measure) -> list[dict]:
    """``measure(label, code)`` for every version, ``repeats`` rounds, alternating the order."""
    records = []
    labels = list(versions)
    for rep in range(repeats):
        for label in labels if rep % 2 == 0 else labels[::-1]:
            record = measure(label, versions[label])
            record.update(version=label, repeat=rep)
            print(json.dumps({k: v for k, v in record.items() if k not in ("wall_ms", "cpu_ms")}))
            records.append(record)
    return records


def ratios(records: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """before/after of ``keys`` per workload and repeat (pairs measured side by side)."""
    out = []
    for (workload, rep), pair in _pairs(records).items():
        if {"before", "after"} <= set(pair):
            b, a = pair["before"], pair["after"]
            out.append(
                {"workload": workload, "repeat": rep}
                | {f"{k}_before_over_after": _get(b, k) / _get(a, k) for k in keys}
            )
    return out


def _pairs(records: list[dict]) -> dict:
    pairs: dict = {}
    for r in records:
        pairs.setdefault((r["workload"], r["repeat"]), {})[r["version"]] = r
    return pairs


def _get(record: dict, key: str) -> float:
    return record["breakdown_s"][key] if key in record.get("breakdown_s", {}) else record[key]


def deterministic(records: list[dict]) -> dict[str, bool]:
    """Whether every run of one version, workload and seed wrote the same metrics."""
    seen: dict[str, set] = {}
    for r in records:
        key = f"{r['version']}/{r['workload']}/seed{r['seed']}/budget{r['budget']}"
        seen.setdefault(key, set()).add(r["metrics_digest"])
    return {key: len(digests) == 1 for key, digests in seen.items()}


def summarise(result: dict) -> str:
    """Markdown tables of a results file: updates, runs and the before/after ratios."""
    lines = [
        "| version | workload | round | update wall ms (median) | update CPU ms (median) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in result["updates"]:
        lines.append(
            f"| {r['version']} | {r['workload']} | {r['repeat']} | "
            f"{r['wall_ms_median']:.1f} | {r['cpu_ms_median']:.1f} |"
        )
    lines += [
        "",
        "| version | workload | round | wall s | CPU s | trainer wall s |"
        " inference / evaluation / learner /"
        " evolution s | generations | iterations | proposals | gradient steps |"
        " best speedup |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["runs"]:
        parts = " / ".join(f"{r['breakdown_s'][k]:.0f}" for k in PHASES)
        lines.append(
            f"| {r['version']} | {r['workload']} | {r['repeat']} | {r['wall_s']:.0f} | "
            f"{r['cpu_s']:.0f} | {r['trainer_wall_s']:.0f} | {parts} | {r['generations']} | {r['iterations']} | "
            f"{r['proposals']} | {r['gradient_steps']} | {r['best_speedup']:.4f} |"
        )
    for key in ("update_ratios", "run_ratios"):
        for r in result[key]:
            ratios_text = ", ".join(
                f"{k.replace('_before_over_after', '')} {v:.2f}x"
                for k, v in r.items()
                if k.endswith("_before_over_after")
            )
            lines.append(f"\n{key} {r['workload']} round {r['repeat']}: {ratios_text}")
    return "\n".join(lines)


def machine() -> dict:
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git revision of the 'before' code (omit: after only)")
    parser.add_argument("--workloads", nargs="+", default=["resnet50", "bert-base"])
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1, help="interleaved rounds of whole runs")
    parser.add_argument("--updates", type=int, default=20, help="updates per timed block")
    parser.add_argument("--update-repeats", type=int, default=3, help="timed blocks per process")
    parser.add_argument("--update-rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile'd updates")
    parser.add_argument("--two-towers", action="store_true", help="also time two critic towers")
    parser.add_argument("--set", nargs="*", default=[], help="extra egrl-train overrides")
    parser.add_argument("--out", default=str(RESULTS / "learner_speed.json"))
    parser.add_argument("--summarise", metavar="JSON", help="print a results file's tables")
    args = parser.parse_args()
    if args.summarise:
        print(summarise(json.loads(Path(args.summarise).read_text())))
        return

    with tempfile.TemporaryDirectory(prefix="learner_speed-") as scratch:
        tmp = Path(scratch)
        versions = {"after": ROOT}
        if args.before:
            versions = {"before": extract(args.before, tmp / "before"), "after": ROOT}
        load_start = os.getloadavg()
        updates = []
        for workload in args.workloads:
            updates += interleaved(
                versions,
                args.update_rounds,
                lambda label, code, w=workload: update_timing(
                    code, w, args.updates, args.update_repeats, tmp
                ),
            )
            variants = {
                "after+compile": ({"compiled": True}, args.compile),
                "after, two towers": (
                    {"config": {"shared_critic_encoder": False}},
                    args.two_towers,
                ),
            }
            for rep in range(args.update_rounds):
                for label, (kwargs, wanted) in variants.items():
                    if not wanted:
                        continue
                    record = update_timing(
                        ROOT, workload, args.updates, args.update_repeats, tmp, **kwargs
                    )
                    record.update(version=label, repeat=rep)
                    print(
                        json.dumps(
                            {k: v for k, v in record.items() if k not in ("wall_ms", "cpu_ms")}
                        )
                    )
                    updates.append(record)
        runs = []
        for workload in args.workloads:
            runs += interleaved(
                versions,
                args.runs,
                lambda label, code, w=workload: train_run(
                    code, w, args.budget, args.seed, args.set, tmp
                ),
            )
        result = {
            "machine": machine(),
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
            "before": args.before,
            "budget": args.budget,
            "overrides": args.set,
            "updates": updates,
            "update_ratios": ratios(updates, ("wall_ms_median", "cpu_ms_median")),
            "runs": runs,
            "run_ratios": ratios(runs, ("wall_s", "cpu_s", "learner")),
            "deterministic": deterministic(runs),
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(summarise(result))
    print(json.dumps(result["deterministic"]))


if __name__ == "__main__":
    main()
