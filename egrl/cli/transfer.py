"""``egrl-transfer``: zero-shot evaluation of trained GNN policies on other workloads.

    egrl-transfer RUN_DIR --targets resnet101 bert-base [--samples 16] [--which both]
    egrl-transfer pretrain --train resnet50 resnet101 --holdout bert-base \\
        --budget 2000 --seed 0 --out runs/pretrain [policy.hidden=32 learner.rollouts=4 ...]
    egrl-transfer pretrain --resume runs/pretrain

The first form evaluates every snapshot in ``RUN_DIR/policies`` (written by egrl-train
for the egrl and pg agents) on the targets and on the run's own workload, without
training, and writes ``RUN_DIR/transfer/`` (transfer.csv, transfer.png, transfer.md).
The second trains one SAC learner on several workloads (``configs/transfer/pretrain.yaml``;
trailing ``key=value`` arguments are Hydra overrides of it) and writes the same outputs to
``OUT/transfer/``; ``--resume OUT`` continues a killed pretraining run from its last
checkpoint with the config it saved. docs/transfer.md describes both.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import configs
from egrl.agents.egrl.transfer import WHICH, evaluate_run
from egrl.heap import keep_freed_memory

PRETRAIN = "pretrain"


def _print_outputs(paths: dict[str, Path]) -> None:
    print(f"zero-shot transfer results in {paths['csv'].parent}:")
    for path in paths.values():
        print(f"  {path}")
    print(paths["md"].read_text(encoding="utf-8"))


def evaluate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="egrl-transfer",
        description="Zero-shot evaluation of a run's GNN policy snapshots on other workloads "
        f"('egrl-transfer {PRETRAIN} -h' for multi-workload pretraining).",
    )
    parser.add_argument("run_dir", type=Path, help="run directory with config.yaml and policies/")
    parser.add_argument(
        "--targets", nargs="+", required=True, help="zoo names or workload files to map"
    )
    parser.add_argument("--samples", type=int, default=16, help="sampled maps besides the greedy")
    parser.add_argument("--which", choices=WHICH, default="both", help="policy of each snapshot")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampled maps")
    parser.add_argument("--out", type=Path, default=None, help="default: RUN_DIR/transfer")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    paths = evaluate_run(
        args.run_dir,
        args.targets,
        which=args.which,
        samples=args.samples,
        seed=args.seed,
        out_dir=args.out,
    )
    _print_outputs(paths)
    return 0


def pretrain_main(argv: list[str]) -> int:
    # the agents load in about a second (scipy.stats...): only this subcommand needs them
    from egrl.agents.egrl.pretrain import PretrainConfig, pretrain, read_config  # start-up time

    parser = argparse.ArgumentParser(
        prog=f"egrl-transfer {PRETRAIN}",
        description="Train one SAC learner on several workloads, then evaluate its snapshots "
        "zero-shot on held-out workloads.",
    )
    parser.add_argument("--train", nargs="+", help="training workloads")
    parser.add_argument("--holdout", nargs="*", help="held-out workloads")
    parser.add_argument("--budget", type=int, help="evaluations over all training workloads")
    parser.add_argument("--seed", type=int, help="seed of the run (default: the config's)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="output directory")
    where.add_argument(
        "--resume",
        type=Path,
        metavar="OUT",
        help="continue the pretraining run in OUT from its last checkpoint, with its own config",
    )
    parser.add_argument(
        "--config", default="pretrain", help="config under configs/transfer/ (default pretrain)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. policy.hidden=32")
    # key=value arguments are overrides wherever they stand (not workloads of --holdout).
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    args = parser.parse_args([a for a in argv if a not in overrides])
    if args.resume is not None:
        keys = ("train", "holdout", "budget", "seed")
        given = [f"--{k}" for k in keys if getattr(args, k) is not None]
        if given or overrides:
            parser.error(
                f"--resume continues a run with its own config.yaml; drop {given + overrides}"
            )
        pcfg = read_config(args.resume)
        torch.set_num_threads(max(1, pcfg.threads))
        _print_outputs(pretrain(pcfg, args.resume, resume=True))
        return 0
    for key in ("train", "holdout"):
        values = getattr(args, key)
        if values is not None:
            overrides.append(f"{key}=[{','.join(values)}]")
    for key in ("budget", "seed"):
        if getattr(args, key) is not None:
            overrides.append(f"{key}={getattr(args, key)}")
    config_dir = str(Path(configs.__file__).resolve().parent)
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose(config_name=f"transfer/{args.config}", overrides=overrides)
    pcfg = PretrainConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True))
    torch.set_num_threads(max(1, pcfg.threads))
    _print_outputs(pretrain(pcfg, args.out))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    keep_freed_memory()  # as egrl-train: large learner updates and evaluations reuse pages
    if argv and argv[0] == PRETRAIN:
        return pretrain_main(argv[1:])
    return evaluate_main(argv)


if __name__ == "__main__":
    sys.exit(main())
