"""Seconds per generation of EGRL (``agent=egrl``) and ES (``agent=es``) on the programs
of the TPU study, and where a generation's time goes.

Every measurement is one run as the study makes it (``configs/study/tpu-study.yaml``: the
problem's overrides, the agent's, the study's ``overrides`` (``threads=1``,
``learner=sac-table2``), ``record_evaluations=true``), stopped after ``--generations``
generations, in a process of its own built as ``egrl-train`` builds a run
(:func:`egrl.cli.train.run`: one torch thread, :func:`egrl.heap.keep_freed_memory`
where the code has it). Per generation: its wall time and the trainer's split of it (the
``t_*`` columns of ``metrics.csv``: ``inference`` (the policies' maps), ``evaluation``
(the game replaying each map, the measure cache, the records), ``learner`` (SAC updates),
``evolution`` (mutation, crossover, seeding, migration); ``other``: the rest), its
gradient steps and maps. Besides: building the environment and the agent (``setup_s``),
what ``run`` spends outside generations (``outputs_s``: metrics rows, plots,
``best_mapping.json``), one checkpoint (``checkpoint_s``) and the peak resident memory.

EGRL's first generations do not learn (the replay buffer's burn-in is 48 maps, a
generation proposes 22), so ``s_per_generation`` is the mean over the generations that
made gradient steps (over all generations where none did; ES never does).

``--label`` names the code measured and ``--code`` where it is (a checkout or copy of the
project: its ``egrl`` is imported and its ``configs/`` read); rows of other labels, programs
and agents already in ``--out`` are kept, so "before" and "after" can be measured apart:

    python benchmarks/tpu_egrl_speed.py --label before --code /tmp/egrl-before
    python benchmarks/tpu_egrl_speed.py --label after
    python benchmarks/tpu_egrl_speed.py --programs resnet50-op --agents egrl --generations 4
    python benchmarks/tpu_egrl_speed.py --agents egrl --set learner=sac --label after-learner-sac
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "configs" / "study" / "tpu-study.yaml"
OUT = ROOT / "benchmarks" / "results" / "tpu_egrl_speed.json"
PHASES = ("inference", "evaluation", "learner", "evolution")
#: generations per agent unless --generations says otherwise: EGRL's third is its first
#: with learner updates
GENERATIONS = {"egrl": 3, "es": 2}


def study_plan() -> dict:
    """The study's problems with their ``egrl-train`` overrides, and its common ones."""
    from omegaconf import OmegaConf

    plan = OmegaConf.load(STUDY)
    return {
        "problems": {p: list(plan.problem_overrides[p]) for p in plan.problems},
        "agents": {a: list(o) for a, o in plan.agent_overrides.items()},
        "overrides": list(plan.overrides),
        "budget": int(plan.budget),
    }


def run_overrides(
    plan: dict, problem: str, agent: str, seed: int, extra: list[str] = ()
) -> list[str]:
    """The overrides of one study run (``studies.tpu_study.run_overrides``), no time limit,
    then ``extra``."""
    return [
        "hwmodel=tpu-cmem",
        *plan["problems"][problem],
        *plan["agents"][agent],
        f"budget={plan['budget']}",
        "record_evaluations=true",
        *plan["overrides"],
        f"seed={seed}",
        *extra,
    ]


# ------------------------------------------------------------------ one measurement
def measure(overrides: list[str], generations: int) -> dict:
    """Run ``generations`` generations of the run ``overrides`` describes, in this process."""
    import numpy as np
    import torch
    from hydra import compose, initialize_config_dir

    import egrl
    from egrl.agents import make_agent
    from egrl.cli.build import env_from_config, train_config
    from egrl.cli.overrides import rewrite_workload_paths

    keep_freed_memory = None
    if (Path(egrl.__file__).parent / "heap.py").exists():  # not in code from before it
        from egrl.heap import keep_freed_memory
    configs = Path(egrl.__file__).resolve().parents[1] / "configs"
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        cfg = compose(config_name="train", overrides=rewrite_workload_paths(overrides))
    start = time.perf_counter()
    torch.set_num_threads(max(1, int(cfg.threads)))
    kept = bool(keep_freed_memory()) if keep_freed_memory is not None else False
    env = env_from_config(cfg)
    with tempfile.TemporaryDirectory(prefix="tpu-egrl-speed-") as run_dir:
        agent = make_agent(env, train_config(cfg), run_dir)
        setup = time.perf_counter() - start

        def stop(row: dict) -> None:
            if int(row["generation"]) >= generations:
                agent.stop_reason = f"benchmark: {generations} generations"

        start = time.perf_counter()
        agent.run(on_generation=stop)
        run_s = time.perf_counter() - start
        start = time.perf_counter()
        agent.save_checkpoint()
        checkpoint = time.perf_counter() - start
    rows, before = [], {"wall_s": 0.0, **{f"t_{p}": 0.0 for p in PHASES}}
    for row in agent.rows:
        wall = row["wall_s"] - before["wall_s"]
        split = {f"{p}_s": row[f"t_{p}"] - before[f"t_{p}"] for p in PHASES}
        steps = row.get("gradient_steps", 0)
        rows.append(
            {
                "generation": int(row["generation"]),
                "wall_s": wall,
                **split,
                "other_s": wall - sum(split.values()),
                "gradient_steps": 0 if steps != steps else int(steps),  # NaN: no learner
                "iterations": int(row["iterations"]),
                "proposals": int(row["proposals"]),
            }
        )
        before = row
    learning = [r for r in rows if r["gradient_steps"]]
    steps = sum(r["gradient_steps"] for r in learning)
    return {
        "buffers": int(env.num_units),
        "heap_kept": kept,
        "setup_s": setup,
        "outputs_s": run_s - sum(r["wall_s"] for r in rows),
        "checkpoint_s": checkpoint,
        "generations": rows,
        "s_per_generation": float(np.mean([r["wall_s"] for r in learning or rows])),
        "s_per_gradient_step": sum(r["learner_s"] for r in learning) / steps if steps else None,
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "torch": torch.__version__,
    }


def child(args: argparse.Namespace) -> None:
    """``--child``: one measurement, its JSON on the last line of stdout."""
    print(json.dumps(measure(json.loads(args.child), args.generations)), flush=True)


# ------------------------------------------------------------------ the table
def table(results: list[dict]) -> str:
    head = (
        "| program | buffers | agent | code | s/generation | " + " | ".join(PHASES) + " | other |"
    )
    lines = [head, "|" + " --- |" * (6 + len(PHASES))]
    for r in results:
        gens = [g for g in r["generations"] if g["gradient_steps"]] or r["generations"]
        mean = {k: sum(g[f"{k}_s"] for g in gens) / len(gens) for k in (*PHASES, "other")}
        lines.append(
            f"| {r['problem']} | {r['buffers']:,} | {r['agent']} | {r['label']} | "
            f"{r['s_per_generation']:.1f} | "
            + " | ".join(f"{mean[k]:.1f}" for k in (*PHASES, "other"))
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    plan = study_plan()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", nargs="+", default=list(plan["problems"]))
    ap.add_argument("--agents", nargs="+", default=["egrl", "es"], choices=sorted(plan["agents"]))
    ap.add_argument("--generations", type=int, default=None, help="default: egrl 3, es 2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", nargs="*", default=[], help="more egrl-train overrides")
    ap.add_argument("--label", default="after", help="names the code (and --set) measured")
    ap.add_argument("--code", default=str(ROOT), help="the project checkout to measure")
    ap.add_argument("--out", default=str(OUT), help="the JSON file (merged)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        child(args)
        return []
    unknown = set(args.programs) - set(plan["problems"])
    if unknown:
        ap.error(f"unknown programs {sorted(unknown)}; the study's: {list(plan['problems'])}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([args.code, os.environ.get("PYTHONPATH", "")]),
    }
    load = os.getloadavg()
    results = []
    for problem in args.programs:
        for agent in args.agents:
            generations = args.generations or GENERATIONS.get(agent, 2)
            overrides = run_overrides(plan, problem, agent, args.seed, args.set)
            cmd = [sys.executable, __file__, "--child", json.dumps(overrides)]
            cmd += ["--generations", str(generations)]
            done = subprocess.run(cmd, env=env, cwd=args.code, capture_output=True, text=True)
            if done.returncode:
                sys.stderr.write(done.stderr)
                raise SystemExit(f"{problem} {agent}: the measurement failed")
            r = {"problem": problem, "agent": agent, "label": args.label, "code": args.code}
            r.update(json.loads(done.stdout.strip().splitlines()[-1]))
            r["overrides"] = overrides
            results.append(r)
            print(table([r]).splitlines()[-1], flush=True)
    print(table(results))
    path = Path(args.out)
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    new = {(r["problem"], r["agent"], r["label"]) for r in results}
    kept = [r for r in old.get("results", []) if (r["problem"], r["agent"], r["label"]) not in new]
    runs = dict(old.get("runs", {}))
    runs[args.label] = {
        "machine": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": {"start": load, "end": os.getloadavg()},
        "args": {k: v for k, v in vars(args).items() if k != "child"},
    }
    out = {"runs": runs, "results": kept + results}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
