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

**Physics first** (``agent.physics``; the default where the target has an NNP-I prior,
:mod:`egrl.agents.mbo.physics`): the prior's solved map is paid first; then each round
(:meth:`ModelBasedAgent._physics_round`) calibrates the prior to every map read, fits a
residual of what it still misses, solves the calibrated prior plus the residual exactly
for ``solutions`` distinct maps within the trust region's radius of the best maps read
(each checked by the chip's compiler; a refused map is excluded from later solves, never
paid), pays them, and grows or shrinks the region by whether the round beat the best map
read. A round whose solve finds nothing, and the round after the region collapsed, go to
the searchers above, scoring maps by the calibrated prior plus residual.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch

import policies
from egrl.agents import register_agent
from egrl.agents.annealing import neighbours
from egrl.agents.base import SCREEN_PHASE, SearchAgent
from egrl.agents.egrl.config import PolicyConfig
from egrl.agents.mbo.bandit import SearcherBandit
from egrl.agents.mbo.options import MBO_STARTS, MBOOptions
from egrl.agents.mbo.physics import (
    ChipReadings,
    PhysicsModel,
    TrustRegion,
    fit_model,
    solve_batch,
)
from egrl.agents.mbo.searchers import SEARCHERS, Context
from egrl.agents.options import parse_options, resolve_start, start_mappings
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.ledger import CHECK_PHASE
from egrl.validation import ConfigError
from hwmodels.nnpi.figures import ChipFigures
from hwmodels.nnpi.prior import NNPIPrior, own_prior
from hwmodels.nnpi.target import NNPITarget

log = logging.getLogger(__name__)

#: timer phases of a physics round: calibration and residual, and the solves
FIT_PHASE, SOLVE_PHASE = "fit", "solve"
#: file of a run's latest calibration (``hwmodel.params.prior={name: nnpi, calibration: ...}``)
CALIBRATION_FILE = "calibration.json"


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


def distance(maps: np.ndarray, anchors: np.ndarray, units: bool = False) -> np.ndarray:
    """int64 ``[P]``: the (unit, head) entries in which each of ``maps`` ``[P, N, H]``
    differs from the nearest of ``anchors`` ``[A, N, H]`` (``units``: the units, a unit
    differing when any of its heads does, as physics first's trust region counts them;
    0 for every map without anchors)."""
    if not len(anchors) or not len(maps):
        return np.zeros(len(maps), dtype=np.int64)
    differ = np.asarray(maps)[:, None] != np.asarray(anchors)[None]  # [P, A, N, H]
    differ = differ.any(axis=3) if units else differ.reshape(*differ.shape[:2], -1)
    return differ.sum(axis=2).min(axis=1)


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
        #: the NNP-I prior physics first calibrates and solves (None: physics off)
        self.datasheet = physics_prior(env, o.physics)
        super().__init__(env, cfg, run_dir)
        start = "prior" if self.datasheet is not None and o.start == "none" else o.start
        self.start = resolve_start(start, env, self.name, MBO_STARTS)
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
        self._value = self.screen.value  # what the searchers score maps by
        if self.datasheet is not None:
            self._init_physics()

    def _init_physics(self) -> None:
        """Physics first's state: the chip's readings (told of every reading of the run's
        record), the trust region, the maps the compiler refused, the round's model."""
        o = self.options
        self.readings = ChipReadings(self.env)
        self.ledger.record.subscribe(self.readings.read, ChipReadings.kinds)
        self.region = TrustRegion(o.radius, o.radius_min, o.radius_max)
        #: solver maps the compiler refused: excluded from every later solve
        self.refused: list[np.ndarray] = []
        self.model: PhysicsModel | None = None
        self.fitted_on = 0  # readings the model was fitted on
        self.fit_start: ChipFigures | None = None  # the figures its calibration started at
        #: the next round goes to the searchers (the region collapsed)
        self.searchers_next = False
        self.physics_row: dict = {}
        self.extra_columns += ("radius", "solves", "solver_refused", "model_spread")
        self.extra_columns += (f"t_{FIT_PHASE}", f"t_{SOLVE_PHASE}")
        for phase in (FIT_PHASE, SOLVE_PHASE):
            self.timer.totals.setdefault(phase, 0.0)
        self._value = self._physics_value

    def _make_gnn(self) -> torch.nn.Module:
        """A new Graph U-Net policy for the ``egrl`` searcher (``gnn_width``, ``gnn_depth``;
        the EA's attention heads)."""
        width, depth = self.options.gnn_width, self.options.gnn_depth
        in_dim, choices = int(self.graph.x.shape[1]), [int(c) for c in self.env.num_choices]
        heads = PolicyConfig.heads
        return policies.GraphUNetActor(
            in_dim, choices, hidden=width, out=width, depth=depth, heads=heads
        )

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
        if self.datasheet is not None:
            maps, owners = self._physics_round(shares)
        elif screen.active:
            maps, owners = self._search(shares)
        if maps is None or not len(maps):  # no model yet, or nothing new it would pay
            maps, owners = self._fresh_batch()
        best_before = screen.best_paid()
        fastest = self.readings.best(1)[1] if self.datasheet is not None else None
        ev = self.ledger.evaluate(maps, "mbo")
        if (owners >= 0).any():
            self.bandit.update(owners[: len(ev)], np.asarray(ev.reward, np.float64), best_before)
        if fastest is not None:
            self._update_region(fastest)
            self._fit()  # on this round's readings too: the next round's model, the saved calibration
            row |= self.physics_row
        return row | {"model_calls": self.model_calls, "checks": self.ledger.checks}

    def _pay_start(self) -> None:
        """Pay the start map (``agent.start``; the prior's as the compiler accepts it) alone,
        as the run's first map: the searchers' elites start from it."""
        limit = self.cfg.prior_time_limit_s
        self.ledger.evaluate(start_mappings(self.env, self.start, 1, self.rng, limit), self.start)

    # ---------------------------------------------------------- physics first
    def _physics_round(self, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One physics round's maps to pay ``[B, N, H]`` and the searcher that found each
        (-1: the solver), see the module docstring."""
        o = self.options
        maps = self._fit()
        self.physics_row = {
            "radius": self.region.radius if o.region else np.nan,
            "solves": 0,
            "solver_refused": 0,
            "model_spread": self.model.spread,
        }
        if o.acquire == "searchers" or self.searchers_next:
            self.searchers_next = False
            return self._search(shares)
        found = self._solve(maps)
        if not len(found):
            log.info(
                "physics: no map solved in the region of radius %d: the searchers' round",
                self.region.radius,
            )
            if o.region:
                self.region.radius = min(2 * self.region.radius, self.region.high)
            return self._search(shares)
        return found, np.full(len(found), -1, dtype=np.int64)

    def _fit(self) -> np.ndarray:
        """Calibrate the prior and fit the residual on every map read, unless the model
        already is (its seed: the run's and the count of readings, so that a resumed run
        fits the same model); the maps read ``[M, N, H]``. The calibration is written to
        the run directory."""
        o = self.options
        maps, latency = self.readings.arrays()
        if self.model is not None and self.fitted_on == len(maps):
            return maps
        if self.model is not None:  # start at the last fit (a resumed run: its start)
            calibration = self.model.calibration
            self.fit_start = None if calibration is None else calibration.figures
        with self.timer(FIT_PHASE):
            self.model = fit_model(
                self.env.target,
                self.datasheet,
                maps,
                latency,
                self.env.num_choices,
                o.calibrate,
                o.residual,
                o.prior_weight,
                int(self._round_rng().integers(2**31)),
                warm=self.fit_start,
            )
        self.fitted_on = len(maps)
        if self.run_dir is not None and self.model.calibration is not None:
            self.model.calibration.save(self.run_dir / CALIBRATION_FILE)
        return maps

    def _solve(self, read: np.ndarray) -> np.ndarray:
        """The round's solver maps ``[<= solutions, N, H]`` (none read, none refused), the
        best by the model when more were solved (a forest residual's re-ranking): first
        ``anywhere`` of them solved outside the trust region, then the rest inside it."""
        o = self.options
        anchors, _ = self.readings.best(o.anchors)
        radius = self.region.radius if o.region else None
        count = min(o.solved_pool, max(self.ledger.remaining, 0))
        rng = self._round_rng()
        # (radius, maps) of each solve: first `anywhere` maps over every unit, then the
        # rest in the region (maps None: what the round still lacks)
        far = radius is not None and o.anywhere and count
        parts = [(None, min(o.anywhere, count))] if far else []
        found = np.zeros((0, *read.shape[1:]), np.int64)
        solves = refused = 0
        with self.timer(SOLVE_PHASE):
            for part_radius, part_count in [*parts, (radius, None)]:
                exclude = np.concatenate([read, found, self._refused_maps(read)])
                if part_radius is not None:  # only maps the region holds can be solutions
                    exclude = exclude[distance(exclude, anchors, units=True) <= part_radius]
                wanted = count - len(found) if part_count is None else part_count
                solved, info = self._solve_part(anchors, part_radius, exclude, wanted, rng)
                found = np.concatenate([found, solved])
                solves, refused = solves + info["solves"], refused + info["refused"]
        self.physics_row |= {"solves": solves, "solver_refused": refused}
        if len(found) > o.solutions:
            order = np.argsort(self.model.latency_s(found), kind="stable")
            found = found[order[: o.solutions]]
        return found

    def _solve_part(
        self,
        anchors: np.ndarray,
        radius: int | None,
        exclude: np.ndarray,
        count: int,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, dict]:
        """Up to ``count`` maps solved within ``radius`` of ``anchors`` (None: anywhere),
        none of ``exclude`` (:func:`~egrl.agents.mbo.physics.solve_batch`)."""
        o = self.options
        return solve_batch(
            self.model,
            anchors[0],
            anchors,
            radius,
            exclude,
            count,
            o.solve_time_s,
            self._accepts,
            rng,
            o.window,
        )

    def _refused_maps(self, read: np.ndarray) -> np.ndarray:
        """int64 ``[R, N, H]``: the maps the chip's compiler refused so far."""
        return np.asarray(self.refused, np.int64).reshape(-1, *read.shape[1:])

    def _round_rng(self) -> np.random.Generator:
        """A generator of the run's seed and the count of readings: a resumed run, which
        fits again the model the interrupted run fitted after its last round, draws what
        the uninterrupted run drew."""
        return np.random.default_rng([self.cfg.seed, len(self.readings)])

    def _accepts(self, maps: np.ndarray) -> np.ndarray:
        """bool ``[B]``: the chip's compiler accepts each map ``[B, N, H]`` as it is (a
        refused one is kept, to be excluded from every later solve)."""
        _, valid = self._accepted(maps)
        self.refused.extend(np.asarray(maps, np.int64)[~valid])
        return valid

    def _update_region(self, fastest_before: np.ndarray) -> None:
        """Grow or shrink the trust region by whether the round read a map faster than
        ``fastest_before`` (the best latency read before it, ``[<= 1]``)."""
        if not self.options.region or not len(fastest_before):
            return
        improved = bool(self.readings.best(1)[1][0] < fastest_before[0])
        if self.region.update(improved):
            log.info("physics: the trust region collapsed: the next round is the searchers'")
            self.searchers_next = True

    def _physics_value(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[P]``: what the searchers score maps ``[P, N, H]`` by in physics mode:
        the speedup over the compiler's map the calibrated prior plus residual predicts,
        the measured one for a map read (the searchers run only after the round's fit)."""
        base = self.env.baseline_latency_s
        predicted = base / self.model.latency_s(maps)
        read = self.readings.latency_of(maps)
        return np.where(np.isnan(read), predicted, base / read)

    # ------------------------------------------------------------------ search
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
            values = self._value(maps)
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
        state = {"bandit": self.bandit.state_dict(), "model_calls": self.model_calls}
        if self.datasheet is not None:
            state["physics"] = {
                "readings": self.readings.state_dict(),
                "region": self.region.state_dict(),
                "refused": np.asarray(self.refused, np.int16),
                "searchers_next": self.searchers_next,
            }
            if self.fit_start is not None:
                state["physics"]["fit_start"] = self.fit_start.to_dict()
        return state

    def load_agent_state(self, state: dict) -> None:
        self.bandit.load_state_dict(state["bandit"])
        self.model_calls = int(state["model_calls"])
        physics = state.get("physics")
        if self.datasheet is not None and physics is not None:
            self.readings.load_state_dict(physics["readings"])
            self.region = TrustRegion(**physics["region"])
            self.refused = list(np.asarray(physics["refused"], np.int64))
            self.searchers_next = bool(physics["searchers_next"])
            start = physics.get("fit_start")
            self.fit_start = None if start is None else ChipFigures.from_dict(start)


def physics_prior(env: Env, physics: str) -> NNPIPrior | None:
    """The NNP-I prior physics first calibrates and solves (``agent.physics``; None: off).

    ``auto``: the external chip's datasheet (``hwmodel.params.prior``) where it has one;
    ``on``: that, or the built-in nnpi's own model. Raises ConfigError where ``on`` has
    no NNP-I prior to read."""
    target = env.target
    prior = getattr(target, "prior", None)
    if physics == "off" or (physics == "auto" and not isinstance(prior, NNPIPrior)):
        return None
    if isinstance(prior, NNPIPrior):
        return prior
    if isinstance(target, NNPITarget):
        return own_prior(target)
    raise ConfigError(
        [
            f"agent.physics=on is invalid on {type(target).__name__}: physics first needs an "
            "NNP-I prior (an external chip with hwmodel.params.prior={name: nnpi, ...}, or "
            "hwmodel=nnpi); allowed here: auto or off"
        ]
    )
