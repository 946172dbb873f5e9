"""Optuna studies for ``agent=optuna`` and the ``hparams_search`` sweeper: samplers by
name and SQLite storage.

Optuna (>= 4) is an optional extra (``pip install -e ".[optuna]"``), imported only by
what uses it. :func:`make_sampler` builds one of :data:`SAMPLERS` from a seed; Optuna's
``ExperimentalWarning`` about the samplers and arguments used here (TPE's
``constant_liar``, the GP and QMC samplers, CMA-ES's ``with_margin``) is not repeated at
every build. :func:`storage_problem` says whether an SQLite file can be written without
creating anything; :func:`sqlite_url` is its storage URL (``optuna-dashboard URL``).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

#: the samplers by name: Optuna's TPE (with a constant liar, so that the trials of one
#: batch differ), its Gaussian-process sampler (log expected improvement), CMA-ES (with
#: margin, for integers), uniform random, and scrambled Sobol' quasi-random points
SAMPLERS = ("tpe", "gp", "cmaes", "random", "qmc")
#: samplers that model categorical parameters themselves; CMA-ES and QMC sample numbers
#: only and would hand a categorical parameter to a random sampler
CATEGORICAL_SAMPLERS = ("tpe", "gp", "random")
#: samplers that take ``n_startup_trials`` (random trials before the model)
MODEL_SAMPLERS = ("tpe", "gp", "cmaes")
#: the least Optuna release these samplers are written for
MIN_VERSION = 4


def import_optuna(what: str = "agent 'optuna'") -> Any:
    """The ``optuna`` module (>= :data:`MIN_VERSION`), its per-trial log lines silenced;
    an ImportError that says how to install it otherwise."""
    hint = 'pip install -e ".[optuna]"'
    try:
        import optuna  # optional dependency
    except ImportError as err:
        raise ImportError(f"{what} needs the optional optuna package (>= 4): {hint}") from err
    major = int(optuna.__version__.split(".")[0])
    if major < MIN_VERSION:
        raise ImportError(f"{what} needs optuna >= 4, found {optuna.__version__}: {hint}")
    logging.getLogger("optuna").setLevel(logging.WARNING)
    return optuna


def make_sampler(
    name: str,
    seed: int,
    deterministic: bool = False,
    n_startup_trials: int | None = None,
) -> Any:
    """Optuna sampler ``name`` (one of :data:`SAMPLERS`) seeded with ``seed``.

    Args:
        name: the sampler.
        seed: its seed (the QMC sampler's scrambling of the Sobol' sequence).
        deterministic: the objective answers a point the same way every time (the GP
            sampler then fits no noise).
        n_startup_trials: random trials before the model (:data:`MODEL_SAMPLERS`; None:
            Optuna's default; the others have no model and ignore it).
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; expected one of {SAMPLERS}")
    optuna = import_optuna()
    samplers = optuna.samplers
    startup = {} if n_startup_trials is None else {"n_startup_trials": int(n_startup_trials)}
    builders = {
        "tpe": lambda: samplers.TPESampler(seed=seed, constant_liar=True, **startup),
        "gp": lambda: samplers.GPSampler(
            seed=seed, deterministic_objective=deterministic, **startup
        ),
        "cmaes": lambda: samplers.CmaEsSampler(seed=seed, with_margin=True, **startup),
        "random": lambda: samplers.RandomSampler(seed=seed),
        "qmc": lambda: samplers.QMCSampler(seed=seed, qmc_type="sobol", scramble=True),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return builders[name]()


#: the first bytes of an SQLite database file
SQLITE_HEADER = b"SQLite format 3\x00"


def storage_problem(path: str | Path) -> str | None:
    """Why an SQLite storage at ``path`` cannot be written, or None; nothing is created
    to find out (the directory must exist; an existing file must be an SQLite database)."""
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        return f"{path} is a directory"
    if path.exists():
        if not os.access(path, os.W_OK):
            return f"{path} is not writable"
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head and head != SQLITE_HEADER:
            return f"{path} is not an SQLite database"
        return None
    if not parent.is_dir():
        return (
            f"directory {parent} does not exist"
            if not parent.exists()
            else (f"{parent} is not a directory")
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of the SQLite file ``path`` (made absolute)."""
    return f"sqlite:///{Path(path).resolve()}"


def step_seed(seed: int, sampler: str, step: int) -> int:
    """The seed of the sampler built for ``step`` (a generation, a batch of trials): drawn
    from ``seed`` and ``step``, so that a resumed search builds the same one; QMC keeps
    ``seed``, the scrambling of its one Sobol' sequence."""
    if sampler == "qmc":
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1)[0])


#: the directions a sweep may take
DIRECTIONS = ("maximize", "minimize")


def sweeper_problems(sweeper: dict, sweep_dir: str | Path) -> list[str]:
    """Why the ``hydra.sweeper`` section of the project's Optuna sweeper cannot run, one
    line each (nothing is created to find out; the storage defaults to
    ``SWEEP_DIR/optuna.db``, whose directory the sweep makes)."""
    problems = []
    sampler = dict(sweeper.get("sampler") or {})
    name = sampler.get("name")
    if name not in SAMPLERS:
        problems.append(
            f"hydra.sweeper.sampler.name={name} is invalid: expected one of {', '.join(SAMPLERS)}"
        )
    for key in ("n_trials", "n_jobs"):
        value = sweeper.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"hydra.sweeper.{key}={value} is invalid: expected an integer >= 1")
    if sweeper.get("direction") not in DIRECTIONS:
        problems.append(
            f"hydra.sweeper.direction={sweeper.get('direction')} is invalid: expected "
            + " or ".join(DIRECTIONS)
        )
    storage = sweeper.get("storage")
    if storage is not None:
        why = storage_problem(storage)
        if why is not None:
            problems.append(f"hydra.sweeper.storage={storage} cannot be written: {why}")
    elif Path(sweep_dir).exists() and not Path(sweep_dir).is_dir():
        problems.append(f"hydra.sweep.dir={sweep_dir} is invalid: not a directory")
    return problems
