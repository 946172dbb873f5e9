"""Where a run's wall time goes: one total per phase of its search loop (``t_<phase>``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: the phases of a generation whose wall time metrics.csv reports (``t_<phase>``)
PHASES = ("inference", "evaluation", "learner", "evolution")
#: the phase of a screening run spent fitting its model and choosing candidates; its
#: column comes after the other timings
SCREEN_PHASE = "screening"
#: the phase spent asking the target's compiler alone (:meth:`egrl.ledger.Ledger.check`)
CHECK_PHASE = "check"


@dataclass
class Timer:
    """Cumulative wall time per phase of the search loop: ``with timer("learner"): ...``."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``phase``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] += time.perf_counter() - start
