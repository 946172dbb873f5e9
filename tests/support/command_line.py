"""``egrl-train`` run as a user runs it (a new interpreter) or in this process, its
one-line refusals, a small command-line run (:data:`TINY`), Hydra's composition of a
run's config, and a study's groups of runs in this process."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

#: a small EGRL run on resnet50 from the command line
TINY = [
    "workload=resnet50",
    "budget=40",
    "population.size=6",
    "policy.hidden=16",
    "policy.out=16",
    "policy.depth=2",
    "policy.heads=2",
    "learner.batch_size=8",
    "learner.burn_in=8",
    "checkpoint_every=2",
    "progress=false",
]
#: ``egrl-train`` as ``python -m``
EGRL_TRAIN = [sys.executable, "-m", "egrl.cli.train"]


def egrl_train(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    command: Sequence[str] = EGRL_TRAIN,
) -> subprocess.CompletedProcess:
    """``egrl-train ARGS`` in a new interpreter in ``cwd``, its output captured.

    Args:
        env: variables set for it on top of this process's environment.
        command: the interpreter's command line before ``args``.
    """
    environ = None if env is None else {**os.environ, **env}
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        check=False,
    )


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Restores what running ``egrl-train`` changes in this process: the arguments, the
    working directory, Hydra's global state, the logging set-up (Hydra configures its own
    on the root logger), the environment, Python's and torch's random generators and
    torch's threads."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    argv, cwd, environ = sys.argv, os.getcwd(), dict(os.environ)
    loggers = [logging.root] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    logging_state = [(lg, lg.level, lg.handlers[:], lg.propagate, lg.disabled) for lg in loggers]
    hydra_cfg = HydraConfig.instance().cfg
    rng = (random.getstate(), torch.get_rng_state())
    threads = torch.get_num_threads()
    # Hydra's logging.config closes every handler made so far (pytest's among them):
    # they are hidden from it and given back afterwards
    handler_refs, named_handlers = logging._handlerList[:], dict(logging._handlers)
    del logging._handlerList[:]
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        logging._handlerList[:0] = handler_refs
        logging._handlers.update(named_handlers)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = hydra_cfg
        for lg, level, handlers, propagate, disabled in logging_state:
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        random.setstate(rng[0])
        torch.set_rng_state(rng[1])
        torch.set_num_threads(threads)
        os.chdir(cwd)
        sys.argv = argv


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def egrl_train_in_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """:func:`egrl_train` without a new interpreter, for refusals of bad input.

    Runs the console entry point (``egrl.cli.train:main``) with ``sys.argv`` and the
    working directory set, stdout and stderr captured, warnings shown on stderr as a fresh
    interpreter would, and ``SystemExit``'s code as the exit status (an exception is a
    traceback on stderr and status 1). A refusal reads as from the command line
    (``test_a_refusal_reads_the_same_in_process_as_from_the_command_line`` in
    ``tests/test_cli.py``); what happens once a run starts (logging to its directory, a
    launcher's processes) is for :func:`egrl_train`.
    """
    from egrl.cli.train import main

    stdout, stderr = io.StringIO(), io.StringIO()
    command = ["egrl-train", *args]
    with process_state_kept(), warnings.catch_warnings():
        warnings.resetwarnings()  # a new interpreter's filters (``python -W`` unset)
        for category in (
            DeprecationWarning,
            PendingDeprecationWarning,
            ImportWarning,
            ResourceWarning,
        ):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _show_warning
        sys.argv = command[:]
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                main()
                returncode = 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    returncode = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    returncode = 1
            except Exception:
                traceback.print_exc()
                returncode = 1
    return subprocess.CompletedProcess(command, returncode, stdout.getvalue(), stderr.getvalue())


def assert_refused(out: subprocess.CompletedProcess, line: str, prefix: bool = False) -> None:
    """Exit status 2, exactly ``egrl-train: LINE`` on stderr, no traceback.

    Args:
        prefix: ``LINE`` is the start of the one line on stderr, not all of it.
    """
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    if prefix:
        assert len(lines) == 1 and lines[0].startswith(f"egrl-train: {line}"), lines
    else:
        assert lines == [f"egrl-train: {line}"]
    assert "Traceback" not in out.stdout + out.stderr


def compose(*overrides: str, hydra: bool = False):
    """``configs/train.yaml`` composed with ``overrides`` as Hydra composes a run's config
    (``hydra``: with Hydra's own section)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("configs", version_base=None):
        return hydra_compose("train", overrides=list(overrides), return_hydra_config=hydra)


#: the interpreter's command line of the study runner's ``egrl-train -m`` groups
STUDY_TRAIN = (sys.executable, "-m", "egrl.cli.train")


def study_runs_in_process(monkeypatch) -> list[list[str]]:
    """Make the study runner run its ``egrl-train -m`` groups in this process.

    A study's smoke plan starts one interpreter per group of runs, and each pays seconds of
    start-up (torch, PyTorch Geometric, Hydra) for runs of a second or two; here each group
    goes through :func:`egrl_train_in_process` instead, one at a time (a plan's
    ``groups_at_once`` groups wait for each other), and its output is logged on failure.
    The plan's other commands (a chip's, the priors', a workload's build) still start
    their own processes; ``tests/test_study_runner.py`` runs groups as a user does.

    Returns:
        the ``egrl-train`` arguments of every group run, in order.
    """
    from studies import runner  # the studies package only for the tests that run one

    real = runner.run_logged
    lock = threading.Lock()
    groups: list[list[str]] = []

    def run_logged(label: str, argv, what: str) -> int:
        if tuple(argv[:3]) != STUDY_TRAIN:
            return real(label, argv, what)
        with lock:
            groups.append(list(argv[3:]))
            done = egrl_train_in_process(*argv[3:], cwd=Path.cwd())
        if done.returncode != 0:
            logging.getLogger(__name__).warning(
                "%s: egrl-train exited with status %d:\n%s",
                label,
                done.returncode,
                done.stderr[-4000:],
            )
            return 1
        return 0

    monkeypatch.setattr(runner, "run_logged", run_logged)
    return groups
