"""Diagnose the SAC learner of ``egrl-train``: entropy, temperature, Q spread, buffer.

Runs one ``egrl-train`` configuration in-process (``agent=pg`` or ``agent=egrl``, any
Hydra overrides) and, every ``--every`` learner updates, writes one CSV row about the
lead learner:

* ``entropy_sum`` / ``entropy_unit`` / ``entropy_unit_min``: the actor's entropy
  ``-sum_c p log p`` summed over the ``N x H`` decisions, its mean and its smallest value;
  ``saturated``: the share of decisions with entropy below 1e-3;
* ``alpha`` and ``alpha_decision``: the temperature and the weight of one decision's
  entropy in the actor loss (``alpha / (N H)`` when the loss averages the entropy over
  decisions, ``alpha`` when it sums it);
* ``q_spread``: for the greedy map ``a*``, ``max_c - min_c min_j Q_j(s, a* with decision
  (n, h) set to c)``, averaged over decisions (one critic pass over ``N H C`` maps): what
  one decision's choice is worth to the critic, to compare with ``alpha_decision``;
* ``reward_mean`` / ``reward_std`` / ``valid_share``: the buffer's rewards and the share of
  valid maps (reward > 0) in it; ``greedy_valid``: whether the learner's greedy map was
  valid at the last clean rollout.

Example (the numbers in docs/learner.md)::

    python benchmarks/learner_diagnosis.py --out /tmp/pg.csv agent=pg workload=resnet18 \
        budget=1000 learner=sac-paper
    python benchmarks/learner_diagnosis.py --summarise /tmp/pg.csv ...

``--summarise`` prints one line per CSV: the first update at which every decision was
saturated, and over the second half of the run the mean (and smallest) entropy of one
decision, the saturated share, ``alpha_decision``, ``q_spread``; the share of rows whose
greedy map was valid; the buffer's final valid share.
"""

from __future__ import annotations

import argparse
import csv
import logging
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from egrl.agents import make_agent, train_config
from egrl.agents.egrl.sac import SACDiscrete, masked_log_probs
from egrl.env import make_env

log = logging.getLogger("learner_diagnosis")
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@torch.no_grad()
def q_spread(learner: SACDiscrete, graph) -> float:
    """Mean over decisions of ``max_c - min_c`` of ``min_j Q_j`` with one decision changed."""
    x, edge_index = graph.x, graph.edge_index
    probs, _ = masked_log_probs(learner.actor(x, edge_index), learner.mask)  # [N, H, C]
    greedy = probs.argmax(dim=-1)  # [N, H]
    n, h, c = probs.shape
    maps = greedy.expand(n * h * c, n, h).clone()  # [N H C, N, H]
    rows = torch.arange(n * h * c)
    maps[rows, rows // (h * c), (rows // c) % h] = rows % c
    one_hot = torch.nn.functional.one_hot(maps, c).float() * learner.mask
    q1, q2 = learner.critic(x, edge_index, one_hot)
    q = torch.min(q1, q2).view(n, h, c).masked_fill(~learner.mask, float("nan"))
    spread = np.nanmax(q.numpy(), axis=-1) - np.nanmin(q.numpy(), axis=-1)  # [N, H]
    return float(spread.mean())


def snapshot(trainer, learner: SACDiscrete) -> dict:
    """One diagnosis row for ``learner`` on the trainer's graph and buffer."""
    graph = trainer.graph
    with torch.no_grad():
        probs, log_probs = masked_log_probs(learner.actor(graph.x, graph.edge_index), learner.mask)
    per_decision = -(probs * log_probs).sum(dim=-1)  # [N, H]
    decisions = per_decision.numel()
    rewards = trainer.buffer.rewards[: len(trainer.buffer)]
    summed = getattr(learner.config, "entropy_reduction", "mean") == "sum"
    return {
        "updates": learner.num_updates,
        "iterations": trainer.ledger.iterations,
        "entropy_sum": float(per_decision.sum()),
        "entropy_unit": float(per_decision.mean()),
        "entropy_unit_min": float(per_decision.min()),
        "saturated": float((per_decision < 1e-3).float().mean()),
        "alpha": learner.alpha,
        "alpha_decision": learner.alpha if summed else learner.alpha / decisions,
        "q_spread": q_spread(learner, graph),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "valid_share": float((rewards > 0).mean()),
    }


def summarise(path: str) -> str:
    """One line about a diagnosis CSV (see the module docstring)."""
    with open(path, newline="") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    late = [r for r in rows if r["updates"] >= rows[-1]["updates"] / 2]

    def mean(key: str, of: list[dict]) -> float:
        return float(np.nanmean([r[key] for r in of]))

    collapsed = [r["updates"] for r in rows if r["saturated"] >= 0.99]
    return (
        f"{Path(path).stem}: {int(rows[-1]['updates'])} updates; all saturated from update "
        f"{int(collapsed[0]) if collapsed else '-'}; second half: entropy/decision "
        f"{mean('entropy_unit', late):.3g} (min {min(r['entropy_unit'] for r in late):.3g}), "
        f"saturated {mean('saturated', late):.2f}, alpha_decision "
        f"{mean('alpha_decision', late):.3g}, q_spread {mean('q_spread', late):.3g}; "
        f"greedy valid {mean('greedy_valid', rows):.2f}; buffer valid {rows[-1]['valid_share']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summarise", nargs="+", metavar="CSV", help="summarise diagnosis CSVs")
    parser.add_argument("--out", help="CSV of diagnosis rows")
    parser.add_argument("--every", type=int, default=25, help="learner updates between rows")
    parser.add_argument("overrides", nargs="*", help="egrl-train overrides (key=value)")
    args = parser.parse_args()
    if args.summarise:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        for path in args.summarise:
            log.info(summarise(path))
        return
    if not args.out:
        parser.error("--out is required to run")
    with initialize_config_dir(str(CONFIGS), version_base=None):
        cfg = compose("train", overrides=["progress=false", *args.overrides])
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    OmegaConf.set_struct(cfg, False)
    plain = {k: v for k, v in cfg.items() if k not in ("hwmodel", "workload", "resume", "hydra")}
    train_cfg = train_config(OmegaConf.create(plain))
    torch.set_num_threads(max(1, int(cfg.threads)))
    params = OmegaConf.to_container(cfg.hwmodel, resolve=True).get("params") or {}
    env = make_env(
        cfg.hwmodel.name, cfg.workload.name, cfg.invalid_reward_scale, cfg.reward, **params
    )
    trainer = make_agent(env, train_cfg, None)
    learner = trainer.portfolio.learners[0]
    rows: list[dict] = []
    updates = trainer._learner_updates
    last = {"row": -args.every, "greedy_valid": float("nan"), "burn_in": False}

    def watched(env_steps: int) -> dict:
        if not last["burn_in"] and len(trainer.buffer) >= train_cfg.agent.learner.burn_in:
            last["burn_in"] = True
            counts = trainer.buffer.counts_by_source()
            valid = float((trainer.buffer.rewards[: len(trainer.buffer)] > 0).mean())
            log.info("burn-in buffer: %s, valid share %.2f", counts, valid)
        out = updates(env_steps)
        if learner.num_updates - last["row"] >= args.every:
            last["row"] = learner.num_updates
            row = snapshot(trainer, learner)
            row["greedy_valid"] = last["greedy_valid"]
            rows.append(row)
        return out

    rollouts = trainer._learner_rollouts

    def watched_rollouts() -> dict:
        out = rollouts()
        if "learner_clean_reward" in out:
            last["greedy_valid"] = float(out["learner_clean_reward"] > 0)
        return out

    trainer._learner_updates = watched
    trainer._learner_rollouts = watched_rollouts
    best = trainer.run()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    greedy = np.array([r["greedy_valid"] for r in rows], dtype=float)
    log.info(
        "best speedup %.4f; %d updates; final entropy (sum) %.3g; greedy map valid in %.0f%% of rows",
        best.speedup,
        learner.num_updates,
        rows[-1]["entropy_sum"],
        100 * np.nanmean(greedy),
    )


if __name__ == "__main__":
    main()
