"""Optuna (>= 4) on the map, asked and told one batch per generation.

Each decision (unit x head) is one parameter named ``UNIT:HEAD``: categorical over the
head's choices (``DRAM``, ``LLC``, ``SRAM`` on NNP-I) for the samplers that model
categories (TPE, GP, random), an integer ``0 .. choices - 1`` for CMA-ES and QMC, which
sample numbers only (``agent.encoding`` overrides). A generation asks ``batch`` trials,
measures their maps in one call and tells each its reward (the study maximises it).

The study runs in memory: Optuna's database storage writes every parameter in a
transaction of its own (a second per trial of ResNet-50's 112 parameters). Each
generation's trials are then copied into the run's SQLite storage (``RUN_DIR/optuna.db``
unless ``agent.storage`` names another file), one transaction per trial, so that
``optuna-dashboard sqlite:///RUN_DIR/optuna.db`` shows the run as it goes. The study is named
after the run directory.

The sampler is built anew at each generation, seeded from the run's seed and the
generation (QMC: from the run's seed alone, the scrambling of its one Sobol' sequence),
so a generation's proposals depend only on the trials before it and the study's own
attributes. A checkpoint records how many trials were told and the study's attributes
(QMC's sample counter); resuming reads those trials back from the SQLite storage (a run
killed after its last checkpoint has more there: they are dropped from it) and continues
exactly as the uninterrupted run.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.agents import register_agent
from egrl.agents.base import SearchAgent
from egrl.agents.decisions import Decisions
from egrl.agents.options import (
    STARTS,
    option_error,
    parse_options,
    resolve_start,
    start_mappings,
    start_rule,
)
from egrl.checkpoint import CheckpointError
from egrl.config import TrainConfig
from egrl.env import Env, Evaluation
from egrl.optuna_study import (
    CATEGORICAL_SAMPLERS,
    SAMPLERS,
    import_optuna,
    make_sampler,
    sqlite_url,
    step_seed,
    storage_problem,
)
from egrl.validation import Rule, at_least, ruled

log = logging.getLogger(__name__)

#: the storage file in the run directory
STORAGE_FILE = "optuna.db"
#: how decisions are parameters: ``auto`` is categorical for the samplers that model
#: categories, integer for the others
ENCODINGS = ("auto", "categorical", "integer")
#: the first trial: ``none`` (the sampler's own), or a start map enqueued
OPTUNA_STARTS = ("none", *STARTS)


@dataclass(frozen=True)
class OptunaOptions:
    """Parameters of ``agent=optuna``.

    Attributes:
        sampler: ``tpe``, ``gp``, ``cmaes``, ``random`` or ``qmc``
            (:data:`egrl.optuna_study.SAMPLERS`).
        batch: trials asked per generation (measured in one call).
        start: the first trial: ``none`` (the sampler's), or ``native`` (the compiler's
            map), ``initial`` (alias ``dram``), ``fallback`` or ``random``, enqueued.
        storage: the SQLite file of the study (null: ``optuna.db`` in the run directory;
            a relative path is read from the directory the run starts in).
        encoding: ``auto``, ``categorical`` or ``integer`` (:data:`ENCODINGS`).
    """

    sampler: str = ruled(Rule(str, choices=SAMPLERS), "tpe")
    batch: int = ruled(at_least(1), 20)
    start: str = ruled(start_rule(OPTUNA_STARTS), "none")
    storage: str | None = None
    encoding: str = ruled(Rule(str, choices=ENCODINGS), "auto")


@register_agent("optuna")
class OptunaAgent(SearchAgent):
    """Optuna's samplers with ask/tell in batches (see the module docstring)."""

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(OptunaOptions, cfg)
        self.start = resolve_start(o.start, env, self.name, OPTUNA_STARTS)
        self.storage_path = self._storage_path(o.storage)
        self.optuna = import_optuna()
        self.seed = int(self.rng.integers(0, 2**31 - 1))
        self.start_map = None  # int64 [N, H]; None: the sampler's first trial
        if self.start != "none":
            limit = cfg.prior_time_limit_s
            self.start_map = start_mappings(env, self.start, 1, self.rng, limit)[0]
        categorical = o.encoding == "categorical" or (
            o.encoding == "auto" and o.sampler in CATEGORICAL_SAMPLERS
        )
        self.decisions = Decisions(env, labelled=categorical)
        self.distributions = self._distributions()
        self.study_name = self.run_dir.name if self.run_dir is not None else "egrl"
        self.study = None  # in memory, made at the first generation or on resume
        self.memory = None  # its storage
        self.saved = None  # the study in the SQLite storage (None: no storage)
        self.copied = 0  # trials copied into the storage

    def _storage_path(self, storage: str | None) -> Path | None:
        """The SQLite file of the study (None: no run directory, no storage); a file that
        cannot be written is refused (nothing is created to find out)."""
        if storage is None:
            return None if self.run_dir is None else self.run_dir / STORAGE_FILE
        why = storage_problem(storage)
        if why is not None:
            raise option_error(self.name, f"storage={storage} cannot be written: {why}")
        return Path(storage)

    def _distributions(self) -> dict:
        """One Optuna distribution per decision, named as the decisions."""
        dist, d = self.optuna.distributions, self.decisions
        if d.labelled:
            return {
                n: dist.CategoricalDistribution(d.labels[d.head(i)]) for i, n in enumerate(d.names)
            }
        return {n: dist.IntDistribution(0, int(c) - 1) for n, c in zip(d.names, d.counts)}

    # ------------------------------------------------------------------ studies
    def _sampler(self):
        """The sampler of this generation (see the module docstring)."""
        seed = step_seed(self.seed, self.options.sampler, self.generation)
        return make_sampler(self.options.sampler, seed, self.env.deterministic)

    def _new_study(self, trials: list = (), attrs: dict | None = None):
        """An in-memory study holding ``trials``, with the study attributes ``attrs``."""
        self.memory = self.optuna.storages.InMemoryStorage()
        study = self.optuna.create_study(
            storage=self.memory, study_name=self.study_name, direction="maximize"
        )
        study.add_trials(trials)
        study_id = self.memory.get_study_id_from_name(self.study_name)
        for key, value in (attrs or {}).items():
            self.memory.set_study_system_attr(study_id, key, value)
        return study

    def _study_attrs(self) -> dict:
        """The in-memory study's own attributes (a sampler's counters)."""
        study_id = self.memory.get_study_id_from_name(self.study_name)
        return self.memory.get_study_system_attrs(study_id)

    def _open_storage(self, keep: int | None):
        """The study of the SQLite storage: a new one (``keep`` None: an old study of the
        same name is deleted), or the stored one cut to its first ``keep`` trials."""
        if self.storage_path is None:
            return None
        optuna = self.optuna
        rdb = optuna.storages.RDBStorage(sqlite_url(self.storage_path))
        names = [s.study_name for s in rdb.get_all_studies()]
        log.info("study %r in %s", self.study_name, sqlite_url(self.storage_path))
        if keep is None:
            if self.study_name in names:
                optuna.delete_study(study_name=self.study_name, storage=rdb)
            return optuna.create_study(
                storage=rdb, study_name=self.study_name, direction="maximize"
            )
        if self.study_name not in names and len(names) == 1:
            self.study_name = names[0]  # the run directory was moved or renamed
        if self.study_name not in names:
            raise CheckpointError(
                self.storage_path,
                f"no study {self.study_name!r} to resume: the checkpoint's {keep} trials are lost",
            )
        saved = optuna.load_study(study_name=self.study_name, storage=rdb)
        trials = saved.get_trials(deepcopy=False)
        if len(trials) < keep:
            raise CheckpointError(
                self.storage_path,
                f"study {self.study_name!r} holds {len(trials)} trials, the checkpoint {keep}",
            )
        if len(trials) > keep:
            log.info("resume: dropping %d trials after the checkpoint", len(trials) - keep)
            optuna.delete_study(study_name=self.study_name, storage=rdb)
            saved = optuna.create_study(
                storage=rdb, study_name=self.study_name, direction="maximize"
            )
            saved.add_trials(trials[:keep])
        return saved

    def _begin(self) -> None:
        """The first generation's study: empty, the start map enqueued."""
        self.study = self._new_study()
        self.saved = self._open_storage(None)
        if self.start_map is not None:
            self.study.enqueue_trial(self.decisions.values(self.start_map))

    # ------------------------------------------------------------------ search
    def step(self) -> dict:
        if self.study is None:
            with self.timer("evolution"):
                self._begin()
        self.study.sampler = self._sampler()
        n = min(self.options.batch, self.ledger.remaining)
        with self.timer("evolution"):
            trials = [self.study.ask(self.distributions) for _ in range(n)]
        ev = self.ledger.evaluate(
            np.stack([self.decisions.mapping(t.params) for t in trials]), "optuna"
        )
        with self.timer("evolution"):
            self._tell(trials, ev)
        return {}

    def _tell(self, trials: list, ev: Evaluation) -> None:
        """Tell each trial its reward (one left unanswered by the budget fails), then copy
        the new trials into the storage."""
        fail = self.optuna.trial.TrialState.FAIL
        for i, trial in enumerate(trials):
            if i < len(ev):
                trial.set_user_attr("valid", bool(ev.valid[i]))
                trial.set_user_attr("latency_s", float(ev.latency_s[i]))
                self.study.tell(trial, float(ev.reward[i]))
            else:
                self.study.tell(trial, state=fail)
        if self.saved is not None:
            done = self.study.get_trials(deepcopy=False)
            self.saved.add_trials(done[self.copied :])
            self.copied = len(done)

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        trials = 0 if self.study is None else len(self.study.get_trials(deepcopy=False))
        attrs = {} if self.study is None else self._study_attrs()
        return {"seed": self.seed, "trials": trials, "study_attrs": json.dumps(attrs)}

    def load_agent_state(self, state: dict) -> None:
        """Read the checkpoint's trials back from the storage (see the module docstring)."""
        self.seed = int(state["seed"])
        keep = int(state["trials"])
        if keep == 0:
            self.study = None
            return
        if self.storage_path is None:
            raise CheckpointError(self.run_dir, "agent 'optuna' resumes from its storage: none")
        self.saved = self._open_storage(keep)
        trials = self.saved.get_trials(deepcopy=False)[:keep]
        self.study = self._new_study(trials, json.loads(state["study_attrs"]))
        self.copied = keep
