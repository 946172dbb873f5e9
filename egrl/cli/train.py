"""``egrl-train``: one Hydra-configured run (``-m`` for sweeps).

    egrl-train                                   # EGRL on resnet50, NNP-I model, seed 0
    egrl-train workload=bert-base seed=3 budget=2000
    egrl-train workload=path/to/model.onnx       # your own model (.onnx, .json, .json.gz)
    egrl-train -m seed=0,1,2,3,4                 # a sweep
    egrl-train resume=runs/nnpi/resnet50/egrl/seed0-20261121-101500 [budget=6000]
    egrl-train -m seed=0,1,2,3,4 hydra.sweep.dir=SWEEP continue_runs=true   # finish a sweep

The run directory (Hydra's output directory, or ``resume``'s) receives the resolved
config, ``metrics.csv`` (one row per generation), ``best_mapping.json``, ``checkpoints/``
and ``speedup.png``.

``continue_runs=true`` makes a re-launched sweep pick up where a killed one stopped: a
run whose directory already holds a run of the same config resumes from its last
checkpoint (a finished run adds nothing), the others start.

Before anything is made, ``egrl.cli.checks`` refuses a value out of range, a workload
that cannot be loaded or a resume that cannot continue, with one line and exit status 2.
A resumed run keeps its saved config except the keys of ``egrl.cli.resume.RESUMABLE_KEYS``
typed next to ``resume``, which are applied and saved. The fatal error of a failed run
is logged, with its traceback, to ``train.log`` in the run directory.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import workloads
from egrl import deploy
from egrl.agents import SearchAgent, make_agent
from egrl.checkpoint import CheckpointError
from egrl.cli.build import env_from_config, hw_params, train_config
from egrl.cli.checks import PROG, USAGE_ERROR, exit_on, group_problems, section_problems
from egrl.cli.overrides import forced_section_values, rewrite_workload_paths, typed_keys
from egrl.cli.resume import (
    ResumeError,
    apply_changes,
    own_sections_only,
    resume_changes,
    saved_config,
    with_resolved_reward,
    with_saved_determinism,
    with_screen_of_its_time,
)
from egrl.heap import keep_freed_memory
from egrl.loggers import make_loggers
from egrl.rundir import RunDir, workload_label
from egrl.runs import flatten
from egrl.runtime import RuntimeConfig, TargetSpec, make_runtime
from egrl.units import format_latency
from egrl.validation import ConfigError
from policies.snapshot import PolicyError

log = logging.getLogger("egrl.train")

# Keys that say how to run, not what: a continued run may differ from its saved config here
# (``runtime``: where maps are measured, ``logger``: what records the run; runs made
# before those groups existed have none;
# ``record_evaluations``: what is written, not searched; a continued run keeps its own).
RUNTIME_KEYS = ("continue_runs", "logger", "progress", "record_evaluations", "resume", "runtime")
# Errors that report a mistake in what the user typed, not a bug.
USER_ERRORS = (ConfigError, ResumeError, CheckpointError, PolicyError, workloads.WorkloadError)

# ``hydra.run.dir`` is the resumed run's directory when ``resume`` is set.
if not OmegaConf.has_resolver("first_set"):
    OmegaConf.register_new_resolver(
        "first_set", lambda *values: next((v for v in values if v), None)
    )


if not OmegaConf.has_resolver("workload_label"):
    OmegaConf.register_new_resolver("workload_label", workload_label)


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

    Raises :class:`ResumeError` naming the differing keys if the run there has another config.
    """
    files = RunDir(run_dir)
    if not cfg.get("continue_runs") or not files.config.exists():
        return False
    saved = own_sections_only(with_screen_of_its_time(files.config_node()))
    mine = with_saved_determinism(own_sections_only(cfg), saved)
    diff = config_differences(with_resolved_reward(saved), with_resolved_reward(mine))
    if diff:
        raise ResumeError(
            f"continue_runs: {run_dir} holds a run with another config "
            f"(differing keys: {', '.join(diff)}); use another output directory"
        )
    log.info("continue_runs: %s already holds this run; resuming it", run_dir)
    return True


def resumed_config(cfg: DictConfig, run_dir: Path, typed: Sequence[str]) -> DictConfig:
    """The saved config of the run in ``run_dir`` with the typed resumable keys applied.

    :func:`run` writes it back to ``config.yaml``; see
    :func:`egrl.cli.resume.resume_changes` for what is refused.
    """
    saved = saved_config(run_dir)
    changes = resume_changes(saved, cfg, typed)
    if not changes:
        log.info("resuming with the run's own config %s", RunDir(run_dir).config)
        return saved
    for key, (old, new) in changes.items():
        log.info("resume: %s %s -> %s", key, old, new)
    return apply_changes(saved, changes)


def run(cfg: DictConfig, run_dir: Path, typed: Sequence[str] = ()) -> SearchAgent:
    """Build the environment and the agent from ``cfg`` and run it in ``run_dir``.

    ``typed`` lists the keys given on the command line; on resume, those of
    :data:`egrl.cli.resume.RESUMABLE_KEYS` that differ from the saved config are applied.
    """
    continuing = not cfg.get("resume") and continues_existing_run(cfg, run_dir)
    resume = bool(cfg.get("resume")) or continuing
    if resume:
        runtime, logger = cfg.get("runtime"), cfg.get("logger")
        # continue_runs has found the whole saved config equal to this one (where maps are
        # measured and what records them aside): no typed key (a preset such as
        # experiment=compare included) changes it, and the runtime and logger are this
        # command's
        cfg = resumed_config(cfg, run_dir, () if continuing else typed)
        if continuing and runtime is not None:
            cfg.runtime = runtime
        if continuing and logger is not None:
            cfg.logger = logger
    train_cfg = train_config(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, int(cfg.threads)))
    keep_freed_memory()  # before the agent's arrays: large learner updates reuse pages
    params = hw_params(cfg)
    env = env_from_config(cfg)
    trainer = make_agent(env, train_cfg, run_dir)
    if resume and not trainer.resume():
        log.warning("no checkpoint in %s: starting from scratch", run_dir)
        RunDir(run_dir).clear_metrics()  # rows of the killed attempt
    if trainer.ledger.iterations > train_cfg.budget:
        raise ResumeError(
            f"budget={train_cfg.budget} is invalid: the run has already made "
            f"{trainer.ledger.iterations} iterations (expected an integer >= {trainer.ledger.iterations})"
        )
    RunDir(run_dir).write_config(own_sections_only(cfg))
    runtime_cfg = OmegaConf.to_container(cfg, resolve=True).get("runtime")
    spec = TargetSpec(cfg.hwmodel.name, params, env.workload)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    loggers = make_loggers(resolved.get("logger"), run_dir, resolved)
    with make_runtime(RuntimeConfig.from_mapping(runtime_cfg), env, spec) as runtime:
        trainer.ledger.use_runtime(runtime)
        trainer.run(callbacks=loggers)
    return trainer


def run_job(cfg: DictConfig) -> SearchAgent:
    """:func:`run` inside Hydra: errors go to ``train.log``; a user's mistake ends a
    single run with one line on stderr and exit status 2."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(cfg.resume) if cfg.get("resume") else Path(hydra_cfg.runtime.output_dir)
    try:
        return run(cfg, run_dir, typed_keys(hydra_cfg.overrides.task))
    except USER_ERRORS as exc:
        log.error("%s", exc)
        if hydra_cfg.mode == RunMode.RUN:
            print(f"{PROG}: {exc}", file=sys.stderr)
            sys.exit(USAGE_ERROR)
        raise
    except Exception:
        log.exception("%s failed in %s", PROG, run_dir)
        raise


@hydra.main(version_base="1.3", config_path="../../configs", config_name="train")
def train(cfg: DictConfig) -> float:
    """The Hydra task: one run, then its one-line summary."""
    trainer = run_job(cfg)
    best, found = trainer.ledger.best, trainer.confirmation
    deployed = deploy.of_run(trainer).summary()
    if found is not None:
        c = found.best
        print(
            f"confirmed best speedup over the compiler: {c.speedup:.4f} "
            f"[{c.low:.4f}, {c.high:.4f}] (95%, {len(c.readings_s)} readings beside "
            f"{len(found.baseline_readings_s)} of the compiler's map); best single reading "
            f"{best.speedup:.4f} at iteration {best.iteration}; {deployed}; "
            f"results in {trainer.run_dir}"
        )
        return c.speedup
    print(
        f"best speedup over the compiler: {best.speedup:.4f} "
        f"(latency {format_latency(best.latency_s)}, found at iteration {best.iteration}); "
        f"{deployed}; results in {trainer.run_dir}"
    )
    return best.speedup


def main() -> None:
    """Console entry point: ``workload=PATH`` becomes ``workload.name=PATH``, values of
    an agent's own sections are checked against the typed agent and forced (a sweep over
    several agents: :func:`egrl.cli.overrides.forced_section_values`), then Hydra."""
    sys.argv[1:] = rewrite_workload_paths(sys.argv[1:])
    exit_on(group_problems(sys.argv[1:]) + section_problems(sys.argv[1:]))
    sys.argv[1:] = forced_section_values(sys.argv[1:])
    train()


if __name__ == "__main__":
    main()
