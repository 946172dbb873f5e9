"""Zero-shot runs: a frozen pretrained policy's maps on a test graph, written as a run directory.

The first paid sample is the policy's greedy map (argmax of every decision: the zero-shot
prediction, no sample spent on search); every later one is a map drawn from its softmax
with a ``torch.Generator`` seeded by the run's seed. The policy is never updated. As in
``egrl-train`` on a deterministic target, a map measured before is not paid again: the
budget counts distinct maps. A policy whose softmax has (almost) collapsed may run out of
new maps: after ``max_draw_factor * budget`` draws the run stops, its ``budget`` is set to
the distinct maps it measured and ``exhausted: true`` is recorded.

The directory holds ``config.yaml`` (``agent.name: zero-shot``, workload, seed, budget,
hardware model, reward, the snapshot) and ``metrics.csv`` (``generation, iterations,
best_speedup, wall_s``, plus ``greedy_speedup``), so :func:`egrl.experiments.collect_runs`
reads it like any other run.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from egrl.experiments.mcm_curves import ZERO_SHOT
from egrl.experiments.runs import load_run
from egrl.transfer import RunInfo, load_actor, read_snapshot
from policies.categorical import sample_maps

log = logging.getLogger(__name__)

METRIC_COLUMNS = ("generation", "iterations", "best_speedup", "wall_s", "greedy_speedup")


def is_finished(run_dir: str | Path) -> bool:
    """The directory holds a complete zero-shot run."""
    try:
        return load_run(run_dir).complete
    except (OSError, ValueError):
        return False


def zero_shot_run(
    snapshot: str | Path,
    info: RunInfo,
    workload: str,
    seed: int,
    budget: int,
    run_dir: str | Path,
    batch: int = 100,
    max_draw_factor: int = 10,
) -> Path:
    """Measure the greedy map, then sampled maps, of ``snapshot``'s learner on ``workload``.

    Args:
        snapshot: a policy snapshot (``.safetensors``) holding a ``learner`` policy.
        info: the hardware model, its parameters and the reward (the pretraining run's).
        workload: test graph; seed: the sampling generator's seed; budget: distinct maps.
        run_dir: where ``config.yaml`` and ``metrics.csv`` go (written at the end).
        batch: maps drawn per generation (one ``env.evaluate`` call).
        max_draw_factor: draws allowed per unit of budget before the run gives up.
    """
    run_dir = Path(run_dir)
    start = time.perf_counter()
    env = info.make_env(workload)
    actor = load_actor(read_snapshot(snapshot), "learner")
    actor.eval()
    with torch.no_grad():
        logits = actor(env.graph.x, env.graph.edge_index)
        probs = torch.softmax(logits, dim=-1)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    seen: set[bytes] = set()
    rows: list[dict] = []
    best, greedy_speedup, draws = 0.0, float("nan"), 0
    while len(seen) < budget and draws < max_draw_factor * budget:
        if not rows:
            maps = sample_maps(logits, 1, None, greedy=True)
        else:
            maps = sample_maps(logits, min(batch, max_draw_factor * budget - draws), gen)
        draws += len(maps)
        maps_np = maps.cpu().numpy().astype(np.int64)
        fresh = []
        for m in maps_np:
            key = m.tobytes()
            if key not in seen and len(seen) + len(fresh) < budget:
                seen.add(key)
                fresh.append(m)
        if fresh:
            batch_maps = np.stack(fresh)
            p = probs.expand(len(fresh), *probs.shape).numpy() if env.wants_probabilities else None
            ev = env.evaluate(batch_maps, probs=p)
            best = max(best, float(np.max(ev.speedup)))
            if not rows:
                greedy_speedup = float(ev.speedup[0])
        elif rows and rows[-1]["iterations"] == len(seen):
            continue  # nothing new this round: draw again without writing a row
        rows.append(
            {
                "generation": len(rows) + 1,
                "iterations": len(seen),
                "best_speedup": repr(best),
                "wall_s": f"{time.perf_counter() - start:.3f}",
                "greedy_speedup": repr(greedy_speedup),
            }
        )
    exhausted = len(seen) < budget
    if exhausted:
        log.warning(
            "zero-shot %s seed %d: %d distinct maps after %d draws; stopping",
            workload,
            seed,
            len(seen),
            draws,
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "agent": {"name": ZERO_SHOT},
        "workload": {"name": workload},
        "hwmodel": {"name": info.hwmodel, "params": dict(info.hw_params)},
        "seed": int(seed),
        "budget": len(seen) if exhausted else int(budget),
        "requested_budget": int(budget),
        "exhausted": exhausted,
        "draws": draws,
        "reward": info.reward,
        "invalid_reward_scale": info.invalid_reward_scale,
        "init_from": str(snapshot),
    }
    tmp = run_dir / "metrics.csv.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    tmp.replace(run_dir / "metrics.csv")
    return run_dir
