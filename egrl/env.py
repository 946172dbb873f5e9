"""The environment: a hardware target bound to one workload, and Algorithm 1's rewards.

>>> from egrl import make_env
>>> env = make_env(hwmodel="nnpi", workload="resnet50")
>>> ev = env.evaluate(env.baseline_mapping)
>>> ev.speedup  # array([1.])

One evaluation (EGRL Algorithm 1, lines 5-12) is: the compiler C repairs the map
(``M_C = C(M_pi)``); if it changed nothing the map is run and earns
``(latency_compiler / latency) ** 2``; otherwise no inference counts and the map earns
``-invalid_reward_scale * reassigned_bytes_ratio``. Speedup is
``latency_compiler / latency`` for valid maps and 0 for invalid ones (the paper's
convention: "a score of 0 indicates an invalid mapping").

With ``reward="repaired"`` (the multi-chip partitioning paper's reward: Xie et al.,
MLSys 2022, section 4) every map is scored by the map the chip ran, its repair: it earns
``(latency_compiler / latency_repaired) ** 2`` and that speedup, and only a repair the
chip could not run (latency NaN) falls back to the negative re-assignment reward.
``valid`` still says whether the compiler accepted the proposal unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import hwmodels
import workloads
from egrl.features import featurise
from hwmodels.base import HardwareModel, Measurement, OptimumResult, PriorSolution, Target
from workloads import Workload
from workloads import load as load_workload

log = logging.getLogger(__name__)

#: how a map the compiler had to repair is scored (see the module docstring)
REWARDS = ("egrl", "repaired")


@dataclass
class Evaluation:
    """The answer to a batch of ``B`` maps (arrays of length ``B``).

    Attributes:
        latency_s: latency of the map the chip ran (the rectified map), seconds.
        valid: the compiler accepted the map unchanged.
        reassigned_ratio: bytes the compiler re-assigned over all mappable bytes.
        reward: Algorithm 1's reward.
        speedup: ``baseline_latency_s / latency_s`` for valid maps, 0 for invalid ones.
        rectified: int64 ``[B, N, H]``: the maps as the compiler repaired them.
    """

    latency_s: np.ndarray
    valid: np.ndarray
    reassigned_ratio: np.ndarray
    reward: np.ndarray
    speedup: np.ndarray
    rectified: np.ndarray

    def __len__(self) -> int:
        return len(self.reward)


class Env:
    """A hardware target bound to a workload: the problem every agent solves.

    Besides the native compiler's map (``baseline_mapping``) it holds the target's
    ``initial_mapping`` (EGRL's initial mapping action) and ``fallback_mapping`` (a map
    the target always accepts), int64 ``[N, H]`` each, asked once.

    Args:
        target: the bound hardware model (``HardwareModel.bind(workload)``).
        workload: the workload it was bound to (kept for names and reports).
        invalid_reward_scale: multiplier of the negative reward of repaired maps
            (EGRL Table 2: ``-1`` scale, i.e. 1.0 here).
        reward: ``"egrl"`` (a repaired map earns the negative re-assignment reward) or
            ``"repaired"`` (it earns the reward of its repair; see the module docstring).
    """

    def __init__(
        self,
        target: Target,
        workload: Workload,
        invalid_reward_scale: float = 1.0,
        reward: str = "egrl",
    ):
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; expected one of {REWARDS}")
        self.target = target
        self.workload = workload
        self.invalid_reward_scale = float(invalid_reward_scale)
        self.reward = reward
        self.num_evaluations = 0
        self._num_choices = np.array([len(c) for c in self.heads.values()], dtype=np.int64)
        self._graph: tuple[object, object] | None = None  # (raw x, featurised graph)
        self.baseline_mapping = self._target_map("native_mapping")
        self.initial_mapping = self._target_map("initial_mapping")
        self.fallback_mapping = self._target_map("fallback_mapping")
        base = target.measure(self.baseline_mapping[None])
        if getattr(target, "deterministic", True) == "auto":
            target.deterministic = self._reads_the_same(base)
        if not bool(base.valid[0]):
            raise RuntimeError(
                f"the native compiler's map for {workload.name!r} is not valid on "
                f"{type(target).__name__}: the target's compiler disagrees with itself"
            )
        self.baseline_latency_s = float(base.latency_s[0])
        #: the target's answer for the compiler's map, measured once when it was bound
        self.baseline_measurement = base
        self._prior_solutions: dict[float, PriorSolution] = {}

    def _reads_the_same(self, first: Measurement) -> bool:
        """``deterministic: auto``: read the compiler's map a second time; the target is
        deterministic when both readings are identical (logged either way)."""
        second = self.target.measure(self.baseline_mapping[None])
        a, b = float(first.latency_s[0]), float(second.latency_s[0])
        same = a == b and bool(first.valid[0]) == bool(second.valid[0])
        if same:
            log.info("deterministic: auto: two readings of the compiler's map agree (%.6g s)", a)
        else:
            log.info(
                "deterministic: auto: two readings of the compiler's map differ (%.6g s and "
                "%.6g s, %.2f%% apart): the run confirms its best at its end (confirm)",
                a,
                b,
                100 * abs(a - b) / max(min(a, b), 1e-30),
            )
        return same

    def _target_map(self, method: str) -> np.ndarray:
        """int64 ``[N, H]``: ``target.<method>()``, checked like any map."""
        try:
            return self.check_maps(getattr(self.target, method)())[0].copy()
        except ValueError as err:
            raise ValueError(f"{type(self.target).__name__}.{method}(): {err}") from None

    # ------------------------------------------------------------ the problem
    @property
    def heads(self) -> dict[str, list[str]]:
        return self.target.heads

    @property
    def num_heads(self) -> int:
        return len(self.target.heads)

    @property
    def num_units(self) -> int:
        return self.target.num_units

    @property
    def unit_names(self) -> list[str]:
        return self.target.unit_names

    @property
    def graph(self):
        """The decision graph the policies read: the target's graph, featurised.

        PyG ``Data``: ``x`` float32 ``[N, F]``, ``sign(x) * log1p(|x|)`` of the target's
        raw features (:func:`egrl.features.featurise`), ``edge_index`` int64 ``[2, E]``.
        Built once, again only if the target's graph gets other features.
        """
        raw = self.target.graph
        if self._graph is None or self._graph[0] is not raw.x:
            where = f"{type(self.target).__name__} graph of {self.workload.name!r}"
            self._graph = (raw.x, featurise(raw, where))
        return self._graph[1]

    @property
    def num_choices(self) -> np.ndarray:
        """int64 ``[H]``: number of choices of each head."""
        return self._num_choices

    @property
    def max_choices(self) -> int:
        """``C``: the most choices of any head (last axis of ``probs``)."""
        return int(self._num_choices.max())

    @property
    def wants_probabilities(self) -> bool:
        """The target's compiler uses the policy's per-unit probabilities (see
        :meth:`evaluate`)."""
        return bool(getattr(self.target, "wants_probabilities", False))

    # ------------------------------------------------------------- evaluation
    def check_maps(self, maps) -> np.ndarray:
        """Validate and batch ``maps`` (``[N, H]`` or ``[B, N, H]``) to int64 ``[B, N, H]``."""
        arr = np.asarray(maps)
        if arr.ndim == 2:
            arr = arr[None]
        expected = (self.num_units, self.num_heads)
        if arr.ndim != 3 or arr.shape[1:] != expected:
            raise ValueError(
                f"maps must have shape [B, {expected[0]}, {expected[1]}] or {list(expected)} "
                f"(units x heads {list(self.heads)}), got {list(np.shape(maps))}"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                raise ValueError("maps must hold integer choices")
        arr = arr.astype(np.int64, copy=False)
        bad = (arr < 0) | (arr >= self._num_choices)
        if bad.any():
            b, u, h = (int(x) for x in np.argwhere(bad)[0])
            head = self.head_names[h]
            raise ValueError(
                f"map {b}: unit {self.unit_names[u]!r} head {head!r} has choice {arr[b, u, h]}, "
                f"expected 0..{self._num_choices[h] - 1} ({self.heads[head]})"
            )
        return arr

    @property
    def head_names(self) -> list[str]:
        return list(self.heads)

    def check_probs(self, probs, batch: int) -> np.ndarray:
        """Validate the policy's probabilities of a batch of ``batch`` maps.

        Args:
            probs: float ``[B, N, H, C]`` (or ``[N, H, C]`` for a batch of one), array or
                tensor; ``C`` = :attr:`max_choices`.

        Returns:
            float64 ``[B, N, H, C]``.

        Raises:
            ValueError: wrong shape, a negative or non-finite value, mass past a head's
                own choices, or a row that does not sum to 1 (the first one is named).
        """
        if isinstance(probs, torch.Tensor):
            probs = probs.detach().cpu().numpy()
        arr = np.asarray(probs, dtype=np.float64)
        if arr.ndim == 3:
            arr = arr[None]
        expected = (batch, self.num_units, self.num_heads, self.max_choices)
        if arr.shape != expected:
            raise ValueError(
                f"probs must have shape {list(expected)} (maps x units x heads x choices), "
                f"got {list(np.shape(probs))}"
            )
        if not np.isfinite(arr).all() or (arr < 0).any():
            raise ValueError("probs must be finite and non-negative")
        past = np.arange(self.max_choices) >= self._num_choices[:, None]  # [H, C]
        bad = (arr * past).any(axis=-1) | ~np.isclose(arr.sum(axis=-1), 1.0, atol=1e-4)
        if bad.any():
            b, u, h = (int(x) for x in np.argwhere(bad)[0])
            head = self.head_names[h]
            raise ValueError(
                f"probs of map {b}, unit {self.unit_names[u]!r}, head {head!r} must sum to 1 "
                f"over its {self._num_choices[h]} choices and be 0 past them, got "
                f"{arr[b, u, h].tolist()}"
            )
        return arr

    @property
    def readings_per_map(self) -> int:
        """Board runs one answer of a map costs (``Target.readings_per_map``, 1 unless the
        target reads each map several times, as an external chip with ``repeats``)."""
        return int(getattr(self.target, "readings_per_map", 1))

    @property
    def deterministic(self) -> bool:
        """The target answers the same map the same way every time (``Target.deterministic``)."""
        return bool(getattr(self.target, "deterministic", True))

    def measure(self, maps, probs=None) -> Measurement:
        """Check a batch of maps and have the target compile and run them (no rewards).

        Arguments as :meth:`evaluate`; returns the target's :class:`Measurement` ``[B]``.
        Every map counts in :attr:`num_evaluations`.
        """
        batch = self.check_maps(maps)
        if probs is not None:
            probs = self.check_probs(probs, len(batch))
        if self.wants_probabilities:
            m = self.target.measure(batch, probs=probs)
        else:
            m = self.target.measure(batch)
        self.num_evaluations += len(batch)
        return m

    def count_measured(self, n: int) -> None:
        """Count ``n`` maps measured on this env's behalf out of process (by Ray workers,
        each with its own copy of the target) in :attr:`num_evaluations`."""
        self.num_evaluations += int(n)

    def evaluate(self, maps, probs=None) -> Evaluation:
        """Evaluate a batch of maps: compile, run, reward (EGRL Algorithm 1).

        Args:
            maps: int ``[B, N, H]`` or ``[N, H]`` (a batch of one).
            probs: ``None`` or float ``[B, N, H, C]`` (``C`` = :attr:`max_choices`): the
                policy's probability of each choice of each unit and head, 0 past a head's
                own choices, summing to 1 over them (:meth:`check_probs`). Passed to the
                target only if it :attr:`wants_probabilities`; ignored otherwise.

        Returns:
            An :class:`Evaluation` whose arrays have length ``B``.
        """
        m = self.measure(maps, probs)
        return self.score(m.rectified, m.valid, m.reassigned_ratio, m.latency_s)

    def score(self, rectified, valid, reassigned_ratio, latency_s) -> Evaluation:
        """Rewards and speedups from what the hardware measured."""
        valid = np.asarray(valid, dtype=bool)
        latency_s = np.asarray(latency_s, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = self.baseline_latency_s / latency_s
        scored = valid if self.reward == "egrl" else np.isfinite(ratio) & (ratio > 0)
        speedup = np.where(scored, ratio, 0.0)
        reward = np.where(
            scored,
            ratio**2,
            -self.invalid_reward_scale * np.asarray(reassigned_ratio, dtype=np.float64),
        )
        return Evaluation(
            latency_s=latency_s,
            valid=valid,
            reassigned_ratio=np.asarray(reassigned_ratio, dtype=np.float64),
            reward=reward,
            speedup=speedup,
            rectified=rectified,
        )

    def random_mappings(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniformly random maps, int64 ``[n, N, H]``."""
        return rng.integers(0, self._num_choices, size=(n, self.num_units, self.num_heads))

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """Exact (or bounded) solution of the target's cost model, where it has one."""
        return self.target.optimum(time_limit_s=time_limit_s, workers=workers, **kwargs)

    @property
    def has_prior(self) -> bool:
        """The target has a model the toolkit can solve (``Target.has_prior``): the built-in
        ``nnpi``, ``mcm`` and ``banked`` (their own cost model), or an ``external`` chip
        with ``hwmodel.params.prior`` (its datasheet as NNP-I parameters)."""
        return bool(getattr(self.target, "has_prior", False))

    def prior_solution(self, time_limit_s: float = 60.0, **options) -> PriorSolution:
        """The target's prior solved (``Target.prior_solution``), hinted with the
        compiler's map; the map is in the target's own choices, ``[N, H]``.

        Solved once per ``time_limit_s`` and cached on the env; ``options`` (extra costs,
        a trust region, maps to exclude: :meth:`hwmodels.nnpi.prior.NNPIPrior.solve`) are
        solved every time, never cached.

        Raises:
            ValueError: the target has no prior (:attr:`has_prior` is false), naming
                ``hwmodel.params.prior``.
        """
        if not self.has_prior:
            raise ValueError(
                f"{type(self.target).__name__} on {self.workload.name!r} has no prior to solve: "
                "hwmodel.params.prior is set on no external chip here (a prior is the "
                "built-in nnpi, mcm or banked model, or an external chip with "
                "hwmodel.params.prior={name: nnpi, ...})"
            )
        key = float(time_limit_s)
        if not options and key in self._prior_solutions:
            return self._prior_solutions[key]
        solution = self.target.prior_solution(time_limit_s=key, **options)
        self.check_maps(solution.mapping)
        if not options:
            self._prior_solutions[key] = solution
        return solution

    def mapping_to_dict(self, mapping) -> dict[str, dict[str, str]]:
        """A map ``[N, H]`` as ``{unit name: {head: choice name}}`` (for JSON outputs)."""
        mapping = self.check_maps(mapping)[0]
        return {
            unit: {h: self.heads[h][int(c)] for h, c in zip(self.head_names, row)}
            for unit, row in zip(self.unit_names, mapping)
        }

    def __repr__(self) -> str:
        return (
            f"Env(workload={self.workload.name!r}, target={type(self.target).__name__}, "
            f"units={self.num_units}, heads={self.head_names})"
        )


def make_env(
    hwmodel: str | HardwareModel = "nnpi",
    workload: str | Workload = "resnet50",
    invalid_reward_scale: float = 1.0,
    reward: str | None = None,
    eliminate_data_movement: bool = False,
    **hw_params,
) -> Env:
    """Bind a hardware model to a workload.

    Args:
        hwmodel: a registered name (``hwmodels.names()``) or a :class:`HardwareModel`.
        workload: a zoo name (``workloads.names()``), a path to a workload JSON, or a
            :class:`Workload`.
        invalid_reward_scale, reward: see :class:`Env`; ``reward`` None is the hardware
            model's own (:attr:`hwmodels.base.HardwareModel.default_reward`).
        eliminate_data_movement: rewrite the workload with
            :func:`workloads.eliminate_data_movement` first (docs/dme.md).
        **hw_params: parameters of the hardware model when given by name; ``module``
            (a dotted module name or a ``.py`` path) is imported first so that a model
            outside ``hwmodels`` can register itself (:func:`hwmodels.make`).
    """
    hwmodel, workload, target = bind(hwmodel, workload, eliminate_data_movement, **hw_params)
    reward = reward or getattr(hwmodel, "default_reward", "egrl")
    return Env(target, workload, invalid_reward_scale=invalid_reward_scale, reward=reward)


def bind(
    hwmodel: str | HardwareModel,
    workload: str | Workload,
    eliminate_data_movement: bool = False,
    **hw_params,
) -> tuple[HardwareModel, Workload, Target]:
    """The hardware model, the workload and the model bound to it, as :func:`make_env`
    takes them (see there), without the :class:`Env`: nothing is measured (an ``Env``
    reads the compiler's map when it is made)."""
    if isinstance(hwmodel, str):
        hwmodel = hwmodels.make(hwmodel, **hw_params)
    elif hw_params:
        raise TypeError("hardware parameters are only accepted with a hardware-model name")
    if isinstance(workload, str):
        workload = load_workload(workload)
    if eliminate_data_movement:
        workload, report = workloads.eliminate_data_movement(workload)
        log.info(
            "data-movement elimination on %s: %d -> %d nodes, %d of %d load/store pairs removed",
            workload.name,
            report.nodes_before,
            report.nodes_after,
            report.pairs_eliminated,
            report.pairs_total,
        )
    return hwmodel, workload, hwmodel.bind(workload)


def hw_params(cfg: Any) -> dict:
    """The hardware model's parameters (``hwmodel.params``) of a run's config (a nested
    mapping or a Hydra ``DictConfig``) as a plain dict."""
    return dict((plain_config(cfg).get("hwmodel") or {}).get("params") or {})


def env_from_config(cfg: Any) -> Env:
    """The hardware model ``cfg.hwmodel`` bound to the workload ``cfg.workload`` of a run's
    config (raises what :func:`make_env` raises: a workload that does not fit, ...)."""
    task = plain_config(cfg)
    workload = task.get("workload") or {}
    return make_env(
        hwmodel=task["hwmodel"]["name"],
        workload=workload["name"],
        invalid_reward_scale=task.get("invalid_reward_scale", 1.0),
        reward=reward_of(task),
        eliminate_data_movement=bool(workload.get("eliminate_data_movement", False)),
        **hw_params(task),
    )


def target_from_config(cfg: Any) -> tuple[Target, Workload]:
    """The bound target and workload of a run's config, as :func:`env_from_config` binds
    them, with nothing measured (:func:`bind`)."""
    task = plain_config(cfg)
    workload = task.get("workload") or {}
    _, bound, target = bind(
        task["hwmodel"]["name"],
        workload["name"],
        bool(workload.get("eliminate_data_movement", False)),
        **hw_params(task),
    )
    return target, bound


def reward_of(cfg: Any) -> str:
    """The reward of a run's config: its ``reward``, or the hardware model's own when it is
    null (:func:`hwmodels.default_reward`); a config without the key predates it (``egrl``)."""
    task = plain_config(cfg)
    if "reward" not in task:
        return "egrl"
    return task["reward"] or hwmodels.default_reward((task.get("hwmodel") or {}).get("name"))


def plain_config(cfg: Any) -> dict:
    """A run's config as a plain dict (a Hydra ``DictConfig`` resolved)."""
    from omegaconf import OmegaConf  # start-up time: ``import egrl`` loads no omegaconf

    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)
