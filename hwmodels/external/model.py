"""The ``external`` hardware model: a chip behind a command (:class:`ExternalModel`)."""

from __future__ import annotations

import copy
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from hwmodels import register
from hwmodels.base import HardwareModel
from hwmodels.external.target import ExternalTarget
from hwmodels.nnpi.prior import check_prior
from workloads.ir import Workload

#: NNP-I's decision heads: the weight and the activation of every node go to one level
#: (the default heads; their first choice, DRAM, is the default initial and fallback choice).
NNPI_HEADS: dict[str, list[str]] = {
    "weight": ["DRAM", "LLC", "SRAM"],
    "activation": ["DRAM", "LLC", "SRAM"],
}


def check_heads(heads: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    if not heads:
        raise ValueError("heads must name at least one decision head")
    out: dict[str, list[str]] = {}
    for name, choices in heads.items():
        if isinstance(choices, str) or not choices:
            raise ValueError(f"head {name!r} must list its choice names, got {choices!r}")
        if len(set(choices)) != len(choices):
            raise ValueError(f"head {name!r} repeats a choice: {list(choices)}")
        out[str(name)] = [str(c) for c in choices]
    return out


def choice_per_head(
    heads: dict[str, list[str]], named: Mapping[str, str] | None, what: str
) -> np.ndarray:
    """int64 ``[H]``: the index of the choice ``named[head]`` of each head (its first
    choice where ``named`` gives none)."""
    named = dict(named or {})
    unknown = sorted(set(named) - set(heads))
    if unknown:
        raise ValueError(f"{what} names unknown head(s) {unknown}; heads are {list(heads)}")
    out = []
    for head, choices in heads.items():
        choice = str(named.get(head, choices[0]))
        if choice not in choices:
            raise ValueError(f"{what}: head {head!r} has no choice {choice!r} ({choices})")
        out.append(choices.index(choice))
    return np.array(out, dtype=np.int64)


@register("external")
class ExternalModel(HardwareModel):
    """A chip behind a command that speaks ``egrl-external/1`` (``docs/external.md``).

    Args:
        command: argv list, or a string split with :func:`shlex.split`.
        heads: decision heads and their choice names; default :data:`NNPI_HEADS`.
        initial: the choice name of each head that makes the initial map (EGRL's initial
            mapping action: every unit on it); a head not named gets its first choice.
        fallback: the same for the fallback map, which must be valid on the chip: it
            stands in for the repair of an invalid map the command does not report, and
            for the baseline when the command gives none.
        timeout_s: seconds one call may take before its process group is killed.
        retries: further attempts after a failed call (``evaluate`` requests only).
        batch_size: maps per call; ``None`` sends the whole batch in one call.
        env: environment variables added to (overriding) the current environment.
        cwd: working directory of the command.
        inline_workload: put the workload itself in every request instead of the path
            of a file written at bind time (for commands that cannot read local files).
        deterministic: the chip answers the same map the same way every time, so a map
            is measured once and answered from memory afterwards (``Target.deterministic``);
            false for a noisy chip, whose maps are measured every time they are proposed;
            ``"auto"`` (the default): the compiler's map is read twice when the chip is
            bound, and the chip is deterministic if the two readings are identical
            (:class:`egrl.env.Env` decides).
        repeats: measurements of each map, averaged (for a noisy chip); each is a board
            run, and the budget counts board runs (``readings_per_map``).
        prior: the chip's datasheet as NNP-I parameters, ``{name: nnpi, sram_mib: 2,
            llc_mib: 24, dram_gbps: 67.2, llc_gbps: 680, sram_gbps: 6800, peak_tops: 100}``
            (:func:`hwmodels.nnpi.prior.check_prior`): a model of the chip the toolkit
            can solve (``Target.prior_solution``) and the figures ``screen.prior=nnpi``
            reads; ``None``: the chip has no prior.
    """

    name = "external"
    reading_params = (
        "timeout_s",
        "retries",
        "batch_size",
        "inline_workload",
        "deterministic",
        "repeats",
        "prior",
    )

    def __init__(
        self,
        command: str | Sequence[str],
        heads: Mapping[str, Sequence[str]] | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        batch_size: int | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        inline_workload: bool = False,
        initial: Mapping[str, str] | None = None,
        fallback: Mapping[str, str] | None = None,
        deterministic: bool | str = "auto",
        repeats: int = 1,
        prior: Mapping | None = None,
    ) -> None:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise ValueError("command is empty")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if int(retries) < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if not isinstance(deterministic, bool) and deterministic != "auto":
            raise ValueError(f"deterministic must be true, false or auto, got {deterministic!r}")
        if isinstance(repeats, bool) or int(repeats) != repeats or int(repeats) < 1:
            raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
        self.command = argv
        self.heads = check_heads(copy.deepcopy(dict(heads or NNPI_HEADS)))
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.env = dict(env or {})
        self.cwd = cwd
        self.inline_workload = bool(inline_workload)
        self.deterministic = deterministic
        self.repeats = int(repeats)
        self.initial_choices = choice_per_head(self.heads, initial, "initial")
        self.fallback_choices = choice_per_head(self.heads, fallback, "fallback")
        #: the datasheet's NNP-I parameters (None: no prior)
        self.prior = None if prior is None else check_prior(prior, self.heads)

    @property
    def process_env(self) -> dict[str, str] | None:
        """The command's environment: the current one with :attr:`env` on top."""
        return {**os.environ, **{k: str(v) for k, v in self.env.items()}} if self.env else None

    def bind(self, workload: Workload) -> ExternalTarget:
        """The command bound to ``workload`` (writes the workload file)."""
        return ExternalTarget(self, workload)

    def __repr__(self) -> str:
        return f"ExternalModel(command={self.command}, heads={list(self.heads)})"
