"""A Hydra sweeper that runs an Optuna (>= 4) study, kept in an SQLite file.

Each trial is one job of the task (one ``egrl-train`` run): the sweeper asks Optuna for
``n_jobs`` trials at a time, turns each into the job's overrides, launches them with
Hydra's launcher and tells each trial what its job returned (``egrl-train``: the best
speedup). The search space is ``hydra.sweeper.params`` and the command line's sweeps, in
Hydra's override grammar: ``choice(a, b)`` and ``a,b`` are categorical, ``range(...)``
integers or steps, ``interval(lo, hi)`` integers when both bounds are, numbers otherwise,
``tag(log, interval(...))`` on a log scale; a plain value is fixed (kept as the trial's
user attribute).

The study lives in an SQLite file (``storage``; null: ``optuna.db`` in the sweep
directory), opened with ``load_if_exists``: a sweep launched again into the same sweep
directory goes on until the study holds ``n_trials`` completed trials. A trial the stopped
sweep left running is marked failed and its values are tried again first. The sampler
is built anew for each batch, seeded from ``sampler.seed`` and the number of trials so
far, so a resumed sweep asks what the uninterrupted one would have. A failed job fails
its trial and stops the sweep with the job's error. The best trial is written to
``optimization_results.yaml`` in the sweep directory (``best_params``, ``best_value``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from egrl.optuna_study import (
    import_optuna,
    make_sampler,
    sqlite_url,
    step_seed,
    sweeper_problems,
)

log = logging.getLogger(__name__)

#: the study's file in the sweep directory when ``storage`` is null
STORAGE_FILE = "optuna.db"
#: the best trial, in the sweep directory
RESULTS_FILE = "optimization_results.yaml"


def distribution(override: Override, optuna: Any) -> Any:
    """The Optuna distribution of a swept override; its value (a string) if it is fixed."""
    if not override.is_sweep_override():
        return override.get_value_element_as_str()
    dist = optuna.distributions
    value = override.value()
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return dist.CategoricalDistribution(
            list(override.sweep_iterator(transformer=Transformer.encode))
        )
    if override.is_range_sweep():
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            # range's stop is excluded, Optuna's high included
            high = value.start + value.step * ((value.stop - value.start) // value.step - 1)
            return dist.FloatDistribution(value.start, high, step=value.step)
        high = int(value.start + value.step * ((value.stop - value.start - 1) // value.step))
        return dist.IntDistribution(int(value.start), high, step=int(value.step))
    log_scale = "log" in value.tags
    if isinstance(value.start, int) and isinstance(value.end, int):
        return dist.IntDistribution(value.start, value.end, log=log_scale)
    return dist.FloatDistribution(value.start, value.end, log=log_scale)


def search_space(arguments: Sequence[str], optuna: Any) -> tuple[dict, dict]:
    """``(distributions, fixed values)`` of the overrides ``arguments``."""
    distributions, fixed = {}, {}
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        value = distribution(override, optuna)
        key = override.get_key_element()
        if isinstance(value, optuna.distributions.BaseDistribution):
            distributions[key] = value
        else:
            fixed[key] = value
    return distributions, fixed


class OptunaSweeper(Sweeper):
    """Hydra sweeper over an Optuna study in SQLite (see the module docstring).

    Args:
        direction: ``maximize`` or ``minimize`` what the task returns.
        study_name: the study's name in the storage.
        storage: the SQLite file (null: ``optuna.db`` in the sweep directory).
        n_trials: completed trials the study ends with.
        n_jobs: trials launched at once.
        sampler: ``name`` (``tpe``, ``gp``, ``cmaes``, ``random``, ``qmc``), ``seed`` and
            ``n_startup_trials`` (random trials before a model, null: Optuna's default).
        params: the search space, ``key: override grammar``.
    """

    def __init__(
        self,
        direction: str,
        study_name: str,
        storage: str | None,
        n_trials: int,
        n_jobs: int,
        sampler: DictConfig,
        params: DictConfig | None = None,
    ) -> None:
        self.settings = {
            "direction": direction,
            "study_name": study_name,
            "storage": storage,
            "n_trials": n_trials,
            "n_jobs": n_jobs,
            "sampler": OmegaConf.to_container(sampler) if OmegaConf.is_config(sampler) else sampler,
        }
        self.params = dict(params or {})
        self.config: DictConfig | None = None
        self.launcher = None
        self.optuna = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: list[str]) -> None:
        optuna = self.optuna = import_optuna("the optuna-sqlite sweeper")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        problems = sweeper_problems(self.settings, sweep_dir)
        if problems:
            raise ValueError("; ".join(problems))
        distributions, fixed = search_space(
            [f"{k}={v}" for k, v in self.params.items()] + list(arguments), optuna
        )
        for key in fixed:
            distributions.pop(key, None)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        storage = self.settings["storage"] or sweep_dir / STORAGE_FILE
        study = optuna.create_study(
            study_name=self.settings["study_name"],
            storage=sqlite_url(storage),
            direction=self.settings["direction"],
            load_if_exists=True,
        )
        self._retry_interrupted(study, optuna)
        sampler = dict(self.settings["sampler"])
        log.info("Study name: %s", study.study_name)
        log.info("Storage: %s", sqlite_url(storage))
        log.info("Sampler: %s", sampler["name"])
        log.info("Directions: %s", [self.settings["direction"]])
        complete = optuna.trial.TrialState.COMPLETE
        while True:
            trials = study.get_trials(deepcopy=False)
            left = self.settings["n_trials"] - sum(t.state == complete for t in trials)
            if left <= 0:
                break
            study.sampler = make_sampler(
                sampler["name"],
                step_seed(sampler.get("seed") or 0, sampler["name"], len(trials)),
                n_startup_trials=sampler.get("n_startup_trials"),
            )
            self._batch(study, min(left, self.settings["n_jobs"]), distributions, fixed)
        best = study.best_trial
        log.info("Best parameters: %s", best.params)
        log.info("Best value: %s", best.value)
        results = {"name": "optuna", "best_params": best.params, "best_value": best.value}
        OmegaConf.save(OmegaConf.create(results), sweep_dir / RESULTS_FILE)

    @staticmethod
    def _retry_interrupted(study: Any, optuna: Any) -> None:
        """Fail the trials a stopped sweep left running, and try their values first."""
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        for trial in running:
            log.info("trial %d was interrupted: trying its values again", trial.number)
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs=dict(trial.user_attrs))

    def _batch(self, study: Any, n: int, distributions: dict, fixed: dict) -> None:
        """Ask ``n`` trials, run their jobs, tell each what its job returned."""
        trials = [study.ask(distributions) for _ in range(n)]
        overrides = []
        for trial in trials:
            for key, value in fixed.items():
                trial.set_user_attr(key, value)
            values = {**trial.params, **fixed}
            overrides.append(tuple(f"{k}={v}" for k, v in values.items()))
        returns = self.launcher.launch(overrides, initial_job_idx=trials[0].number)
        failed = None
        for trial, ret in zip(trials, returns):
            try:
                study.tell(trial, float(ret.return_value))
            except Exception as exc:  # the job's own error, raised by return_value
                study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                failed = failed or exc
        if failed is not None:
            raise failed
