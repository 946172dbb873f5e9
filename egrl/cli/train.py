"""``egrl-train``: one Hydra-configured run (``-m`` for sweeps).

    egrl-train                                   # EGRL on resnet50, NNP-I model, seed 0
    egrl-train workload=bert-base seed=3 budget=2000
    egrl-train -m seed=0,1,2,3,4                 # a sweep
    egrl-train resume=runs/resnet50/egrl/seed0-20261121-101500
    egrl-train -m seed=0,1,2,3,4 hydra.sweep.dir=SWEEP continue_runs=true   # finish a sweep

The run directory (Hydra's output directory, or ``resume``'s) receives the resolved
config, ``metrics.csv`` (one row per generation), ``best_mapping.json``, ``checkpoints/``
and ``speedup.png``.

``continue_runs=true`` makes a re-launched sweep pick up where a killed one stopped: a
run whose directory already holds a run of the same config resumes from its last
checkpoint (a finished run adds nothing), the others start.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from egrl.agents import SearchAgent, make_agent
from egrl.config import from_mapping
from egrl.env import make_env
from egrl.experiments.runs import flatten

log = logging.getLogger("egrl.train")

RESOLVED_CONFIG = "config.yaml"
# Keys that say how to run, not what: a continued run may differ from its saved config here.
RUNTIME_KEYS = ("continue_runs", "progress", "resume")

# ``hydra.run.dir`` is the resumed run's directory when ``resume`` is set.
if not OmegaConf.has_resolver("first_set"):
    OmegaConf.register_new_resolver(
        "first_set", lambda *values: next((v for v in values if v), None)
    )


def config_differences(saved: DictConfig, cfg: DictConfig) -> list[str]:
    """Dotted keys whose resolved values differ between two configs (runtime keys aside)."""
    a, b = (
        flatten(
            {
                k: v
                for k, v in OmegaConf.to_container(c, resolve=True).items()
                if k not in RUNTIME_KEYS
            }
        )
        for c in (saved, cfg)
    )
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def continues_existing_run(cfg: DictConfig, run_dir: Path) -> bool:
    """True if ``continue_runs`` is on and ``run_dir`` already holds a run of this config.

    Raises ``ValueError`` naming the differing keys if the run there has another config.
    """
    saved = run_dir / RESOLVED_CONFIG
    if not cfg.get("continue_runs") or not saved.exists():
        return False
    diff = config_differences(OmegaConf.load(saved), cfg)
    if diff:
        raise ValueError(
            f"continue_runs: {run_dir} holds a run with another config "
            f"(differing keys: {', '.join(diff)}); use another output directory"
        )
    log.info("continue_runs: %s already holds this run; resuming it", run_dir)
    return True


def run(cfg: DictConfig, run_dir: Path) -> SearchAgent:
    """Build the environment and the agent from ``cfg`` and run it in ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    resume = bool(cfg.get("resume")) or continues_existing_run(cfg, run_dir)
    if resume:
        saved = run_dir / RESOLVED_CONFIG
        if not saved.exists():
            raise FileNotFoundError(f"cannot resume {run_dir}: {RESOLVED_CONFIG} is missing")
        cfg = OmegaConf.load(saved)
        log.info("resuming with the run's own config %s", saved)
    else:
        (run_dir / RESOLVED_CONFIG).write_text(
            OmegaConf.to_yaml(cfg, resolve=True), encoding="utf-8"
        )
    train_cfg = from_mapping(
        {k: v for k, v in cfg.items() if k not in ("hwmodel", "workload", "resume")}
    )
    torch.set_num_threads(max(1, int(cfg.threads)))
    params = OmegaConf.to_container(cfg.hwmodel, resolve=True).get("params") or {}
    env = make_env(
        hwmodel=cfg.hwmodel.name,
        workload=cfg.workload.name,
        invalid_reward_scale=cfg.invalid_reward_scale,
        **params,
    )
    trainer = make_agent(env, train_cfg, run_dir)
    if resume and not trainer.resume():
        log.warning("no checkpoint in %s: starting from scratch", run_dir)
        (run_dir / "metrics.csv").unlink(missing_ok=True)  # rows of the killed attempt
    trainer.run()
    return trainer


@hydra.main(version_base="1.3", config_path="../../configs", config_name="train")
def main(cfg: DictConfig) -> float:
    run_dir = Path(cfg.resume) if cfg.get("resume") else Path(HydraConfig.get().runtime.output_dir)
    trainer = run(cfg, run_dir)
    best = trainer.best
    print(
        f"best speedup over the compiler: {best.speedup:.4f} "
        f"(latency {best.latency_s * 1e3:.4f} ms, found at iteration {best.iteration}); "
        f"results in {run_dir}"
    )
    return best.speedup


if __name__ == "__main__":
    main()
