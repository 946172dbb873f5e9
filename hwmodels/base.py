"""The hardware-model protocol.

A :class:`HardwareModel` is a chip (or a compiler for it) with its parameters.
Binding it to a workload (Algorithm 1, line 3: the graph transform G) gives a
:class:`Target`: the decision units, the decision heads, the decision graph the
policies read, the native compiler's map, the initial and fallback maps, and a way to
measure a batch of maps.

``Target.measure`` is the whole hardware side of one evaluation (Algorithm 1,
lines 6-9): the compiler C repairs each map, and the repaired map is run (or
modelled) to get its latency. Rewards are computed from that by the environment
(:mod:`egrl.env`), and policy inputs are scaled there too (:mod:`egrl.features`), so
a new target only has to say what the chip would do. ``docs/hwmodels.md`` walks
through writing one.

Nothing in the contract gives a choice a meaning by its position: choice 0 is not
assumed slowest, or valid. A target says which map is its initial map and which is
its fallback.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from workloads.ir import Workload


@dataclass
class Measurement:
    """What the hardware says about a batch of ``B`` maps over ``N`` units and ``H`` heads.

    Attributes:
        rectified: int64 ``[B, N, H]``: the maps as the compiler repaired them.
        valid: bool ``[B]``: the compiler did not have to change the map.
        reassigned_ratio: float64 ``[B]``: re-assigned bytes over all mappable bytes
            (0 for a valid map).
        latency_s: float64 ``[B]``: latency of the rectified map in seconds (NaN where
            the target did not run it).
    """

    rectified: np.ndarray
    valid: np.ndarray
    reassigned_ratio: np.ndarray
    latency_s: np.ndarray


@dataclass
class Check:
    """What the compiler alone says about a batch of ``B`` maps: no latency, no board run.

    Attributes:
        rectified: int64 ``[B, N, H]``: the maps as the compiler would run them (its
            repair of those it refuses, the others unchanged).
        valid: bool ``[B]``: the compiler accepts the map as it is.
        reassigned_ratio: float64 ``[B]``: the share the repair moved, as in
            :class:`Measurement` (0 for a valid map).
    """

    rectified: np.ndarray
    valid: np.ndarray
    reassigned_ratio: np.ndarray


@dataclass
class OptimumResult:
    """An exact (or bounded) solution of a target's cost model.

    Attributes:
        mapping: int64 ``[N, H]``: the best map found.
        latency_s: its latency.
        bound_s: proven lower bound on the latency of any valid map.
        gap: relative optimality gap ``(latency - bound) / latency`` (0 when proven).
        proven: the solver proved optimality.
        status: solver status name.
        wall_s: solver wall time.
    """

    mapping: np.ndarray
    latency_s: float
    bound_s: float
    gap: float
    proven: bool
    status: str
    wall_s: float
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PriorSolution:
    """A target's prior (the model of its chip the toolkit can solve) solved.

    Attributes:
        mapping: int64 ``[N, H]``: the map, in the target's own choices.
        latency_s: the prior's predicted latency of that map, seconds.
        proven: the map is optimal on the prior's costs.
        solve_s: wall seconds the solve took.
        status: ``"optimal"``, ``"feasible"`` (the best map found in the time limit) or
            ``"fallback"`` (no map found: the compiler's map).
        fell_back: no map was found in the time limit, so ``mapping`` is the compiler's
            map (logged).
    """

    mapping: np.ndarray
    latency_s: float
    proven: bool
    solve_s: float
    status: str
    fell_back: bool

    @classmethod
    def of_optimum(cls, result: OptimumResult) -> PriorSolution:
        """The prior solution of an :class:`OptimumResult` whose solver fell back to its
        hint when its status is neither optimal nor feasible."""
        status = result.status.lower()
        fell_back = status not in ("optimal", "feasible")
        return cls(
            mapping=np.asarray(result.mapping, dtype=np.int64),
            latency_s=float(result.latency_s),
            proven=bool(result.proven),
            solve_s=float(result.wall_s),
            status="fallback" if fell_back else status,
            fell_back=fell_back,
        )


class ChipCallError(RuntimeError):
    """A call to a chip (a measurement, a compiler check, a baseline) failed.

    The one error of a failed chip call that the runtime catches: the maps being measured
    are failed, the run goes on. A hardware model raises it, or a subclass of it (the
    external model's :class:`~hwmodels.external.ExternalEvaluatorError`), with
    ``partial``: the :class:`Measurement` of the first rows measured before the failure,
    or ``None``.
    """

    partial: Measurement | None = None


class CheckRefused(NotImplementedError):
    """A chip refused to be asked its compiler alone (a ``check`` request answered with an
    error): its maps are checked by the model alone from then on. (A subclass of
    ``NotImplementedError`` so that callers that caught that keep working.)"""


class Target(ABC):
    """A hardware model bound to one workload: the problem every agent solves.

    Shapes: ``N`` decision units (:attr:`num_units`), ``H`` heads (:attr:`heads`),
    ``C = max(len(choices) over heads)``; a map is int64 ``[N, H]``, a batch ``[B, N, H]``.

    Who calls what (through :class:`egrl.env.Env`):

    * :attr:`graph` once per run, by the policy side, which scales its raw features
      (:func:`egrl.features.featurise`).
    * :meth:`native_mapping` once, when the environment is built: every speedup is
      measured against it, so it must be valid.
    * :meth:`initial_mapping` and :meth:`fallback_mapping` once, when the environment is
      built; local searches start from them (``agent.start=initial`` / ``fallback``).
    * :meth:`measure` for every batch of maps any agent proposes, with the policy's
      probabilities when :attr:`wants_probabilities` is true.
    * :meth:`check` (targets with a compiler, :attr:`checks`) for maps a search wants to
      know the compiler accepts before paying for them; free, never a measurement.
    * :meth:`optimum` when a user or the ``optimum`` agent asks for the exact answer.
    * :meth:`describe` (and :attr:`description_names`) by a screen that ranks proposed
      maps before paying for them; free, never a measurement.
    """

    #: decision heads and the names of their choices (no order is implied: choice 0
    #: is not assumed slowest, or valid; see :meth:`initial_mapping`, :meth:`fallback_mapping`)
    heads: dict[str, list[str]]
    #: number of decision units (rows of a mapping)
    num_units: int
    #: names of the decision units, in row order
    unit_names: list[str]
    #: :meth:`measure` wants the policy's per-unit probabilities (a compiler that samples
    #: from them, e.g. a constraint solver restricted to each unit's current domain)
    wants_probabilities: bool = False
    #: measuring the same map (with the same probabilities, where :attr:`wants_probabilities`)
    #: always gives the same answer, so agents measure it once and answer it again from
    #: memory (:mod:`egrl.measure_cache`); false for a noisy chip, whose maps are paid
    #: every time they are proposed
    deterministic: bool = True
    #: the names of the values :meth:`map_values` reports (none by default)
    map_value_names: tuple[str, ...] = ()
    #: the target has a model the toolkit can solve (:meth:`prior_solution`): a built-in
    #: target whose cost model is the measurement and has an exact optimum, or a chip
    #: whose datasheet is given
    has_prior: bool = False

    @property
    def head_names(self) -> list[str]:
        return list(self.heads)

    @property
    def num_choices(self) -> np.ndarray:
        """int64 ``[H]``: number of choices of each head."""
        return np.array([len(c) for c in self.heads.values()], dtype=np.int64)

    @property
    def max_choices(self) -> int:
        """``C``: the most choices of any head (last axis of probabilities)."""
        return int(self.num_choices.max())

    @property
    @abstractmethod
    def graph(self):
        """The decision graph, with RAW features (no scaling: the policy side scales).

        Returns:
            ``torch_geometric.data.Data`` with ``x`` float ``[N, F]`` (raw, finite; may be
            negative), ``edge_index`` int64 ``[2, E]`` (unit -> unit) and ``node_names``
            (the :attr:`unit_names`). :func:`workload_graph` builds it for targets whose
            units are the workload's nodes.
        """

    @abstractmethod
    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Measurement:
        """Compile (repair) and run a batch of maps.

        Args:
            maps: int64 ``[B, N, H]``, every choice in range (the environment checks).
            probs: only given to a target with :attr:`wants_probabilities`: ``None`` or
                float64 ``[B, N, H, C]``, the policy's probability of each choice of each
                unit and head for map ``b`` (zero past a head's own number of choices,
                summing to 1 over them). Agents without a policy (random search, SA, GA,
                ...) give ``None``; a target that wants probabilities must then act as if
                they were uniform over each head's choices (:meth:`uniform_probabilities`).

        Returns:
            A :class:`Measurement` of length ``B``.
        """

    def check(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Check:
        """The compiler alone on a batch of maps: which it accepts as they are and its
        repair of the others, with no latency and no board run (what :meth:`measure`
        would run, without running it).

        Args:
            maps: int64 ``[B, N, H]``, every choice in range.
            probs: as in :meth:`measure` (targets with :attr:`wants_probabilities`).

        Raises:
            NotImplementedError: the target has no compiler of its own to ask
            (:attr:`checks` is false).
        """
        raise NotImplementedError(f"{type(self).__name__} has no compiler to check maps with")

    @property
    def checks(self) -> bool:
        """The target's compiler can be asked alone (:meth:`check`)."""
        return type(self).check is not Target.check

    @abstractmethod
    def native_mapping(self) -> np.ndarray:
        """int64 ``[N, H]``: the native compiler's own map; it must be valid."""

    @abstractmethod
    def initial_mapping(self) -> np.ndarray:
        """int64 ``[N, H]``: EGRL's initial mapping action (EGRL Table 2).

        The map a search starts from when it starts "from nothing": all-DRAM on NNP-I,
        the heuristic's partition for a multi-chip partitioning, all-Drop for a memory
        game. Abstract on purpose: "choice 0 everywhere" is meaningful only where the
        heads list such a choice first, so every target states its own.
        """

    def fallback_mapping(self) -> np.ndarray:
        """int64 ``[N, H]``: a map the target always accepts (valid).

        It stands in where a measurement must replace a failed one (e.g. a repair an
        external compiler did not report) and is the safe start of local searches
        (``agent.start=fallback``). Default: the native compiler's map.
        """
        return np.asarray(self.native_mapping(), dtype=np.int64)

    def uniform_probabilities(self, batch: int) -> np.ndarray:
        """float64 ``[batch, N, H, C]``: uniform over each head's own choices, 0 past them.

        What a target with :attr:`wants_probabilities` uses when :meth:`measure` gets
        ``probs=None``.
        """
        num = self.num_choices
        row = (np.arange(self.max_choices) < num[:, None]) / num[:, None]  # [H, C]
        return np.broadcast_to(row, (batch, self.num_units, *row.shape)).astype(np.float64)

    def map_values(self, maps: np.ndarray) -> dict[str, np.ndarray]:
        """Quantities of maps the target ran, beside their latency, that a run's record of
        evaluations keeps (``record_evaluations``; none by default).

        Args:
            maps: int64 ``[B, N, H]``, maps as :meth:`measure` rectified them.

        Returns:
            name -> float64 ``[B]`` (the names of :attr:`map_value_names`, in that order).
        """
        return {}

    @property
    def description_names(self) -> list[str]:
        """Names of the ``F`` columns of :meth:`describe`, in order (none by default)."""
        return []

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """A cheap description of each map, read without measuring it.

        What a learned screen (TVM-style cost model) reads beside the map's one-hot
        choices to rank candidates before any is paid for: quantities the target knows
        from the map alone (bytes per memory level, per-chip loads, constraints broken,
        an analytical latency), never a measurement, a repair or a solver. It is
        vectorised over the batch, so a screen may call it on thousands of candidates,
        and computed on the maps as the agent proposed them (before any repair). The
        default describes nothing: a screen then uses the one-hot choices alone.

        Args:
            maps: int ``[B, N, H]``, every choice in range.

        Returns:
            float64 ``[B, F]``, ``F = len(description_names)``, finite; ``[B, 0]`` by default.
        """
        return np.zeros((len(maps), len(self.description_names)), dtype=np.float64)

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """Solve the cost model exactly (or with a proven bound) where the target allows it.

        Raises:
            NotImplementedError: the target has no solver.
        """
        raise NotImplementedError(f"{type(self).__name__} has no exact solver")

    def prior_solution(
        self, time_limit_s: float = 60.0, workers: int = 2, **options
    ) -> PriorSolution:
        """The target's prior solved, hinted with the compiler's map, within ``time_limit_s``.

        Default (a target whose cost model is the measurement, :attr:`has_prior` true):
        its own :meth:`optimum`. The NNP-I model and the external chip with a datasheet
        also take ``options``: ``extra_cost_s`` float ``[N, H, C]`` (seconds added to the
        objective per unit and choice), ``trust_maps`` int ``[M, N, H]`` with
        ``trust_radius`` (at most that many units differ from one of them) and
        ``exclude`` int ``[K, N, H]`` (maps not to return); see
        :meth:`hwmodels.nnpi.prior.NNPIPrior.solve`.

        Raises:
            NotImplementedError: the target has no prior, or takes no ``options``.
        """
        if not self.has_prior:
            raise NotImplementedError(f"{type(self).__name__} has no prior to solve")
        if options:
            raise NotImplementedError(
                f"{type(self).__name__}'s prior takes no options {sorted(options)}"
            )
        return PriorSolution.of_optimum(self.optimum(time_limit_s=time_limit_s, workers=workers))


class HardwareModel(ABC):
    """A chip with its parameters; :meth:`bind` specialises it to a workload."""

    name: str = "hardware"
    #: the reward of a run that names none (``reward: null``): ``egrl`` (a map the compiler
    #: had to repair earns the negative re-assignment ratio, EGRL's Algorithm 1) or
    #: ``repaired`` (the reward of its repair, as the multi-chip paper scores a partition)
    default_reward: str = "egrl"
    #: parameters that say how the chip is read, not what a map costs on it (a timeout,
    #: retries, repeats): runs that differ only in these measured the same chip
    reading_params: tuple[str, ...] = ()

    @abstractmethod
    def bind(self, workload: Workload) -> Target:
        """The graph transform G: the target for ``workload``."""


def workload_graph(workload: Workload):
    """The decision graph of a target whose units are ``workload``'s nodes.

    Returns:
        ``torch_geometric.data.Data``: ``x`` float64 ``[N, 19]``, the raw EGRL Table 1
        features (float64 so that the policy side scales the exact values),
        ``edge_index`` int64 ``[2, E]``, ``node_names`` and ``name``.
    """
    import torch
    from torch_geometric.data import Data

    return Data(
        x=torch.as_tensor(workload.features, dtype=torch.float64),
        edge_index=torch.as_tensor(workload.edge_index, dtype=torch.long),
        num_nodes=workload.num_nodes,
        node_names=list(workload.node_names),
        name=workload.name,
    )
