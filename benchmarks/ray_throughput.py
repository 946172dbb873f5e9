"""Throughput of the runtimes: Ray's parallel efficiency, and its overhead.

(a) The ``external`` model around ``benchmarks/sleep_chip.py``, which sleeps ``--seconds``
per map (0.5 s by default; bound by waiting, not by the CPU, so a small machine holds
many in flight): the wall time of a generation of ``--gen-size`` new random maps, sent
through an agent's :meth:`~egrl.agents.base.SearchAgent.evaluate` to a Ray pool of 1, 2,
4, 8 and 16 workers, and the parallel efficiency ``T(1) / (W * T(W))``.

(b) The simulated NNP-I model, ``agent=ea`` on resnet50 for ``--nnpi-budget``
iterations, end to end: iterations per second with the local runtime and with Ray
(1 and 2 workers), so the overhead of Ray on a fast target is known.

(c) EGRL on the sleep-bound chip with ``--overlap-workers`` Ray workers for
``--overlap-budget`` paid maps, with ``agent.overlap`` off (the learner waits for every
answer of a generation) and on (it updates while maps are in flight, as in CERL): wall
time, the time spent waiting for answers and the learner's time, for each learner preset
of ``--overlap-learners`` (``configs/learner/NAME.yaml``; ``sac``: today's defaults).

    python benchmarks/ray_throughput.py            # writes benchmarks/results/ray_throughput.json
    python benchmarks/ray_throughput.py --workers 1,8 --generations 1 --nnpi-budget 100
    python benchmarks/ray_throughput.py --only overlap   # (c) alone, merged into the JSON
    python benchmarks/ray_throughput.py --only overlap --overlap-learners sac,sac-table2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from egrl import make_env  # noqa: E402
from egrl.agents import make_agent, train_config  # noqa: E402
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig  # noqa: E402
from egrl.config import AgentConfig, TrainConfig  # noqa: E402
from egrl.runtime import RuntimeConfig, TargetSpec, make_runtime  # noqa: E402

log = logging.getLogger("ray_throughput")

CHIP = ROOT / "benchmarks" / "sleep_chip.py"
OUT = ROOT / "benchmarks" / "results" / "ray_throughput.json"


def sleep_generations(args: argparse.Namespace) -> list[dict]:
    """(a): generation wall time per worker count on the sleep-bound chip."""
    params = {"command": [sys.executable, str(CHIP), "--seconds", str(args.seconds)]}
    env = make_env("external", args.workload, **params)
    spec = TargetSpec("external", params, env.workload)
    rows = []
    for workers in args.workers:
        cfg = TrainConfig(seed=0, budget=10**6, progress=False, agent=AgentConfig("random"))
        agent = make_agent(env, cfg)
        start = time.perf_counter()
        config = RuntimeConfig(name="ray", workers=workers, start_timeout_s=args.start_timeout)
        with make_runtime(config, env, spec) as runtime:
            started = time.perf_counter() - start
            agent.ledger.use_runtime(runtime)
            rng = np.random.default_rng(workers)
            times = []
            for _ in range(args.generations):
                maps = env.random_mappings(args.gen_size, rng)
                t0 = time.perf_counter()
                ev = agent.ledger.evaluate(maps, "random")
                times.append(time.perf_counter() - t0)
                assert len(ev) == args.gen_size and agent.ledger.failed_maps == 0
        rows.append(
            {
                "workers": workers,
                "generation_s": float(np.mean(times)),
                "generation_s_each": times,
                "pool_start_s": started,
            }
        )
        log.info(
            "%2d workers: %.2f s per generation (start %.1f s)",
            workers,
            rows[-1]["generation_s"],
            started,
        )
    base = next((r["generation_s"] for r in rows if r["workers"] == 1), None)
    for r in rows:
        r["efficiency"] = None if base is None else base / (r["workers"] * r["generation_s"])
    return rows


def timed_run(env, cfg: TrainConfig, hwmodel: str, params: dict, runtime: RuntimeConfig):
    """Run ``cfg``'s agent on ``env`` through ``runtime``; the agent and the run's wall
    seconds (the pool's start-up not counted)."""
    agent = make_agent(env, cfg)
    with make_runtime(runtime, env, TargetSpec(hwmodel, params, env.workload)) as pool:
        agent.ledger.use_runtime(pool)
        start = time.perf_counter()
        agent.run()
        return agent, time.perf_counter() - start


def nnpi_ea(args: argparse.Namespace) -> list[dict]:
    """(b): end-to-end iterations per second of EA on the simulated NNP-I model."""
    torch.set_num_threads(1)
    rows = []
    for name, workers in [("local", 1), *(("ray", w) for w in args.nnpi_workers)]:
        env = make_env("nnpi", "resnet50")
        cfg = TrainConfig(
            seed=0,
            budget=args.nnpi_budget,
            progress=False,
            agent=EGRLConfig("ea", use_learner=False),
        )
        config = RuntimeConfig(name=name, workers=workers, start_timeout_s=args.start_timeout)
        agent, wall = timed_run(env, cfg, "nnpi", {}, config)
        rows.append(
            {
                "runtime": name,
                "workers": workers if name == "ray" else None,
                "iterations": agent.ledger.iterations,
                "wall_s": wall,
                "iterations_per_s": agent.ledger.iterations / wall,
                "evaluation_s": agent.timer.totals["evaluation"],
                "best_speedup": agent.ledger.best.speedup,
            }
        )
        log.info("%s x%s: %.1f it/s", name, workers, rows[-1]["iterations_per_s"])
    return rows


def learner_preset(name: str) -> LearnerConfig:
    """The learner of ``configs/learner/NAME.yaml`` (``sac``: today's defaults)."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "learner" / f"{name}.yaml"))
    return train_config({"learner": values}).agent.learner


def egrl_overlap(args: argparse.Namespace) -> list[dict]:
    """(c): EGRL on the sleep-bound chip, the learner overlapping the measurements or not."""
    torch.set_num_threads(1)
    params = {"command": [sys.executable, str(CHIP), "--seconds", str(args.seconds)]}
    rows = []
    for learner, overlap in [(n, o) for n in args.overlap_learners for o in (False, True)]:
        env = make_env("external", args.workload, **params)
        cfg = TrainConfig(
            seed=0,
            budget=args.overlap_budget,
            progress=False,
            agent=EGRLConfig("egrl", options={"overlap": overlap}, learner=learner_preset(learner)),
        )
        config = RuntimeConfig(
            name="ray", workers=args.overlap_workers, start_timeout_s=args.start_timeout
        )
        agent, wall = timed_run(env, cfg, "external", params, config)
        totals = agent.timer.totals
        rows.append(
            {
                "learner": learner,
                "overlap": overlap,
                "workers": args.overlap_workers,
                "iterations": agent.ledger.iterations,
                "generations": agent.generation,
                "gradient_steps": int(sum(r["gradient_steps"] for r in agent.rows)),
                "wall_s": wall,
                "waiting_s": totals["evaluation"],
                "learner_s": totals["learner"],
                "inference_s": totals["inference"],
                "evolution_s": totals["evolution"],
                "best_speedup": agent.ledger.best.speedup,
            }
        )
        log.info(
            "egrl learner=%s overlap=%s: %.1f s wall, %.1f s waiting, %.1f s learner",
            learner,
            overlap,
            wall,
            totals["evaluation"],
            totals["learner"],
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8,16", help="Ray pool sizes for (a)")
    parser.add_argument("--gen-size", type=int, default=32, help="maps per generation in (a)")
    parser.add_argument("--generations", type=int, default=2, help="generations timed per size")
    parser.add_argument("--seconds", type=float, default=0.5, help="sleep per map in (a)")
    parser.add_argument("--workload", default="resnet18", help="workload of (a)")
    parser.add_argument("--nnpi-budget", type=int, default=300, help="iterations of (b)")
    parser.add_argument("--nnpi-workers", default="1,2", help="Ray pool sizes for (b)")
    parser.add_argument("--skip-nnpi", action="store_true", help="no (b)")
    parser.add_argument("--overlap-budget", type=int, default=200, help="paid maps of (c)")
    parser.add_argument("--overlap-workers", type=int, default=4, help="Ray pool size of (c)")
    parser.add_argument(
        "--overlap-learners", default="sac", help="learner presets of (c) (configs/learner/)"
    )
    parser.add_argument(
        "--only", choices=("sleep", "nnpi", "overlap"), help="run one part, merged into --out"
    )
    parser.add_argument("--start-timeout", type=float, default=1800.0, help="actor start-up limit")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.workers = [int(w) for w in args.workers.split(",")]
    args.nnpi_workers = [int(w) for w in args.nnpi_workers.split(",")]
    args.overlap_learners = args.overlap_learners.split(",")
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    sleep = {"seconds_per_map": args.seconds, "workload": args.workload}
    parts = {  # key -> (run it, rows, what the rows were measured on)
        "sleep_chip": (
            args.only in (None, "sleep"),
            sleep_generations,
            {**sleep, "maps_per_generation": args.gen_size},
        ),
        "nnpi_ea": (
            args.only == "nnpi" or (args.only is None and not args.skip_nnpi),
            nnpi_ea,
            {"workload": "resnet50"},
        ),
        "egrl_overlap": (
            args.only in (None, "overlap"),
            egrl_overlap,
            {**sleep, "budget": args.overlap_budget},
        ),
    }
    known = args.out.exists() and args.only is not None
    result = json.loads(args.out.read_text(encoding="utf-8")) if known else {}
    result.update(
        {
            "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}",
            "ray": ray.__version__,
            "note": "shared machine with other jobs running; (a) and (c) are sleep-bound",
            "load_average_at_start": os.getloadavg(),
        }
    )
    try:
        for key, (wanted, measure, setting) in parts.items():
            if wanted:
                result[key] = {**setting, "rows": measure(args)}
    finally:
        ray.shutdown()
    result["load_average_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
