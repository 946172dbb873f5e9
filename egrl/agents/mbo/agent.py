"""Model-based optimisation (``agent=mbo``): the model searches as deeply as an autotuner's,
with every searcher's moves, on maps the compiler accepts; the board confirms.

One generation is one round:

1. the screen's model is refitted on every paid reading (the base does it before the
   step: ``screen=forest`` by default, ``gnn`` selectable; ``screen.init_from`` adds earlier
   runs of the chip, so that the first round already searches a model);
2. the searchers (:mod:`egrl.agents.mbo.searchers`: EA's, GA's and SA's moves) restart from
   the best paid maps (at most ``elites`` of the starts) and fresh maps, and run ``steps``
   steps in lock-step, about ``depth`` model calls in all, each searcher's share of them
   given by the bandit (:mod:`egrl.agents.mbo.bandit`);
3. every map the search makes goes through the target's compiler first (``Target.check``,
   with ``check``): the search keeps the map as the compiler would run it, its repair if
   refused, so that the model only ever scores, and the board only ever runs, maps the
   compiler accepts. A target that cannot be asked is checked by the model alone;
4. the model scores the maps by the screen's acquisition (``screen.kappa``,
   ``screen.acquisition``; a paid map by its measured reward); maps farther than
   ``trust_radius`` entries from every one of the best paid maps score ``-inf``;
5. the round pays a batch of ``batch`` unseen maps: the best by the model, except a share
   ``screen.explore`` drawn at random from the rest of what the search visited;
6. the bandit learns which searcher found the maps that paid off.

Before the model exists (fewer than the screen's warmup or minimum of readings), a round
pays fresh maps the compiler accepts.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from egrl.agents import register_agent
from egrl.agents.annealing import neighbours
from egrl.agents.base import SCREEN_PHASE, SearchAgent
from egrl.agents.egrl.config import PolicyConfig
from egrl.agents.mbo.bandit import SearcherBandit
from egrl.agents.mbo.options import MBO_STARTS, MBOOptions
from egrl.agents.mbo.searchers import SEARCHERS, Context
from egrl.agents.options import parse_options, resolve_start, start_mappings
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.ledger import CHECK_PHASE
from egrl.validation import ConfigError
from policies import GraphUNetActor


def spaced(maps: np.ndarray, order: np.ndarray, count: int, spacing: int) -> np.ndarray:
    """int64 ``[<= count]``: the first rows of ``order`` (indices into ``maps`` ``[V, N,
    H]``, best first) whose map differs in at least ``spacing`` entries from every row
    taken before it."""
    if spacing <= 1:
        return order[:count]
    flat = maps.reshape(len(maps), -1)
    taken: list[int] = []
    for row in order.tolist():
        if len(taken) == count:
            break
        if not taken or (flat[taken] != flat[row]).sum(axis=1).min() >= spacing:
            taken.append(row)
    return np.array(taken, dtype=np.int64)


def distance(maps: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """int64 ``[P]``: the (unit, head) entries in which each of ``maps`` ``[P, N, H]``
    differs from the nearest of ``anchors`` ``[A, N, H]`` (0 for every map without
    anchors)."""
    if not len(anchors):
        return np.zeros(len(maps), dtype=np.int64)
    flat, centres = maps.reshape(len(maps), -1), anchors.reshape(len(anchors), -1)
    return (flat[:, None, :] != centres[None]).sum(axis=2).min(axis=1)


@register_agent("mbo")
class ModelBasedAgent(SearchAgent):
    """Model-based optimisation over every searcher (see the module docstring)."""

    screens = True
    needs_model = "agent.depth (model calls per paid batch)"

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        o = self.options = parse_options(MBOOptions, cfg)
        target = env.target
        if not target.checks and not target.description_names and cfg.screen.prior is None:
            raise ConfigError(
                [
                    f"agent=mbo is invalid on {type(target).__name__}: the target neither "
                    "describes its maps nor has a compiler to ask (a game: agent=muzero)"
                ]
            )
        super().__init__(env, cfg, run_dir)
        self.start = resolve_start(o.start, env, self.name, MBO_STARTS)
        self.searcher_names = list(o.searchers)
        self.bandit = SearcherBandit(self.searcher_names, o.min_share, o.discount)
        #: maps the model scored so far
        self.model_calls = 0
        self.extra_columns = (
            "model_calls",
            "checks",
            *(f"share_{s}" for s in self.searcher_names),
            f"t_{CHECK_PHASE}",
        )
        self.timer.totals.setdefault(CHECK_PHASE, 0.0)
        #: the decision graph the ``egrl`` searcher's policies read
        self.graph = env.graph

    def _make_gnn(self) -> torch.nn.Module:
        """A new Graph U-Net policy for the ``egrl`` searcher (``gnn_width``, ``gnn_depth``;
        the EA's attention heads)."""
        width, depth = self.options.gnn_width, self.options.gnn_depth
        in_dim, choices = int(self.graph.x.shape[1]), [int(c) for c in self.env.num_choices]
        heads = PolicyConfig.heads
        return GraphUNetActor(in_dim, choices, hidden=width, out=width, depth=depth, heads=heads)

    # ------------------------------------------------------------------ round
    def step(self) -> dict:
        screen = self.screen
        shares = self.bandit.shares()
        row = {"model_calls": self.model_calls, "checks": self.ledger.checks}
        row |= {f"share_{s}": float(v) for s, v in zip(self.searcher_names, shares)}
        if self.start != "none" and not self.ledger.proposals:
            self._pay_start()
            if self.ledger.done:  # the start map spent the budget
                return row
        maps = owners = None
        if screen.active:
            maps, owners = self._search(shares)
        if maps is None or not len(maps):  # no model yet, or nothing new it would pay
            maps, owners = self._fresh_batch()
        best_before = screen.best_paid()
        ev = self.ledger.evaluate(maps, "mbo")
        if (owners >= 0).any():
            self.bandit.update(owners[: len(ev)], np.asarray(ev.reward, np.float64), best_before)
        return row | {"model_calls": self.model_calls, "checks": self.ledger.checks}

    def _pay_start(self) -> None:
        """Pay the start map (``agent.start``; the prior's as the compiler accepts it) alone,
        as the run's first map: the searchers' elites start from it."""
        limit = self.cfg.prior_time_limit_s
        self.ledger.evaluate(start_mappings(self.env, self.start, 1, self.rng, limit), self.start)

    def _search(self, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One round of model search: the maps to pay ``[B, N, H]`` and the searcher that
        found each, int64 ``[B]``."""
        o = self.options
        width = max(len(self.searcher_names), o.depth // (o.steps + 1))
        counts = np.maximum(2, np.round(shares * width).astype(np.int64))
        starts = np.concatenate([self._starts(int(c)) for c in counts])
        anchors = None  # the best paid maps, the trust region's centres
        if o.trust_radius is not None:
            anchors = self._best_paid(max(1, len(self.searcher_names)))
        maps, values = self._score(starts, anchors)
        owner = np.repeat(np.arange(len(counts)), counts)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        context = Context(self.env.num_choices, o.steps, self.graph, self._make_gnn, self.generator)
        with self.timer("evolution"):
            searchers = [
                SEARCHERS[name](maps[a:b], values[a:b], context, self.rng)
                for name, a, b in zip(self.searcher_names, bounds[:-1], bounds[1:])
            ]
        visited = [(maps, values, owner)]
        for _ in range(o.steps):
            with self.timer("evolution"):
                asked = np.concatenate([s.ask(self.rng) for s in searchers])
            maps, values = self._score(asked, anchors)
            with self.timer("evolution"):
                for s, a, b in zip(searchers, bounds[:-1], bounds[1:]):
                    s.tell(maps[a:b], values[a:b], self.rng)
            visited.append((maps, values, owner))
        with self.timer(SCREEN_PHASE):
            return self._pick(*(np.concatenate(parts) for parts in zip(*visited)))

    def _starts(self, count: int) -> np.ndarray:
        """int64 ``[count, N, H]``: the best paid maps (at most ``elites`` of them, distinct)
        and fresh maps (random; with a trust region, random neighbours of the best)."""
        best = self._best_paid(int(math.floor(self.options.elites * count)))
        fresh = count - len(best)
        radius = self.options.trust_radius
        if radius is not None and len(best):
            pick = self.rng.integers(0, len(best), size=fresh)
            moves = min(int(radius), self.env.num_units * self.env.num_heads)
            near = neighbours(best[pick], self.env.num_choices, moves, self.rng)
            return np.concatenate([best, near])
        return np.concatenate([best, self.env.random_mappings(fresh, self.rng)])

    def _best_paid(self, count: int) -> np.ndarray:
        """int64 ``[<= count, N, H]``: the distinct paid maps with the best readings."""
        shape = (0, self.env.num_units, self.env.num_heads)
        maps, rewards = self.screen.training_data()
        if count <= 0 or not len(rewards):
            return np.zeros(shape, dtype=np.int64)
        order = np.argsort(-rewards, kind="stable")
        _, first = np.unique(maps[order].reshape(len(order), -1), axis=0, return_index=True)
        return maps[order[np.sort(first)[:count]]].astype(np.int64)

    def _accepted(self, maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``maps`` ``[P, N, H]`` as the compiler would run them (its repair of the ones it
        refuses) and bool ``[P]``, whether it accepts each as it is; unchanged and all
        accepted without ``check`` or a target to ask."""
        found = self.ledger.check(maps) if self.options.check else None
        if found is None:
            return maps, np.ones(len(maps), dtype=bool)
        return np.asarray(found.rectified, dtype=np.int64), np.asarray(found.valid, dtype=bool)

    def _score(
        self, maps: np.ndarray, anchors: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The maps the search keeps ``[P, N, H]`` (with ``refused=repair`` the compiler's
        repairs) and their values float64 ``[P]`` (the screen's
        :meth:`~egrl.screening.screen.Screen.value`; ``-inf`` for a refused map with
        ``refused=drop``, and farther than ``trust_radius`` from every one of ``anchors``
        ``[A, N, H]``, the trust region's centres, when given)."""
        repaired, valid = self._accepted(maps)
        drop = self.options.refused == "drop"
        if not drop:
            maps = repaired
        with self.timer(SCREEN_PHASE):
            values = self.screen.value(maps)
            if drop:
                values = np.where(valid, values, -np.inf)
            if anchors is not None:
                near = distance(maps, anchors) <= self.options.trust_radius
                values = np.where(near, values, -np.inf)
        self.model_calls += len(maps)
        return maps, values

    def _pick(
        self, maps: np.ndarray, values: np.ndarray, owners: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The batch to pay from what the search visited (``maps`` ``[V, N, H]``,
        ``values`` ``[V]``, ``owners`` ``[V]``): distinct maps neither paid nor known to the
        measure cache, the best by value, and a share ``screen.explore`` at random from the
        rest (rounded at random); each with the searcher that visited it first."""
        screen = self.screen
        keys = [m.tobytes() for m in maps.astype(np.int16)]
        first: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        rows = np.array(sorted(first.values()), dtype=np.int64)
        rows = rows[~screen.is_paid(maps[rows]) & ~screen.known(maps[rows])]
        rows = rows[np.isfinite(values[rows])]
        batch = min(self.options.batch, self.ledger.remaining, len(rows))
        share = screen.config.explore * batch
        explore = int(share) + int(self.rng.random() < share - int(share))
        order = rows[np.argsort(-values[rows], kind="stable")]
        top = spaced(maps, order, batch - explore, self.options.spacing)
        rest = np.setdiff1d(order, top)
        drawn = self.rng.choice(rest, size=min(explore, len(rest)), replace=False)
        chosen = np.concatenate([top, drawn]).astype(np.int64)
        return maps[chosen], owners[chosen]

    def _fresh_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """Before there is a model: ``batch`` fresh maps the compiler accepts; no searcher
        owns them (-1). The compiler's own map is not among them: paid first, it anchored
        every later round on its plateau of maps that read the same latency."""
        count = min(self.options.batch, max(self.ledger.remaining, 0))
        maps = self._accepted(self.env.random_mappings(count, self.rng))[0]
        return maps, np.full(len(maps), -1, dtype=np.int64)

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {"bandit": self.bandit.state_dict(), "model_calls": self.model_calls}

    def load_agent_state(self, state: dict) -> None:
        self.bandit.load_state_dict(state["bandit"])
        self.model_calls = int(state["model_calls"])
