"""Zero-shot: a frozen pretrained GNN policy's maps, as an ``egrl-train`` run.

``egrl-train agent=zero-shot agent.policy=PATH`` reads a policy snapshot (a
``.safetensors`` file written by :func:`policies.snapshot.write_snapshot`, or a run directory:
its newest snapshot in ``policies/``) and maps the run's workload with it, never updating
it. The first generation measures the policy's greedy map (the argmax of every decision:
the zero-shot prediction); every later one draws ``batch`` maps from its softmax with the
agent's ``torch.Generator``, seeded by the run's seed, and measures them in one call.

As for every agent, a map measured before is answered from the measure cache and not
paid (on a deterministic target), so the budget counts distinct maps. A generation draws
batches until one pays for a new map. A policy whose softmax has (almost) collapsed may
run out of new maps: after ``max_draw_factor * budget`` draws the run stops early
(``stop_reason``, ``stopped_early`` in ``best_mapping.json``).

This is the sampling of the multi-chip study's former ``zero_shot_run``
(``egrl/experiments/mcm_zero_shot.py``, removed: same greedy map first, same generator
and batches). Its budget check counted each new map of a batch twice, so once fewer than
``2 x batch`` maps were left it took fewer maps per batch; this agent pays the first
``budget`` distinct maps drawn, and the curves agree up to there. The hardware model and
the reward are the run's own (``hwmodel=``, ``reward=``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from egrl.agents import register_agent
from egrl.agents.base import SearchAgent
from egrl.agents.egrl.init_from import list_snapshots
from egrl.agents.egrl.transfer import check_compatible
from egrl.agents.options import option_error, parse_options
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import Rule, at_least, ruled
from policies.categorical import sample_maps, to_numpy_maps
from policies.snapshot import POLICY_KINDS, PolicyError, Snapshot, load_actor, read_snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZeroShotOptions:
    """Parameters of ``agent=zero-shot``.

    Attributes:
        policy: a policy snapshot (``.safetensors``) or a run directory (its newest
            snapshot in ``policies/``); required.
        kind: which policy of the snapshot maps: ``learner`` or ``champion``.
        batch: maps drawn per generation after the greedy one (one ``evaluate`` call).
        max_draw_factor: draws allowed per unit of budget before the run stops early.
    """

    policy: str | None = None
    kind: str = ruled(Rule(str, choices=POLICY_KINDS), "learner")
    batch: int = ruled(at_least(1), 100)
    max_draw_factor: int = ruled(at_least(1), 10)


def resolve_snapshot(agent: str, path: str | Path | None) -> Snapshot:
    """The snapshot ``agent.policy`` names (a file, or a run directory's newest snapshot).

    Raises:
        egrl.validation.ConfigError: no path, nothing there, or no readable snapshot
            (one line naming the agent and the option).
    """
    if path is None or str(path) == "":
        raise option_error(
            agent, "option policy is required: a policy snapshot (.safetensors) or a run directory"
        )
    path = Path(str(path))
    try:
        if path.is_file():
            return read_snapshot(path)
        if path.is_dir():
            return list_snapshots(path)[-1]
    except PolicyError as exc:
        raise option_error(agent, f"option policy={path} is invalid: {exc}") from exc
    raise option_error(agent, f"option policy={path} is invalid: no such file or directory")


@register_agent("zero-shot")
class ZeroShot(SearchAgent):
    """A frozen policy's greedy map, then maps sampled from it (see the module docstring)."""

    extra_columns = ("greedy_speedup", "draws")

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(ZeroShotOptions, cfg)
        self.snapshot = resolve_snapshot(self.name, o.policy)
        self._load_policy()
        self.draws = 0
        self.greedy_speedup = float("nan")

    def _load_policy(self) -> None:
        try:
            check_compatible(self.snapshot, self.env)
            self.actor = load_actor(self.snapshot, self.options.kind)
        except PolicyError as exc:
            raise option_error(
                self.name, f"option policy={self.snapshot.path} is invalid: {exc}"
            ) from exc
        log.info("zero-shot: the %r policy of %s", self.options.kind, self.snapshot.path)
        self._logits: torch.Tensor | None = None
        self._probs: np.ndarray | None = None

    def _forward(self) -> None:
        """The frozen policy's logits ``[N, H, C]`` on the decision graph (once)."""
        with torch.no_grad():
            logits = self.actor(self.env.graph.x, self.env.graph.edge_index)
        self._logits = logits
        self._probs = torch.softmax(logits, dim=-1).numpy()

    @property
    def max_draws(self) -> int:
        return self.options.max_draw_factor * self.cfg.budget

    def _measure(self, maps: torch.Tensor):
        batch = to_numpy_maps(maps)
        probs = None
        if self.env.wants_probabilities:
            probs = np.broadcast_to(self._probs, (len(batch), *self._probs.shape))
        self.draws += len(batch)
        return self.ledger.evaluate(batch, "zero-shot", probs=probs)

    def step(self) -> dict:
        if self._logits is None:
            with self.timer("inference"):
                self._forward()
        if self.draws == 0:
            greedy = sample_maps(self._logits, 1, None, greedy=True)
            self.greedy_speedup = float(self._measure(greedy).speedup[0])
        else:
            before = self.ledger.iterations
            while (
                self.ledger.iterations == before
                and not self.ledger.done
                and self.draws < self.max_draws
            ):
                n = min(self.options.batch, self.max_draws - self.draws)
                with self.timer("inference"):
                    maps = sample_maps(self._logits, n, self.generator)
                self._measure(maps)
        if not self.ledger.done and self.draws >= self.max_draws:
            self.stop_reason = (
                f"out of new maps: {self.ledger.iterations} distinct maps of budget {self.cfg.budget} "
                f"after {self.draws} draws (max_draw_factor={self.options.max_draw_factor})"
            )
            log.warning("agent %r on %s: %s", self.name, self.env.workload.name, self.stop_reason)
        return {"greedy_speedup": self.greedy_speedup, "draws": self.draws}

    def best_extras(self) -> dict:
        """``best_mapping.json`` also names the snapshot that mapped."""
        return {"policy": {"snapshot": str(self.snapshot.path), "kind": self.options.kind}}

    def agent_state(self) -> dict:
        return {
            "draws": self.draws,
            "greedy_speedup": self.greedy_speedup,
            "snapshot": str(self.snapshot.path),
        }

    def load_agent_state(self, state: dict) -> None:
        self.draws = int(state["draws"])
        self.greedy_speedup = float(state["greedy_speedup"])
        saved = Path(state["snapshot"])
        if saved != Path(self.snapshot.path):
            # a run directory's newest snapshot may have changed since: keep the run's own
            log.info("zero-shot: resuming with the run's snapshot %s", saved)
            self.snapshot = resolve_snapshot(self.name, saved)
            self._load_policy()
