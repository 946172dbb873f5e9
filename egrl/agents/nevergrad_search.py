"""Nevergrad's NGOpt wizard on the map, asked and told one batch per generation.

The map is one ``ng.p.Array`` of shape ``[N, H]`` with integer casting, bounded to
``[-0.5, choices - 0.5]`` per head so that rounding gives every choice the same width.
On this parametrization NGOpt picks a discrete (1+1) evolution strategy
(``DoubleFastGADiscreteOnePlusOne`` with nevergrad 1.0.12, at the budgets and batch sizes
tried); ``ng.p.Choice`` or ``ng.p.TransitionChoice`` per head made NGOpt pick optimizers
that were several times slower per iteration and found worse maps on ResNet-50 at 600
iterations (``docs/agents.md``). The optimizer is built with ``num_workers = batch`` and
the maps the search may pay for as its budget
(:attr:`~egrl.ledger.Ledger.budget_maps`: ``cfg.budget`` on a deterministic
chip); a generation asks ``batch`` candidates, evaluates them in one call and tells each
its loss, the negated reward.

Nevergrad is an optional extra (``pip install -e ".[nevergrad]"``), imported only when
this agent is built. Its optimizers cannot be checkpointed without pickle, so the agent
records how many candidates each generation asked and the losses it told; resuming
rebuilds the optimizer with the same seed and replays those asks and tells (no hardware
evaluation), which restores its state exactly because nevergrad draws only from the
parametrization's seeded random state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.agents import register_agent
from egrl.agents.ask_tell import AskTellHistory
from egrl.agents.base import SearchAgent
from egrl.agents.options import (
    STARTS,
    parse_options,
    pay_prior_first,
    resolve_start,
    start_mappings,
    start_rule,
)
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import at_least, ruled

log = logging.getLogger(__name__)

#: NGOpt's first candidate (``dram`` is accepted as NNP-I's name for ``initial``)
INITS = ("center", *STARTS)


@dataclass(frozen=True)
class NevergradOptions:
    """Parameters of ``agent=nevergrad``.

    Attributes:
        batch: candidates per generation, NGOpt's ``num_workers``.
        start: the parametrization's initial value, NGOpt's first candidate: ``center``
            (the middle choice of each head: LLC on NNP-I), ``initial`` (the target's
            initial map; alias ``dram``, NNP-I's name for it), ``native`` (the
            compiler's map), ``fallback`` or ``random``.
        init: the former name of ``start`` (used when given).
    """

    batch: int = ruled(at_least(1), 20)
    start: str = ruled(start_rule(INITS), "center")
    init: str | None = ruled(start_rule(INITS, optional=True), None)


def import_nevergrad():
    """The ``nevergrad`` module, or an ImportError that says how to install it."""
    try:
        import nevergrad  # optional dependency
    except ImportError as err:
        raise ImportError(
            "agent 'nevergrad' needs the optional nevergrad package: "
            'pip install -e ".[nevergrad]"'
        ) from err
    return nevergrad


@register_agent("nevergrad")
class NevergradAgent(SearchAgent):
    """NGOpt with ask/tell in batches (see the module docstring)."""

    extra_columns = ("optimizer",)

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(NevergradOptions, cfg)
        self.init = resolve_start(o.start if o.init is None else o.init, env, self.name, INITS)
        self.ng = import_nevergrad()
        self.seed = int(self.rng.integers(0, 2**32 - 1))
        self.init_map = None  # int64 [N, H]; None: the center
        if self.init != "center":
            limit = cfg.prior_time_limit_s
            self.init_map = start_mappings(env, self.init, 1, self.rng, limit)[0]
        self.history = AskTellHistory("losses")
        self.optimizer = self._build()
        self.optimizer_name = str(getattr(self.optimizer.optim, "name", "NGOpt"))
        log.info("NGOpt picked %s", self.optimizer_name)

    def _build(self):
        """A fresh NGOpt over ``[N, H]`` integer arrays, seeded with :attr:`seed`."""
        ng, env = self.ng, self.env
        shape = (env.num_units, env.num_heads)
        upper = np.broadcast_to(env.num_choices - 0.5, shape).astype(np.float64)
        if self.init_map is not None:
            init = self.init_map.astype(np.float64)
        else:
            init = (upper - 0.5) / 2
        param = ng.p.Array(init=init, lower=np.full(shape, -0.5), upper=upper)
        param.set_integer_casting()
        param.random_state = np.random.RandomState(self.seed)
        return ng.optimizers.NGOpt(
            parametrization=param, budget=self.ledger.budget_maps, num_workers=self.options.batch
        )

    def _candidate_map(self, candidate) -> np.ndarray:
        """int64 ``[N, H]``: a candidate's value, clipped to the valid choices."""
        value = np.asarray(candidate.value, dtype=np.int64)
        return np.clip(value, 0, self.env.num_choices - 1)

    def _tell(self, candidates: list, losses: np.ndarray) -> None:
        """Tell the first ``len(losses)`` candidates their losses (float64 ``[B]``)."""
        for candidate, loss in zip(candidates, losses):
            self.optimizer.tell(candidate, float(loss))

    def step(self) -> dict:
        pay_prior_first(self.ledger, self.init, self.init_map)  # NGOpt's init too
        n = min(self.options.batch, self.ledger.remaining)
        if n <= 0:  # the prior's map spent the budget
            return {"optimizer": self.optimizer_name}
        with self.timer("evolution"):
            candidates = [self.optimizer.ask() for _ in range(n)]
        ev = self.ledger.evaluate(
            np.stack([self._candidate_map(c) for c in candidates]), "nevergrad"
        )
        losses = -np.asarray(ev.reward, dtype=np.float64)
        with self.timer("evolution"):
            self._tell(candidates, losses)
        self.history.add(n, losses)
        return {"optimizer": self.optimizer_name}

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {"seed": self.seed, **self.history.state_dict()}

    def load_agent_state(self, state: dict) -> None:
        """Rebuild NGOpt and replay the recorded asks and tells (no evaluations)."""
        self.seed = int(state["seed"])
        self.optimizer = self._build()
        self.history.replay(state, self.optimizer.ask, self._tell)
