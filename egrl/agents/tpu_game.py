"""What the agents that play the TPU memory-mapping game themselves share.

The ``tpu-cmem`` target (:mod:`hwmodels.tpu`) is a game: an agent may play it buffer by
buffer (legal actions, rewards, Drop-backup) instead of proposing a whole map blind. The
planning agent (``agent=muzero``), evolution strategies (``agent=es``) and uniformly
random legal play (``agent=random-legal``) do so. Each finished game is a layout; it is
paid like any other agent's map (:meth:`GameAgent.pay`: one paid iteration per finished
layout, through :meth:`egrl.agents.base.SearchAgent.evaluate`), so these agents sit on
the same budget and curves as the others.

The game's return is normalised as :func:`return_bound` explains; ``metrics.csv`` gets
the best return and its normalised value beside the toolkit's usual columns.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from egrl.agents.base import SearchAgent
from egrl.config import TrainConfig
from egrl.env import Env, Evaluation
from hwmodels.tpu.program import Program

#: metrics.csv columns every game-playing agent adds
GAME_COLUMNS = ("games", "game_return", "best_return", "best_norm_return")


def tpu_program(env: Env, agent: str) -> Program:
    """The game program of ``env``; ``ValueError`` naming the agent if the target is not
    ``tpu-cmem``."""
    program = getattr(env.target, "program", None)
    if not isinstance(program, Program):
        raise ValueError(
            f"agent {agent!r} plays the TPU memory-mapping game and needs hwmodel=tpu-cmem; "
            f"got a {type(env.target).__name__} target"
        )
    return program


def return_bound(program: Program) -> float:
    """The highest return any layout could earn, seconds: every instruction's all-HBM
    latency minus its all-CMEM latency, ``sum_t L_t({}) - L_t(B(t))``.

    The return of a game is at most this (the benefits of one instruction's buffers add
    up to the latency saved on it, at most down to its all-CMEM latency); it is reached
    only if CMEM size and copy bandwidth were unlimited. Rewards divided by it are the
    normalised rewards of the study (Wang et al. do not state their normaliser; their
    Table 2 values lie in [0, 1], as these do).
    """
    steps = np.arange(program.num_instructions)
    all_cmem = program.latency_s(0.0, program.instr_bytes, steps)
    bound = float((program.hbm_latency_s - all_cmem).sum())
    if not bound > 0:
        raise ValueError(
            f"program {program.name!r}: no buffer gains from CMEM (return bound {bound})"
        )
    return bound


class GameAgent(SearchAgent):
    """A :class:`~egrl.agents.base.SearchAgent` that plays ``tpu-cmem`` games itself.

    Subclasses play games and hand their actions to :meth:`pay`. :attr:`best_return` and
    :attr:`best_actions` follow the best game by return (the base class's ``best``
    follows the best by latency, like every other agent).
    """

    extra_columns = GAME_COLUMNS

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        self.program = tpu_program(env, self.name)
        self.bound = return_bound(self.program)
        self.games = 0
        self.best_return = -np.inf
        self.best_actions: np.ndarray | None = None
        #: ``time.perf_counter()`` past which no game is started or continued (None: no
        #: limit); a wall-clock budget such as the comparison study's
        self.deadline: float | None = None

    def past_deadline(self) -> bool:
        """The wall-clock deadline, or the run's ``time_limit_s``, has passed; sets
        :attr:`stop_reason` when it has."""
        now = time.perf_counter()
        if self.time_limit_deadline is not None and now >= self.time_limit_deadline:
            self.stop_time_limit()
            return True
        if self.deadline is None or now < self.deadline:
            return False
        self.stop_reason = "wall-clock deadline reached"
        return True

    def pay(self, actions: np.ndarray, returns: np.ndarray, source: str) -> Evaluation:
        """Measure finished games as maps and count them.

        Args:
            actions: int ``[B, N]``: each game's actions.
            returns: float ``[B]``: each game's return.

        Returns:
            The evaluation of the games the budget allowed (a prefix of the ``B``).
        """
        actions = np.asarray(actions, dtype=np.int64)
        ev = self.ledger.evaluate(actions[:, :, None], source)
        k = len(ev)
        if k:
            i = int(np.argmax(returns[:k]))
            if returns[i] > self.best_return:
                self.best_return = float(returns[i])
                self.best_actions = actions[i].copy()
        self.games += k
        return ev

    def game_row(self, returns: np.ndarray) -> dict:
        """The :data:`GAME_COLUMNS` of a generation whose games returned ``returns``."""
        return {
            "games": self.games,
            "game_return": float(np.max(returns)) if len(returns) else float("nan"),
            "best_return": self.best_return,
            "best_norm_return": self.best_return / self.bound,
        }

    def game_state(self) -> dict:
        """The shared part of :meth:`agent_state`."""
        return {
            "games": self.games,
            "best_return": self.best_return,
            "best_actions": None if self.best_actions is None else self.best_actions.copy(),
        }

    def load_game_state(self, state: dict) -> None:
        self.games = int(state["games"])
        self.best_return = float(state["best_return"])
        best = state["best_actions"]
        self.best_actions = None if best is None else np.asarray(best, np.int64).copy()
