"""Speed of the planner's self-play (``agent=muzero``, learned dynamics, default networks
and simulations) on the programs of the TPU study, one game at a time and in batches.

For each program of ``configs/study/tpu-study.yaml`` (resnet50-op, gpt2-op-x4,
bert-base-op-x14, bert-large-op-x8) and each ``G`` of ``--games`` (1, 8, 32, 128), the
agent runs generations of ``agent.parallel_games=G`` games, at least ``--min-games``
games in all (one torch thread, BLAS limited to one thread, ``replay_size`` raised to
hold a generation's positions where ``G x N`` exceeds the default 20,000); ``before`` is
the one-game reference path (``MuZeroAgent.play_game``: ``mcts.search`` at every move,
one game per generation). Measured:

* games per minute with learning (the agent's generations end to end) and without
  (self-play alone), simulations per second of self-play;
* the split of the time: ``network`` (the torch representation at the roots, the NumPy
  dynamics and prediction), ``tree`` (the search's own work: selection, backup, noise),
  ``game`` (game steps, legal actions and encoding the observations), ``learning``
  (training steps), ``other`` (the rest: drawing moves, trajectories, paying layouts).

Prints a markdown table and writes ``benchmarks/results/planner_speed.json``.

    python benchmarks/planner_speed.py                                  # the measurement
    python benchmarks/planner_speed.py --programs resnet50-op --games 1 32 --min-games 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from threadpoolctl import threadpool_limits

import egrl.agents.muzero.agent as agent_module
import egrl.agents.muzero.mcts as mcts_module
from egrl import make_env
from egrl.agents.muzero import MuZeroAgent
from egrl.agents.muzero.encode import Encoder
from egrl.agents.muzero.networks import NumpyHeads
from egrl.config import AgentConfig, TrainConfig
from hwmodels.tpu.game import Game

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "configs" / "study" / "tpu-study.yaml"
OUT = ROOT / "benchmarks" / "results" / "planner_speed.json"
PHASES = ("network", "tree", "game", "learning", "other")


def study_programs() -> dict[str, tuple[str, int]]:
    """``{problem: (workload, repeats)}`` of the TPU study."""
    plan = OmegaConf.load(STUDY)
    out = {}
    for name in plan.problems:
        over = dict(o.split("=", 1) for o in plan.problem_overrides[name])
        out[name] = (over["workload"], int(over.get("hwmodel.params.repeats", 1)))
    return out


class Clock:
    """Wall time per phase, from wrappers put around the functions of each phase."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(("network", "search", "network_in_search", "game"), 0.0)
        self.searching = False
        self.simulations = 0

    def wrap(self, owner, name: str, phase: str) -> None:
        fn = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                if phase == "search":
                    clock.searching = True
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                clock.totals[phase] += spent
                if phase == "search":
                    clock.searching = False
                elif phase == "network" and clock.searching:
                    clock.totals["network_in_search"] += spent

        setattr(owner, name, timed)
        self.patched.append((owner, name, fn))

    @contextmanager
    def installed(self):
        self.patched: list = []
        for owner, name in ((agent_module, "represent_batch"), (mcts_module, "represent")):
            self.wrap(owner, name, "network")
        for name in ("dynamics", "predict", "dynamics_batch", "predict_batch"):
            self.wrap(NumpyHeads, name, "network")
        for owner, name in ((agent_module, "batched_search"), (agent_module, "search")):
            self.wrap(owner, name, "search")
        self.wrap(Encoder, "__call__", "game")
        self.wrap(Encoder, "batch", "game")
        self.wrap(Game, "step", "game")
        self.wrap(Game, "legal_actions", "game")
        try:
            yield self
        finally:
            for owner, name, fn in reversed(self.patched):
                setattr(owner, name, fn)


class OneGameAgent(MuZeroAgent):
    """The one-game reference path (``play_game``: ``mcts.search`` at every move)."""

    def play_games(self, count: int, temperature: float):
        return [self.play_game(temperature) for _ in range(count)]


def measure(problem: str, workload: str, repeats: int, games: int, args) -> dict:
    """One configuration: ``games`` per generation (0: the one-game reference path)."""
    env = make_env("tpu-cmem", workload, repeats=repeats)
    n = env.target.program.num_buffers
    g = max(games, 1)
    options = {"parallel_games": g, "simulations": args.simulations}
    if args.updates_per_move is not None:
        options["updates_per_move"] = args.updates_per_move
    if g * n > 20000:
        options["replay_size"] = g * n
    generations = max(1, math.ceil(args.min_games / g))
    cfg = TrainConfig(
        seed=args.seed,
        budget=generations * g,
        progress=False,
        agent=AgentConfig(name="muzero", options=options),
    )
    cls = OneGameAgent if games == 0 else MuZeroAgent
    agent = cls(env, cfg)
    clock = Clock()
    learn = 0.0
    train = agent.train

    def timed_train(updates: int):
        nonlocal learn
        start = time.perf_counter()
        try:
            return train(updates)
        finally:
            learn += time.perf_counter() - start

    agent.train = timed_train
    with clock.installed(), threadpool_limits(1, user_api="blas"):
        start = time.perf_counter()
        agent.run()
        wall = time.perf_counter() - start
    rows = agent.rows
    searched = sum(int(r["searched_moves"]) for r in rows)
    moves = sum(int(r["moves"]) for r in rows)
    t = clock.totals
    split = {
        "network": t["network"],
        "tree": t["search"] - t["network_in_search"],
        "game": t["game"],
        "learning": learn,
    }
    split["other"] = wall - sum(split.values())
    play = wall - learn
    sims = searched * args.simulations
    return {
        "problem": problem,
        "buffers": n,
        "path": "before" if games == 0 else f"G={games}",
        "parallel_games": g,
        "games": agent.games,
        "moves": moves,
        "searched_moves": searched,
        "wall_s": wall,
        "games_per_min": 60 * agent.games / wall,
        "selfplay_s_per_game": play / agent.games,
        "learning_s_per_game": learn / agent.games,
        "selfplay_games_per_min": 60 * agent.games / play,
        "simulations_per_s": sims / play,
        "train_steps": agent.train_steps,
        **{f"{k}_s": v for k, v in split.items()},
        **{f"{k}_frac": v / wall for k, v in split.items()},
    }


def table(results: list[dict]) -> str:
    head = (
        "| program | path | games | games/min | self-play games/min | sims/s | "
        + " | ".join(PHASES)
        + " |"
    )
    lines = [head, "| " + " | ".join(["---"] * (6 + len(PHASES))) + " |"]
    for r in results:
        split = " | ".join(f"{100 * r[f'{k}_frac']:.0f}%" for k in PHASES)
        lines.append(
            f"| {r['problem']} | {r['path']} | {r['games']} | {r['games_per_min']:.1f} | "
            f"{r['selfplay_games_per_min']:.1f} | {r['simulations_per_s']:,.0f} | {split} |"
        )
    return "\n".join(lines)


def write(args: argparse.Namespace, load: tuple, results: list[dict]) -> None:
    """The JSON of ``results`` so far, with the machine and the arguments."""
    out = {
        "machine": platform.platform(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "load_average": {"start": load, "end": os.getloadavg()},
        "args": vars(args),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")


def main(argv: list[str] | None = None) -> list[dict]:
    programs = study_programs()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", nargs="+", default=list(programs), choices=list(programs))
    ap.add_argument("--games", nargs="+", type=int, default=[1, 8, 32, 128])
    ap.add_argument("--min-games", type=int, default=8, help="games per configuration at least")
    ap.add_argument("--simulations", type=int, default=16, help="agent.simulations")
    ap.add_argument(
        "--updates-per-move",
        type=float,
        default=None,
        help="agent.updates_per_move (default: the agent's, 0.1)",
    )
    ap.add_argument(
        "--max-positions",
        type=int,
        default=2_000_000,
        help="skip a batch size whose generation holds more positions (memory)",
    )
    ap.add_argument("--no-reference", action="store_true", help="leave out the 'before' path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT), help="the JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()
    results = []
    for problem in args.programs:
        workload, repeats = programs[problem]
        sizes = ([] if args.no_reference else [0]) + list(args.games)
        n = make_env("tpu-cmem", workload, repeats=repeats).target.program.num_buffers
        for games in sizes:
            if games * n > args.max_positions:
                print(f"{problem} G={games}: skipped ({games} x {n} positions)")
                continue
            r = measure(problem, workload, repeats, games, args)
            results.append(r)
            print(table([r]).splitlines()[-1], flush=True)
            write(args, load, results)  # what is measured so far survives a stopped run
    print(table(results))
    base = {r["problem"]: r for r in results if r["path"] == "before"}
    for r in results:
        if r["problem"] in base and r["path"] != "before":
            b = base[r["problem"]]
            r["gain_games_per_min"] = r["games_per_min"] / b["games_per_min"]
            r["gain_selfplay_games_per_min"] = (
                r["selfplay_games_per_min"] / (b["selfplay_games_per_min"])
            )
            print(
                f"{r['problem']} {r['path']}: x{r['gain_games_per_min']:.1f} games/min, "
                f"x{r['gain_selfplay_games_per_min']:.1f} self-play games/min"
            )
    write(args, load, results)
    return results


if __name__ == "__main__":
    main()
