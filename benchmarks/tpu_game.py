"""Speed of the TPU memory-mapping game on a ~10,000-buffer program.

The program is a zoo workload unrolled as a serving loop (``Program.from_workload``
with ``repeats``; weights shared across repetitions): by default ``bert-large@op`` (512
op-level nodes) 8 times, 10,536 buffers over 4,096 instructions. Measured, each the best
of ``--rounds`` runs:

* ``play``: a whole game from one proposed action per buffer (uniformly random
  proposals; illegal ones repaired as the hardware-model adapter does), steps/s;
* ``legal random``: uniformly random legal play, ``legal_actions()`` + ``step()`` at
  every buffer, steps/s;
* ``heuristic``: the native heuristic's plan played through the game, steps/s;
* ``snapshot`` / ``restore`` / ``clone`` half-way through a game, microseconds;
* ``observe``: one observation (128x128 grid, k=5), milliseconds.

Prints a markdown table; ``--json`` also writes the figures to a file.

    python benchmarks/tpu_game.py
    python benchmarks/tpu_game.py --workload gpt2@op --repeats 30 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import workloads
from hwmodels.tpu import Game, Program
from hwmodels.tpu.heuristic import whole_life_plan
from hwmodels.tpu.observe import observe


def best_of(rounds: int, fn) -> float:
    """Shortest wall time of ``rounds`` calls of ``fn``, seconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def legal_random(program: Program, rng: np.random.Generator) -> None:
    game = Game(program)
    while not game.done:
        legal = np.flatnonzero(game.legal_actions())
        game.step(int(legal[rng.integers(len(legal))]))


def measure(program: Program, rounds: int, seed: int) -> dict:
    """The figures of the module doc for ``program``."""
    rng = np.random.default_rng(seed)
    n = program.num_buffers
    proposals = rng.integers(0, 3, n)
    plan = whole_life_plan(program)
    out = {
        "buffers": n,
        "instructions": program.num_instructions,
        "alias_groups_gt1": int((program.group_size > 1).sum()),
        "play_steps_per_s": n / best_of(rounds, lambda: Game(program).play(proposals)),
        "legal_random_steps_per_s": n / best_of(rounds, lambda: legal_random(program, rng)),
        "heuristic_steps_per_s": n / best_of(rounds, lambda: Game(program).play(plan)),
    }
    half = Game(program)
    half.play(proposals)
    middle = Game(program)
    for a in half.actions[: n // 2].tolist():
        middle.step(a)
    snap = middle.snapshot()
    reps = 50
    out["snapshot_us"] = (
        best_of(rounds, lambda: [middle.snapshot() for _ in range(reps)]) / reps * 1e6
    )
    out["restore_us"] = (
        best_of(rounds, lambda: [middle.restore(snap) for _ in range(reps)]) / reps * 1e6
    )
    out["clone_us"] = best_of(rounds, lambda: [middle.clone() for _ in range(reps)]) / reps * 1e6
    out["observe_ms"] = best_of(rounds, lambda: observe(middle)) * 1e3
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="bert-large@op")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    program = Program.from_workload(workloads.load(args.workload), repeats=args.repeats)
    figures = measure(program, args.rounds, args.seed)
    figures |= {
        "program": program.name,
        "machine": platform.platform(),
        "python": platform.python_version(),
    }
    print(f"| {program.name} | value |\n| --- | --- |")
    for key, value in figures.items():
        print(f"| {key} | {value:,.1f} |" if isinstance(value, float) else f"| {key} | {value} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
    return figures


if __name__ == "__main__":
    main()
