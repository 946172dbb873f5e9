"""What every agent's checkpoints hold, and how a run writes them and continues from them.

:class:`Checkpoints` is a part of :class:`~egrl.agents.base.SearchAgent` (its base class):
a checkpoint holds the ledger's state (counts, record, cache, screen), the run's clock and
metrics rows, its random generators and the subclass's own state
(:meth:`Checkpoints.agent_state`), as tensors, arrays and plain data (:mod:`egrl.checkpoint`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from egrl import confirm
from egrl.rundir import RunDir

log = logging.getLogger(__name__)


class Checkpoints:
    """Checkpoints of a :class:`~egrl.agents.base.SearchAgent` (see the module docstring)."""

    def _save_due(self) -> None:
        """The snapshot and checkpoint this generation owes (with a run directory)."""
        if self.run_dir is None:
            return
        done = self.finished
        if self.snapshots and (self.generation % max(1, self.cfg.snapshot_every) == 0 or done):
            self.callbacks.on_snapshot(self, self.save_policy_snapshot())
        if self.generation % max(1, self.cfg.checkpoint_every) == 0 or done or self.stop_reason:
            self.callbacks.on_checkpoint(self, self.save_checkpoint())

    def save_policy_snapshot(self) -> Path:  # the policies for egrl-transfer (snapshots)
        raise NotImplementedError(f"agent {self.name!r} has no policies to snapshot")

    def agent_state(self) -> dict:  # the subclass's own (tensors, arrays and plain data)
        return {}

    def load_agent_state(self, state: dict) -> None:  # inverse of agent_state
        pass

    def state_dict(self) -> dict:
        """Everything needed to continue the run bit for bit."""
        state = {
            **self.ledger.state_dict(),
            "generation": self.generation,
            "wall_s": self.wall_s,
            "timer": dict(self.timer.totals),
            "rng": self.rng.bit_generator.state,
            "generator": self.generator.get_state(),
            "rows": self.rows,
            "agent": self.agent_state(),
        }
        if self.confirmation is not None:
            state["confirmation"] = self.confirmation.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.ledger.load_state_dict(state)
        self.generation = int(state["generation"])
        self.wall_s = float(state["wall_s"])
        self.timer.totals.update(dict(state["timer"]))
        self.rng.bit_generator.state = state["rng"]
        self.generator.set_state(state["generator"])
        self.rows = list(state["rows"])
        self.load_agent_state(state["agent"])
        if state.get("confirmation") is not None:
            self.confirmation = confirm.resumed(state["confirmation"], self.ledger)

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/gen_XXXXXX`` atomically and prune old ones."""
        files = RunDir(self.run_dir)
        return files.save_checkpoint(self.state_dict(), self.generation, self.cfg.keep_checkpoints)

    def resume(self) -> bool:
        """Continue from the newest intact checkpoint in ``run_dir`` (False: none; damaged
        ones skipped; :class:`~egrl.checkpoint.CheckpointError` if all are damaged)."""
        files = RunDir(self.run_dir)
        found = files.load_latest_checkpoint()
        if found is None:
            return False
        ckpt, state = found
        self.load_state_dict(state)
        files.rewrite_metrics(self.columns, self.rows)
        log.info("resumed %s from %s at generation %d", self.run_dir, ckpt.name, self.generation)
        return True
