"""The errors of the external model: a failed call, one attempt that failed, a refusal."""

from __future__ import annotations

from collections.abc import Sequence

from hwmodels.base import ChipCallError, Measurement


class ExternalEvaluatorError(ChipCallError):
    """The external command failed on a chunk of maps after all its attempts.

    Attributes:
        command: the command as run (argv list).
        chunk_index: index of the chunk that failed (``None`` outside ``measure``).
        chunk_range: ``(start, stop)`` rows of the measured batch that chunk held.
        problems: what went wrong on each attempt, oldest first.
        partial: the :class:`Measurement` of the chunks measured before the failure
            (rows ``0 .. chunk_range[0] - 1`` of the batch); ``None`` outside ``measure``.
    """

    def __init__(
        self,
        message: str,
        command: list[str],
        problems: Sequence[str] = (),
        chunk_index: int | None = None,
        chunk_range: tuple[int, int] | None = None,
        partial: Measurement | None = None,
    ) -> None:
        super().__init__(message)
        self.command = list(command)
        self.problems = list(problems)
        self.chunk_index = chunk_index
        self.chunk_range = chunk_range
        self.partial = partial


class CallFailed(Exception):
    """One attempt failed; the message says why (internal to the package: triggers a retry)."""


class Refused(CallFailed):
    """The command exited non-zero or answered ``{"error": ...}``: it refused the request
    (a ``check`` request so refused is not asked again)."""
