"""Byte-identity of runs across a change of code: every agent on every target, hashed.

    python benchmarks/identical_runs.py run --out /tmp/before        # on the old code
    python benchmarks/identical_runs.py run --out /tmp/after         # on the new code
    python benchmarks/identical_runs.py compare /tmp/before /tmp/after

    python benchmarks/identical_runs.py run --out /tmp/h0 --hash-seed 0  # one code,
    python benchmarks/identical_runs.py run --out /tmp/h1 --hash-seed 1  # two processes'
    python benchmarks/identical_runs.py compare /tmp/h0 /tmp/h1           # string hashes

``run`` makes one small ``egrl-train`` run per case below (every agent on the targets it
runs on: NNP-I, multi-chip, the TPU game, banked, the external example chip; zero-shot and
fine-tuning from the EGRL run's policies; a screening run; Optuna's samplers and SMAC,
which need the test extra; resumed runs, each resume a new process), each with
``record_evaluations=true``, and writes ``hashes.json``: the SHA-256 of

- ``metrics.csv`` without its timing columns (``wall_s``, ``t_*`` and rates ``*_per_s``),
- ``best_mapping.json``, with the output folder's path written as ``{out}`` and its
  wall-clock values (``"wall_s"``) left out,
- ``evaluations.csv`` without its wall-clock column (``wall_s``),

per case. ``compare`` hashes both folders' run directories again (so that a change of the
hashing applies to old folders too), prints the cases whose files differ and exits 1 if
any does. ``--hash-seed`` runs every case with that ``PYTHONHASHSEED``: two folders made
with different ones show whether a run depends on the process's string hashes (a set's
order); a resumed case then resumes with the next hash seed, so that its replay crosses
them. The run directories stay under ``--out`` (they also serve to check that the new
code resumes and reads the old ones).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a wall-clock value in best_mapping.json (the optimum's solver time)
WALL_S = re.compile(r'("wall_s": )[-+0-9.eE]+')
CHIP = ROOT / "examples" / "external_chip.py"

#: a Graph U-Net and learner small enough for seconds-long runs
SMALL = [
    "policy.hidden=16",
    "policy.out=16",
    "policy.depth=2",
    "policy.heads=2",
    "population.size=6",
    "learner.batch_size=8",
    "learner.burn_in=8",
]
#: model-based optimisation at a small depth: rounds of 10 maps, 200 model calls each
MBO = ["agent.depth=200", "agent.batch=10", "agent.steps=4"]
NNPI = ["hwmodel=nnpi", "workload=resnet50", "budget=60"]
# mcm runs default to reward=repaired now; these cases keep the reward they were made with
MCM = ["hwmodel=mcm", "reward=egrl", "workload=resnet50", "budget=40"]
TPU = ["hwmodel=tpu-cmem", "workload=resnet18", "budget=30"]
BANKED = ["hwmodel=banked", "workload=resnet18", "budget=40"]
EXTERNAL = [
    "hwmodel=external",
    f"hwmodel.params.command='{sys.executable} {CHIP} --sram-kib 1 --llc-kib 8'",
    "workload=resnet18",
    "budget=30",
]

#: case name -> egrl-train overrides; ``{out}`` is replaced by the output folder
CASES: dict[str, list[str]] = {
    "nnpi-egrl": [*NNPI, "agent=egrl", *SMALL, "snapshot_every=2"],
    "nnpi-ea": [*NNPI, "agent=ea", *SMALL],
    "nnpi-pg": [*NNPI, "agent=pg", *SMALL],
    "nnpi-sa": [*NNPI, "agent=sa"],
    "nnpi-ga": [*NNPI, "agent=ga"],
    "nnpi-random": [*NNPI, "agent=random"],
    "nnpi-greedy-dp": [*NNPI, "agent=greedy-dp"],
    "nnpi-nevergrad": [*NNPI, "agent=nevergrad"],
    "nnpi-optuna-tpe": [*NNPI, "agent=optuna", "agent.sampler=tpe"],
    "nnpi-optuna-cmaes": [*NNPI, "agent=optuna", "agent.sampler=cmaes"],
    "nnpi-smac": [*NNPI, "agent=smac"],
    "nnpi-optimum": ["hwmodel=nnpi", "workload=resnet18", "agent=optimum", "budget=5"],
    "nnpi-zero-shot": [*NNPI, "agent=zero-shot", "agent.policy={out}/nnpi-egrl"],
    "nnpi-egrl-init-from": [*NNPI, "agent=egrl", "init_from={out}/nnpi-egrl", *SMALL],
    "nnpi-ea-forest": [
        *NNPI,
        "agent=ea",
        *SMALL,
        "screen=forest",
        "screen.pool=4",
        "screen.search=0",
    ],
    "nnpi-egrl-critic": [
        *NNPI,
        "agent=egrl",
        *SMALL,
        "screen=critic",
        "screen.pool=2",
        "screen.warmup=20",
    ],
    "nnpi-egrl-start-native": [*NNPI, "agent=egrl", *SMALL, "agent.start=native"],
    "mcm-egrl": [*MCM, "agent=egrl", *SMALL],
    "mcm-sa": [*MCM, "agent=sa"],
    "mcm-ea": [*MCM, "agent=ea", *SMALL],
    "tpu-muzero": [*TPU, "agent=muzero", "agent.hidden=16", "agent.latent=8"],
    "tpu-es": [*TPU, "agent=es"],
    "tpu-random-legal": [*TPU, "agent=random-legal"],
    "tpu-egrl": [*TPU, "agent=egrl", *SMALL],
    "banked-egrl": [*BANKED, "agent=egrl", *SMALL],
    "banked-sa": [*BANKED, "agent=sa"],
    "external-ea": [*EXTERNAL, "agent=ea", *SMALL],
    "external-sa": [*EXTERNAL, "agent=sa"],
    "nnpi-mbo": [*NNPI, "agent=mbo", *MBO],
    "mcm-mbo": [*MCM, "agent=mbo", *MBO],
    "external-mbo": [*EXTERNAL, "agent=mbo", *MBO],
}
#: cases run twice: first to ``budget_first`` paid maps, then resumed to the case's budget
RESUMED = {
    "nnpi-egrl-resumed": ("nnpi-egrl", 30),
    "nnpi-sa-resumed": ("nnpi-sa", 30),
    "nnpi-smac-resumed": ("nnpi-smac", 40),
    "nnpi-mbo-resumed": ("nnpi-mbo", 30),
}


def train(overrides: list[str], run_dir: Path, hash_seed: str | None = None) -> float:
    """One ``egrl-train`` run into ``run_dir`` (``PYTHONHASHSEED=hash_seed`` if given, else
    this process's environment); its wall seconds."""
    argv = [
        sys.executable,
        "-m",
        "egrl.cli.train",
        *overrides,
        "record_evaluations=true",
        "progress=false",
        "threads=1",
        "checkpoint_every=2",
        f"hydra.run.dir={run_dir}",
    ]
    start = time.perf_counter()
    env = {**os.environ, "PYTHONHASHSEED": hash_seed} if hash_seed is not None else None
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{run_dir.name}: egrl-train failed\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def csv_without(path: Path, drop) -> str:
    """The CSV at ``path`` without the columns for which ``drop(name)`` is true."""
    rows = list(csv.reader(path.open(newline="")))
    keep = [i for i, name in enumerate(rows[0]) if not drop(name)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep])
    return out.getvalue()


def is_timing(column: str) -> bool:
    """A wall-clock column of metrics.csv: ``wall_s``, a phase's ``t_*``, a rate ``*_per_s``."""
    return column == "wall_s" or column.startswith("t_") or column.endswith("_per_s")


def digests(run_dir: Path) -> dict[str, str]:
    """SHA-256 of the run's deterministic outputs (timing columns left out, the output
    folder's path written as ``{out}``)."""

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    out = {
        "metrics.csv": sha(csv_without(run_dir / "metrics.csv", is_timing)),
        "best_mapping.json": sha(
            WALL_S.sub(
                r"\1null",
                (run_dir / "best_mapping.json").read_text().replace(str(run_dir.parent), "{out}"),
            )
        ),
    }
    evaluations = run_dir / "evaluations.csv"
    if evaluations.exists():
        out["evaluations.csv"] = sha(csv_without(evaluations, lambda c: c == "wall_s"))
    return out


def run_all(out: Path, only: list[str] | None, hash_seed: str | None = None) -> None:
    cases = {k: v for k, v in CASES.items() if not only or k in only}
    made = [n for n in [*cases, *RESUMED] if (not only or n in only) and (out / n).exists()]
    if made:  # a second run into a case's folder would append to its files
        raise SystemExit(f"{out} already holds runs of {', '.join(made)}: choose a new --out")
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for name, overrides in cases.items():
        run_dir = out / name
        seconds = train([o.replace("{out}", str(out)) for o in overrides], run_dir, hash_seed)
        results[name] = digests(run_dir)
        print(f"{name}: {seconds:.1f} s", flush=True)
    for name, (base, first) in RESUMED.items():
        if only and name not in only:
            continue
        run_dir = out / name
        overrides = [o for o in CASES[base] if not o.startswith("budget=")]
        budget = next(o for o in CASES[base] if o.startswith("budget="))
        seconds = train([*overrides, f"budget={first}"], run_dir, hash_seed)
        resume_seed = None if hash_seed is None else str(int(hash_seed) + 1)
        seconds += train([*overrides, budget, f"resume={run_dir}"], run_dir, resume_seed)
        results[name] = digests(run_dir)
        print(f"{name}: {seconds:.1f} s", flush=True)
    hashes = out / "hashes.json"
    if only and hashes.exists():  # the other cases' hashes stay
        results = {**json.loads(hashes.read_text()), **results}
    hashes.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


def rehash(folder: Path) -> dict[str, dict]:
    """The digests of every case under ``folder`` (the cases its ``hashes.json`` names)."""
    cases = json.loads((folder / "hashes.json").read_text())
    return {name: digests(folder / name) for name in cases}


def compare(before: Path, after: Path) -> int:
    old, new = rehash(before), rehash(after)
    differ = 0
    for name in sorted(set(old) | set(new)):
        if old.get(name) == new.get(name):
            print(f"identical  {name} ({', '.join(sorted(new[name]))})")
        else:
            differ += 1
            a, b = old.get(name, {}), new.get(name, {})
            files = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            print(f"DIFFERENT  {name}: {', '.join(files)}")
    print(f"{len(set(old) | set(new)) - differ} identical, {differ} different")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="make every case's run and write hashes.json")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--only", nargs="*", help="case names (default: all)")
    run.add_argument("--hash-seed", help="PYTHONHASHSEED of every run (default: inherited)")
    cmp = sub.add_parser("compare", help="compare two folders' hashes.json")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.cmd == "run":
        run_all(args.out, args.only, args.hash_seed)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
