"""EA on NNP-I with and without a learned screen: best speedup, samples to a level, time.

    python benchmarks/screening_ea.py --out /tmp/screening-ea
    python benchmarks/screening_ea.py --out /tmp/screening-ea --seeds 0 1 2 --budget 400 \\
        --workload resnet101 --screen screen=forest screen.pool=4 screen.search=0
    python benchmarks/screening_ea.py --summarise /tmp/screening-ea
    python benchmarks/screening_ea.py --features /tmp/screening-ea

Every run is ``egrl-train hwmodel=nnpi workload=W agent=ea budget=B seed=S threads=1``,
once as is (``screen=none``) and once with the ``--screen`` overrides, in
``OUT/none/seed<S>`` and ``OUT/screen/seed<S>``; the two variants alternate seed by seed
so that the load of a shared machine falls on both alike. A run whose directory already
holds ``best_mapping.json`` is not run again.

Reported per run (from ``metrics.csv``): the final best speedup; the paid samples at the
end of the first generation whose best speedup reached ``--level`` (0.99) of the best
final speedup of all runs (generation grain; ``None``: not reached); the run's own wall
seconds per paid measurement (``wall_s``, the generations only, without start-up) and the
share of it spent screening (``t_screening``); the median over generations of the
screen's ``screen_spearman`` and ``screen_top_quarter``; and the process's wall seconds. The
summary (medians over seeds) goes to ``OUT/summary.json`` and stdout as Markdown.

``--features OUT`` asks what the model's inputs are worth, offline: for each screened run,
a forest (the run's defaults) is fitted on the first half of its paid maps (in the order
they were paid, from the last checkpoint's screen state) and ranks the second half, with
the one-hot choices alone, with the target's description, and with the description
without its last column (NNP-I's ``latency_s``, the cost model's latency of the map as
proposed); Spearman and top-quarter share of each.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

VARIANTS = ("none", "screen")
#: the screen's quality columns of metrics.csv
QUALITY = ("screen_spearman", "screen_top_quarter")


def run_dir(out: Path, variant: str, seed: int) -> Path:
    return out / variant / f"seed{seed}"


def launch(args: argparse.Namespace, variant: str, seed: int) -> float | None:
    """Run one ``egrl-train`` (unless done); its process wall seconds (None: not run)."""
    where = run_dir(args.out, variant, seed)
    if (where / "best_mapping.json").exists():
        return None
    cmd = [
        sys.executable,
        "-m",
        "egrl.cli.train",
        "hwmodel=nnpi",
        f"workload={args.workload}",
        "agent=ea",
        f"budget={args.budget}",
        f"seed={seed}",
        "threads=1",
        "progress=false",
        f"hydra.run.dir={where}",
        *(args.screen if variant == "screen" else []),
    ]
    print(" ".join(cmd[2:]), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def read_rows(where: Path) -> list[dict]:
    with open(where / "metrics.csv", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def samples_to(rows: list[dict], level: float) -> int | None:
    """Paid samples at the end of the first generation whose best speedup reached ``level``."""
    for row in rows:
        if float(row["best_speedup"]) >= level:
            return int(row["iterations"])
    return None


def median_finite(rows: list[dict], column: str) -> float | None:
    """Median of a column's finite values over the generations (None: none)."""
    values = np.array([float(r.get(column) or "nan") for r in rows])
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else None


def summarise(out: Path, level: float) -> dict:
    """Per-run figures and medians over seeds of every run under ``out``."""
    runs = {v: {} for v in VARIANTS}
    for variant in VARIANTS:
        for where in sorted((out / variant).glob("seed*")):
            if (where / "best_mapping.json").exists():
                runs[variant][int(where.name[4:])] = read_rows(where)
    finals = [float(rows[-1]["best_speedup"]) for v in runs.values() for rows in v.values()]
    target = level * max(finals)
    times = json.loads((out / "times.json").read_text()) if (out / "times.json").exists() else {}
    table: dict = {"level": level, "best_final": max(finals), "target": target, "runs": {}}
    for variant, seeds in runs.items():
        per_seed = {}
        for seed, rows in sorted(seeds.items()):
            last = rows[-1]
            paid = int(last["iterations"])
            screening = float(last.get("t_screening") or 0.0)
            per_seed[seed] = {
                "best_speedup": float(last["best_speedup"]),
                "samples_to_target": samples_to(rows, target),
                "paid": paid,
                "proposals": int(last["proposals"]),
                "generations": len(rows),
                "ms_per_paid": 1e3 * float(last["wall_s"]) / paid,
                "screening_share": screening / float(last["wall_s"]),
                "process_s": times.get(f"{variant}/{seed}"),
                **{f"median_{c}": median_finite(rows, c) for c in QUALITY},
            }
        reached = [r["samples_to_target"] for r in per_seed.values()]
        table["runs"][variant] = {
            "per_seed": per_seed,
            "median_best_speedup": float(np.median([r["best_speedup"] for r in per_seed.values()])),
            "median_samples_to_target": float(
                np.median([np.inf if s is None else s for s in reached])
            ),
            "median_ms_per_paid": float(np.median([r["ms_per_paid"] for r in per_seed.values()])),
        }
    return table


def quality(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def markdown(table: dict) -> str:
    lines = [
        f"Best final speedup of all runs: {table['best_final']:.4f}; "
        f"level {table['level']:g} of it: {table['target']:.4f}",
        "",
        "| variant | seed | best speedup | paid samples to the level | ms per paid map "
        "| of it screening | Spearman | top quarter |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for variant, v in table["runs"].items():
        for seed, r in v["per_seed"].items():
            reached = "not reached" if r["samples_to_target"] is None else r["samples_to_target"]
            lines.append(
                f"| {variant} | {seed} | {r['best_speedup']:.4f} | {reached} "
                f"| {r['ms_per_paid']:.1f} | {100 * r['screening_share']:.0f}% "
                f"| {quality(r['median_screen_spearman'])} "
                f"| {quality(r['median_screen_top_quarter'])} |"
            )
        median = v["median_samples_to_target"]
        lines.append(
            f"| {variant} | median | {v['median_best_speedup']:.4f} | "
            f"{'not reached' if not np.isfinite(median) else f'{median:g}'} "
            f"| {v['median_ms_per_paid']:.1f} | | | |"
        )
    return "\n".join(lines)


def feature_check(out: Path, workload: str) -> str:
    """The ``--features`` table (see the module docstring) for the runs in ``out/screen``."""
    from egrl import make_env
    from egrl.checkpoint import load_state
    from egrl.screening.features import Featurizer, one_hot
    from egrl.screening.models import ForestModel
    from egrl.screening.screen import spearman, top_quarter

    env = make_env("nnpi", workload)
    featurize = Featurizer(env.target, env.num_choices)
    last = featurize.description_names[-1]
    lines = [
        f"| seed | paid maps | one-hot | + description | + description without {last} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for where in sorted((out / "screen").glob("seed*")):
        state = load_state(sorted((where / "checkpoints").glob("gen_*"))[-1])["screen"]
        maps = np.asarray(state["maps"]).astype(np.int64)
        rewards = np.asarray(state["rewards"], dtype=np.float64)
        half = len(rewards) // 2
        described = featurize(maps)
        cells = []
        for x in (one_hot(maps, env.num_choices), described, described[:, :-1]):
            model = ForestModel(seed=0)
            model.fit(x[:half], rewards[:half])
            predicted = model.predict(x[half:])
            cells.append(
                f"{spearman(predicted, rewards[half:]):.2f} / "
                f"{top_quarter(predicted, rewards[half:]):.2f}"
            )
        lines.append(f"| {where.name[4:]} | {len(rewards)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where the runs go")
    parser.add_argument("--summarise", type=Path, help="only summarise the runs there")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument("--workload", default="resnet101")
    parser.add_argument(
        "--screen", nargs="+", default=["screen=forest", "screen.pool=4", "screen.search=0"]
    )
    parser.add_argument("--level", type=float, default=0.99)
    parser.add_argument("--features", type=Path, help="the offline check of the model's inputs")
    args = parser.parse_args()
    if args.features is not None:
        print(feature_check(args.features, args.workload))
        return
    out = args.summarise or args.out
    if out is None:
        parser.error("give --out or --summarise")
    if args.summarise is None:
        out.mkdir(parents=True, exist_ok=True)
        times_file = out / "times.json"
        times = json.loads(times_file.read_text()) if times_file.exists() else {}
        load = os.getloadavg()
        for i, seed in enumerate(args.seeds):
            for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
                took = launch(args, variant, seed)
                if took is not None:
                    times[f"{variant}/{seed}"] = took
                    times_file.write_text(json.dumps(times, indent=1))
        machine = {
            "machine": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_before": load,
            "load_after": os.getloadavg(),
            "screen": args.screen,
        }
        (out / "machine.json").write_text(json.dumps(machine, indent=1))
    table = summarise(out, args.level)
    (out / "summary.json").write_text(json.dumps(table, indent=1))
    print(markdown(table))


if __name__ == "__main__":
    main()
