"""The board runs of a run: how many it may pay, how many it holds back, how many it paid.

One :class:`Budget` per run (a pre-training run's ledgers share one). The search pays
from what is not reserved; a noisy target's confirmation (:mod:`egrl.confirm`) holds its
board runs back when the run starts (:meth:`Budget.hold`) and spends them at its end
(:meth:`Budget.release`); a run resumed after its confirmation pays nothing more
(:meth:`Budget.close`). The totals are never reassigned: what may be paid now is
:attr:`Budget.limit`.

Beside the board runs it counts what they were spent on: distinct maps paid for, maps
answered (paid or not) and paid maps the runtime could not measure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Budget:
    """Board runs allowed (``total``), held back (``reserved``) and paid (``spent``).

    Attributes:
        total: board runs the run may pay in all (``cfg.budget``).
        reserved: board runs held back from the search for the confirmation.
        spent: board runs paid so far (a map read ``R`` times costs ``R``).
        paid_maps: distinct maps paid for (without re-readings).
        proposals: maps answered, paid or not.
        failed_maps: paid maps the runtime could not measure.
        released: the reserve is open (the confirmation is under way).
        closed: nothing more may be paid (a resumed run whose confirmation is done).
    """

    total: int
    reserved: int = 0
    spent: int = 0
    paid_maps: int = 0
    proposals: int = 0
    failed_maps: int = 0
    released: bool = False
    closed: bool = False

    @property
    def limit(self) -> int:
        """Board runs that may be paid in all now: the total less the reserve until it is
        released; what was spent once closed."""
        if self.closed:
            return self.spent
        return self.total - (0 if self.released else self.reserved)

    @property
    def left(self) -> int:
        """Board runs that may still be paid now (:attr:`limit` less :attr:`spent`)."""
        return self.limit - self.spent

    def hold(self, runs: int) -> None:
        """Hold ``runs`` board runs back from the search (the confirmation's reserve)."""
        if runs < 0 or runs > self.total:
            raise ValueError(f"cannot reserve {runs} of a budget of {self.total} board runs")
        self.reserved = int(runs)

    def release(self) -> int:
        """Open the reserve to its owner; returns its board runs."""
        self.released = True
        return self.reserved

    def close(self) -> None:
        """Nothing more may be paid (the run is done)."""
        self.closed = True

    def spend(self, runs: int, maps: int = 0, answered: int = 0, failed: int = 0) -> None:
        """Count ``runs`` board runs paid for ``maps`` new maps among ``answered`` answered
        maps, ``failed`` of them not measured."""
        self.spent += int(runs)
        self.paid_maps += int(maps)
        self.proposals += int(answered)
        self.failed_maps += int(failed)

    def state_dict(self) -> dict:
        """The counts, as checkpoints keep them (board runs as ``iterations``)."""
        return {
            "iterations": self.spent,
            "proposals": self.proposals,
            "paid_maps": self.paid_maps,
            "failed_maps": self.failed_maps,
        }

    def load_state_dict(self, state: dict, readings_per_map: int = 1) -> None:
        """Inverse of :meth:`state_dict`; a checkpoint from before a count was kept gives
        it from the board runs (``readings_per_map`` of them a map)."""
        self.spent = int(state["iterations"])
        self.proposals = int(state.get("proposals", self.spent))
        self.failed_maps = int(state.get("failed_maps", 0))
        self.paid_maps = int(state.get("paid_maps", self.spent // readings_per_map))
