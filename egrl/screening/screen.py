"""The screen: a cost model trained on the run's paid measurements picks what to measure.

An agent that screens proposes ``screen.pool`` times its usual batch of candidate maps and
asks :meth:`Screen.select` (or :meth:`Screen.choose`, one map per member or chain) which
to measure. Maps the measure cache already knows, and repeats, cost nothing and are
never counted against what is kept; of the new ones, the model's top-ranked are kept,
except a share ``screen.explore`` drawn at random from the rest, so that the model also
sees maps it ranks low. Before ``screen.warmup`` paid measurements (and while fewer than
:data:`MIN_FIT` are known) there is no model: the agent's first proposals are kept, as
without screening.

The run's record tells it of every paid measurement (:meth:`Screen.read`); the model is refitted
once per generation on all of them (:meth:`Screen.refit`, capped at ``screen.max_train``
maps drawn at random), with a seed derived from the run's seed and the number of
measurements, so that a fit depends on the data alone. The screen's state is its data and
its random generator: a resumed run refits the same model and continues identically.

Per generation the screen reports how well its model ranked the maps that were paid
(:meth:`Screen.take_metrics`): ``screen_spearman``, the rank correlation of predicted
against measured reward, and ``screen_top_quarter``, the share of the batch's true top
quarter the model had in its own top quarter (NaN while there is no model).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from egrl.measure_cache import MeasureCache
from egrl.screening.base import CRITIC_MODELS, NAMES, CostModel, Domain, Measured
from egrl.screening.earlier import EarlierRunError, as_paths, load_earlier, make_prior
from egrl.screening.models import MODELS, build_model
from egrl.screening.rules import option_problems
from egrl.validation import ConfigError

if TYPE_CHECKING:
    from egrl.config import ScreenConfig
    from egrl.record import Reading
    from egrl.screening.critic import LearnerCritic

log = logging.getLogger(__name__)

#: metrics.csv columns of a screening run
SCREEN_COLUMNS = ("screen_spearman", "screen_top_quarter")
#: fewest paid measurements a model is fitted on
MIN_FIT = 8
#: streams of the run's seed: the explore draws and the fits
_EXPLORE_STREAM = 0x5C12EE
_FIT_STREAM = 0x5C12EF


def spearman(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Rank correlation of two float arrays ``[B]`` (average ranks for ties); NaN for fewer
    than two values or a constant one."""
    from scipy.stats import rankdata  # start-up time

    if len(predicted) < 2:
        return float("nan")
    a, b = rankdata(predicted), rankdata(measured)
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else float("nan")


def top_quarter(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Share of the ``ceil(B / 4)`` best measured maps that are among the ``ceil(B / 4)``
    best predicted ones (ties: the earlier map first); NaN for fewer than two maps."""
    n = len(predicted)
    if n < 2:
        return float("nan")
    k = math.ceil(n / 4)
    true_top = np.argsort(-measured, kind="stable")[:k]
    model_top = np.argsort(-predicted, kind="stable")[:k]
    return float(len(np.intersect1d(true_top, model_top)) / k)


class Screen:
    """A cost model that ranks candidate maps before any is paid (see the module docstring).

    Args:
        config: the run's ``screen`` section (``name`` a model of
            :data:`egrl.screening.models.MODELS`).
        domain: the run's workload on its target, as the model reads it.
        cache: the agent's measure cache (which maps are free).
        seed: the run's seed.
        earlier: paid measurements of earlier runs on the same target
            (``screen.init_from``), fitted beside the run's own; they do not count
            towards the warmup.
    """

    def __init__(
        self,
        config: ScreenConfig,
        domain: Domain,
        cache: MeasureCache,
        seed: int,
        earlier: list[Measured] | None = None,
    ) -> None:
        self.config = config
        self.domain = domain
        self.cache = cache
        self.seed = int(seed)
        self.earlier: list[Measured] = list(earlier or [])
        self.rng = np.random.default_rng(np.random.SeedSequence([self.seed, _EXPLORE_STREAM]))
        self.model: CostModel | None = None
        #: the agent's learned critic (:meth:`attach_critic`), what ``screen=critic`` ranks with
        self.critic: LearnerCritic | None = None
        self._fitted_on: int | tuple | None = None  # what the model was fitted on (_stamp)
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (maps, rewards) observed
        self._maps: np.ndarray | None = None  # int16 [M, N, H], the chunks joined
        self._rewards = np.zeros(0, dtype=np.float64)
        self._batch: list[tuple[np.ndarray, np.ndarray]] = []  # paid under the model
        self._paid: dict[bytes, float] = {}  # each paid map (int16 bytes): its reward

    def attach_critic(self, critic: LearnerCritic) -> None:
        """The critic of the agent's learner, for a model of
        :data:`~egrl.screening.base.CRITIC_MODELS` (``screen=critic``): such a model is
        fitted only once the critic has trained (:attr:`LearnerCritic.trained`), and again
        whenever it has changed (:attr:`LearnerCritic.version`); other models ignore it."""
        self.critic = critic

    def _stamp(self, count: int) -> int | tuple:
        """What a fit depends on: the measurements, and the critic's version for a
        critic model (a resumed run refits from the same critic)."""
        if self.config.name in CRITIC_MODELS and self.critic is not None:
            return count, self.critic.version
        return count

    # ------------------------------------------------------------------ data
    def __len__(self) -> int:
        """Paid measurements observed."""
        return len(self._rewards) + sum(len(r) for _, r in self._chunks)

    @property
    def active(self) -> bool:
        """A model is fitted: candidates are ranked by it."""
        return self.model is not None

    def observe(self, maps: np.ndarray, rewards: np.ndarray) -> None:
        """Record paid measurements: maps int ``[B, N, H]`` as proposed, rewards float ``[B]``.

        Non-finite rewards are left out. While a model is fitted, these maps enter this
        generation's quality metrics (:meth:`take_metrics`).
        """
        rewards = np.asarray(rewards, dtype=np.float64)
        keep = np.isfinite(rewards)
        if not keep.any():
            return
        maps = np.asarray(maps, dtype=np.int64)[keep].astype(np.int16)
        rewards = rewards[keep].copy()
        if self.model is not None:
            self._batch.append((maps, rewards))
        self._chunks.append((maps, rewards))
        self._paid.update(zip((m.tobytes() for m in maps), rewards.tolist()))

    def read(self, reading: Reading) -> None:
        """Learn from one reading of the run's record (:class:`egrl.record.Reading`): its
        measured paid maps (a failed map is paid, but its reward is the penalty for a map
        the chip did not run), and a free map not seen yet (the compiler's, measured when
        the target was bound)."""
        measured, rewards = reading.measured, reading.evaluation.reward
        if measured.any():
            self.observe(reading.maps[measured], rewards[measured])
        if not reading.paid.all():
            free = ~reading.paid
            self.observe_unseen(reading.maps[free], rewards[free])

    def training_data(self) -> tuple[np.ndarray, np.ndarray]:
        """Every observed map int16 ``[M, N, H]`` and its reward float64 ``[M]``."""
        if self._chunks:
            maps = [m for m, _ in self._chunks]
            rewards = [r for _, r in self._chunks]
            if self._maps is not None:
                maps.insert(0, self._maps)
                rewards.insert(0, self._rewards)
            self._maps = np.concatenate(maps)
            self._rewards = np.concatenate(rewards)
            self._chunks = []
        if self._maps is None:
            return np.zeros((0, 0, 0), dtype=np.int16), self._rewards
        return self._maps, self._rewards

    def refit(self) -> bool:
        """Fit a new model on every paid measurement so far (and the earlier runs'), once
        past the warmup (the run's own measurements) and when there is something new;
        returns whether it fitted. With earlier runs and ``warmup`` 0 the first
        generation is already ranked."""
        count = len(self)
        earlier = sum(len(d) for d in self.earlier)
        if (
            count < self.config.warmup
            or count + earlier < MIN_FIT
            or self._stamp(count) == self._fitted_on
        ):
            return False
        if self.config.name in CRITIC_MODELS and self.critic is not None:
            if not self.critic.trained:  # the learner is not past its burn-in
                return False
        maps, rewards = self.training_data()
        if count == 0:
            shape = (0, self.domain.num_units, len(self.domain.num_choices))
            maps = np.zeros(shape, dtype=np.int16)
        stream = np.random.SeedSequence([self.seed, _FIT_STREAM, count])
        seeds = stream.generate_state(2)
        rows = np.arange(count)
        if count > self.config.max_train:
            rows = np.sort(
                np.random.default_rng(int(seeds[0])).choice(
                    count, self.config.max_train, replace=False
                )
            )
        model = build_model(self.config.name, int(seeds[1]), self.config.options, self.critic)
        model.fit([Measured(self.domain, maps[rows], rewards[rows]), *self.earlier])
        self.model = model
        self._fitted_on = self._stamp(count)
        log.debug("screen: %s fitted on %d of %d measurements", self.config.name, len(rows), count)
        return True

    # ------------------------------------------------------------- selection
    def known(self, candidates: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """bool ``[P]``: the measure cache already knows the map (it is free)."""
        if not self.cache.enabled:
            return np.zeros(len(candidates), dtype=bool)
        return np.array([key in self.cache for key in self.cache.keys(candidates, probs)])

    def predict(self, candidates: np.ndarray) -> np.ndarray:
        """Predicted rewards float64 ``[P]`` of maps int ``[P, N, H]`` (NaN: no model yet)."""
        if self.model is None or len(candidates) == 0:
            return np.full(len(candidates), np.nan)
        return self.model.predict(self.domain, np.asarray(candidates, dtype=np.int64))

    def acquisition(self, candidates: np.ndarray) -> np.ndarray:
        """What candidates int ``[P, N, H]`` are ranked by, float64 ``[P]`` (NaN while
        there is no model).

        ``screen.acquisition=ucb``: the model's ``mean + kappa * spread`` (``screen.kappa``;
        a model without a spread, and ``kappa`` 0, rank by the mean: :meth:`predict`).
        ``ei``: the expected improvement over the best paid reward under a normal of the
        model's mean and spread (Jones et al., 1998), the mean's excess where the spread is
        0; a model without a spread ranks by the mean.
        """
        spread = getattr(self.model, "predict_with_spread", None)
        ei = self.config.acquisition == "ei"
        kappa = float(self.config.kappa)
        if self.model is None or spread is None or len(candidates) == 0 or not (ei or kappa):
            return self.predict(candidates)
        mean, std = spread(self.domain, np.asarray(candidates, dtype=np.int64))
        if not ei:
            return mean + kappa * std
        return expected_improvement(mean, std, self.best_paid())

    def best_paid(self) -> float:
        """The best reward paid for so far (-inf before any)."""
        return max(self._paid.values(), default=-np.inf)

    def observe_unseen(self, maps: np.ndarray, rewards: np.ndarray) -> None:
        """:meth:`observe` the maps int ``[B, N, H]`` (rewards float ``[B]``) of which no
        measurement is among the observed ones, each once: answers that were free, of
        which only the compiler's map (measured when the target was bound) is new."""
        rows = np.asarray(maps).astype(np.int16)
        new, seen = [], set()
        for i, key in enumerate(m.tobytes() for m in rows):
            if key not in self._paid and key not in seen:
                seen.add(key)
                new.append(i)
        if new:
            self.observe(rows[new], np.asarray(rewards)[new])

    def paid_reward(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[P]``: the measured reward of each map int ``[P, N, H]``, NaN for a
        map not paid for."""
        rows = np.asarray(maps).astype(np.int16)
        return np.array([self._paid.get(m.tobytes(), np.nan) for m in rows], dtype=np.float64)

    def is_paid(self, maps: np.ndarray) -> np.ndarray:
        """bool ``[P]``: a measurement of each map int ``[P, N, H]`` is among the observed."""
        return ~np.isnan(self.paid_reward(maps))

    def value(self, candidates: np.ndarray) -> np.ndarray:
        """What model search scores candidates int ``[P, N, H]`` by, float64 ``[P]``: the
        measured reward of a map paid for (with ``acquisition=ei`` its improvement over
        the best paid, 0 at most), the :meth:`acquisition` of any other."""
        candidates = np.asarray(candidates, dtype=np.int64)
        values = self.acquisition(candidates)
        if self._paid:
            paid = self.paid_reward(candidates)
            if self.config.acquisition == "ei" and self.model is not None:
                paid = np.minimum(paid - self.best_paid(), 0.0)  # NaN stays NaN
            values = np.where(np.isnan(paid), values, paid)
        return values

    def select(
        self,
        candidates: np.ndarray,
        keep: int,
        groups: np.ndarray | None = None,
        probs: np.ndarray | None = None,
        free: bool = False,
    ) -> np.ndarray:
        """Which candidates to measure: int64 indices into ``candidates``, ascending.

        Args:
            candidates: int ``[P, N, H]``.
            keep: new maps to keep (per group, with ``groups``).
            groups: int ``[P]``, a group id per candidate (e.g. the population member that
                proposed it); ``None``: one group.
            probs: float ``[P, N, H, C]`` when the target repairs maps from the policy's
                probabilities (they are part of what the cache knows).
            free: also return the maps the measure cache knows (first occurrence in each
                group); they cost nothing and do not count against ``keep``.

        Within a group, repeats and known maps are never counted against ``keep``; of its
        new maps, ``min(keep, new)`` are kept: the top-ranked by :meth:`acquisition`, except that a share
        ``explore`` of all kept slots (rounded at random, so that it holds on average for
        small batches) take a random one of the group's other new maps. Without a model,
        the first new maps of each group are kept.
        """
        candidates = np.asarray(candidates, dtype=np.int64)
        count = len(candidates)
        groups = np.zeros(count, np.int64) if groups is None else np.asarray(groups)
        if groups.shape != (count,):
            raise ValueError(f"groups must have shape [{count}], got {list(groups.shape)}")
        if count == 0 or keep <= 0 and not free:
            return np.zeros(0, dtype=np.int64)
        keys = self.cache.keys(candidates, probs)
        distinct = np.zeros(count, dtype=bool)
        seen: set[tuple[int, bytes]] = set()
        for i, (g, key) in enumerate(zip(groups.tolist(), keys)):
            if (g, key) not in seen:
                seen.add((g, key))
                distinct[i] = True
        known = self.known(candidates, probs) & distinct
        new = np.flatnonzero(distinct & ~known)
        score = np.full(count, -np.inf)
        if self.model is not None:
            score[new] = self.acquisition(candidates[new])
        else:
            score[new] = -new.astype(np.float64)  # the agent's own order
        chosen = [np.flatnonzero(known)] if free else []
        members = [new[groups[new] == g] for g in dict.fromkeys(groups[new].tolist())]
        slots = np.array([min(int(keep), len(m)) for m in members], dtype=np.int64)
        explore = self._explore_slots(slots) if self.model is not None else np.zeros_like(slots)
        for idx, k, e in zip(members, slots, explore):
            order = idx[np.argsort(-score[idx], kind="stable")]
            top, rest = order[: k - e], order[k - e :]
            chosen += [top, self.rng.choice(rest, size=e, replace=False) if e else rest[:0]]
        return np.sort(np.concatenate(chosen)).astype(np.int64) if chosen else np.zeros(0, int)

    def _explore_slots(self, slots: np.ndarray) -> np.ndarray:
        """int64 ``[G]``: how many of each group's ``slots`` are drawn at random: a share
        ``explore`` of all slots, rounded at random, spread over the slots uniformly."""
        total = int(slots.sum())
        share = self.config.explore * total
        n = int(math.floor(share))
        if share > n and self.rng.random() < share - n:
            n += 1
        out = np.zeros(len(slots), dtype=np.int64)
        if n == 0:
            return out
        owner = np.repeat(np.arange(len(slots)), slots)
        np.add.at(out, self.rng.choice(owner, size=n, replace=False), 1)
        return out

    def choose(self, pools: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """One candidate of each group to measure: int64 ``[G]``, an index into ``K``.

        Args:
            pools: int ``[G, K, N, H]``: group ``g``'s candidates, ``pools[g, 0]`` being
                the map the agent proposes without screening (a member's own map, a
                chain's usual neighbour).
            probs: float ``[G, N, H, C]`` (one per group) when the target wants them.

        A group whose own map is free (known to the measure cache) takes it; every other
        group takes one new map by :meth:`select` (``keep=1`` per group).
        """
        pools = np.asarray(pools, dtype=np.int64)
        g, k = pools.shape[:2]
        out = np.zeros(g, dtype=np.int64)
        if k == 1 or g == 0:
            return out
        todo = np.flatnonzero(~self.known(pools[:, 0], probs))
        if len(todo) == 0:
            return out
        flat = pools[todo].reshape(len(todo) * k, *pools.shape[2:])
        flat_probs = None if probs is None else np.repeat(np.asarray(probs)[todo], k, axis=0)
        groups = np.repeat(todo, k)
        picked = self.select(flat, 1, groups=groups, probs=flat_probs)
        out[groups[picked]] = picked % k
        return out

    # ---------------------------------------------------------------- metrics
    def take_metrics(self) -> dict[str, float]:
        """The quality of the model on the maps paid since the last call (then forgotten):
        ``screen_spearman`` and ``screen_top_quarter``, NaN when no model ranked them."""
        if not self._batch or self.model is None:
            self._batch = []
            return dict.fromkeys(SCREEN_COLUMNS, float("nan"))
        predicted = self.predict(np.concatenate([m for m, _ in self._batch]))
        measured = np.concatenate([r for _, r in self._batch])
        self._batch = []
        return {
            "screen_spearman": spearman(predicted, measured),
            "screen_top_quarter": top_quarter(predicted, measured),
        }

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """The observed measurements and the explore generator (the model is refitted)."""
        maps, rewards = self.training_data()
        return {
            "maps": maps.copy() if len(rewards) else None,
            "rewards": rewards.copy() if len(rewards) else None,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict | None) -> None:
        """Inverse of :meth:`state_dict`; the model is refitted at the next :meth:`refit`."""
        self._chunks, self._maps = [], None
        self._rewards = np.zeros(0, dtype=np.float64)
        self.model, self._fitted_on, self._batch, self._paid = None, None, [], {}
        if state is None:
            return
        if state.get("rewards") is not None:
            self._maps = np.asarray(state["maps"]).astype(np.int16)
            self._rewards = np.asarray(state["rewards"], dtype=np.float64).copy()
            self._paid = dict(zip((m.tobytes() for m in self._maps), self._rewards.tolist()))
        self.rng.bit_generator.state = state["rng"]


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """float64 ``[P]``: ``E[max(Y - best, 0)]`` for ``Y ~ Normal(mean, std)`` (``[P]``
    each); ``max(mean - best, 0)`` where ``std`` is 0; the mean itself before anything was
    paid (``best`` -inf)."""
    from scipy.stats import norm  # start-up time

    if not np.isfinite(best):
        return np.asarray(mean, dtype=np.float64)
    gain = np.asarray(mean, dtype=np.float64) - best
    std = np.asarray(std, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0, gain / std, 0.0)
    return np.where(std > 0, gain * norm.cdf(z) + std * norm.pdf(z), np.maximum(gain, 0.0))


def make_screen(config: ScreenConfig, env, cache: MeasureCache, seed: int) -> Screen | None:
    """The screen of a run from its ``screen`` section: None for ``none``.

    ``screen.prior`` adds a free description of the maps (:func:`egrl.screening.earlier.make_prior`);
    ``screen.init_from`` reads earlier runs' measurements, from their run directories or
    a chip data file (:func:`egrl.screening.earlier.load_earlier`), which must describe maps with the
    same heads and description columns as this run's target.

    Raises:
        egrl.validation.ConfigError: an unknown model, an option the model does not have
            or a value it does not accept, a prior the target cannot have, an earlier run
            that is missing, empty or of another target.
    """
    if config.name == "none":
        return None
    if config.name not in MODELS:
        raise ConfigError([f"screen={config.name} is invalid: expected one of {', '.join(NAMES)}"])
    problems = option_problems(config.name, config.options)
    if problems:
        raise ConfigError(problems)
    try:
        domain = Domain.of(env, make_prior(config.prior, env.target))
        named = [(path, load_earlier(path, config.prior)) for path in as_paths(config.init_from)]
    except (EarlierRunError, ValueError) as exc:
        raise ConfigError([str(exc)]) from None
    earlier = [data for _, datasets in named for data in datasets]
    for path, data in ((path, data) for path, datasets in named for data in datasets):
        mine = (list(domain.num_choices), domain.featurize.description_names)
        theirs = (list(data.domain.num_choices), data.domain.featurize.description_names)
        if mine != theirs:
            raise ConfigError(
                [
                    f"screen.init_from={path} is invalid: its target's heads and description "
                    f"({theirs[0]}, {len(theirs[1])} columns) are not this run's "
                    f"({mine[0]}, {len(mine[1])} columns)"
                ]
            )
    return Screen(config, domain, cache, seed, earlier)
