"""How much one annealing move changes a map's true speedup, against a board's noise.

    python benchmarks/neighbour_steps.py multirun/noise/sa/noise0/raw
    python benchmarks/neighbour_steps.py RUNS_ROOT --moves 1 --draws 100 --seed 0

For each run under ``RUNS_ROOT`` (the noise study's noiseless SA runs by default: the
example chip with shared bandwidth, 2 MiB SRAM, 50 TMAC/s, on the run's workload), takes
the map the run returned and ``--draws`` neighbours of it as simulated annealing makes
them (``--moves`` decisions changed, :func:`egrl.agents.annealing.neighbours`), measures
all of them on the run's own chip (its config, so a noisy run is read as it was), and
prints the relative change of the speedup of the valid neighbours: the median and the
shares below 1% and 5%. A move whose change is below the noise's coefficient of
variation cannot be told from the noise by one reading of each side: telling a change
``d`` at noise ``cv`` needs about ``(2 cv / d)^2`` readings.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from egrl.agents.annealing import neighbours
from egrl.env import env_from_config
from egrl.report.runs import mapping_from_dict, read_config


def changes(run_dir: Path, moves: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """float64 ``[V]``: ``|speedup(neighbour) / speedup(best) - 1|`` of the valid ones among
    ``draws`` neighbours of the run's returned map."""
    env = env_from_config(read_config(run_dir))
    path = run_dir / "best_mapping.json"
    best = mapping_from_dict(env, json.loads(path.read_text())["mapping"], str(path))[None]
    base = float(env.evaluate(best).speedup[0])
    near = np.concatenate([neighbours(best, env.num_choices, moves, rng) for _ in range(draws)])
    speedup = env.evaluate(near).speedup
    return np.abs(speedup[speedup > 0] / base - 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a folder of run directories (seed*/)")
    parser.add_argument("--moves", type=int, default=1, help="decisions a move changes")
    parser.add_argument("--draws", type=int, default=100, help="neighbours per run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    runs = sorted(p.parent for p in args.root.glob("*/best_mapping.json"))
    if not runs:
        parser.error(f"{args.root}: no run directory with a best_mapping.json")
    found = np.concatenate([changes(run, args.moves, args.draws, rng) for run in runs])
    print(
        f"{len(runs)} runs, {len(found)} valid neighbours of {len(runs) * args.draws}: "
        f"median change {100 * np.median(found):.2f}%, "
        f"below 1%: {np.mean(found < 0.01):.0%}, below 5%: {np.mean(found < 0.05):.0%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
