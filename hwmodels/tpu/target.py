"""The memory-mapping game as a hardware model: one decision unit per buffer.

>>> import hwmodels
>>> hw = hwmodels.make("tpu-cmem", cmem_mib=128)
>>> target = hw.bind(workload)
>>> m = target.measure(maps)  # maps: int [B, N, 1], 0 Drop / 1 Copy / 2 NoCopy per buffer

``measure`` plays each map through the game (:mod:`hwmodels.tpu.game`): a proposal the
game refuses becomes Drop where Drop is legal, else the legal one of Copy / NoCopy, and
a state with no legal action is left by Drop-backup. The buffers whose action changed
are the re-assigned ones (their bytes over all buffer bytes), so EGRL's negative reward
applies; the latency is the program's (:meth:`hwmodels.tpu.layout.Layout.latency_s`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import fields
from functools import cached_property

import numpy as np

from hwmodels.base import HardwareModel, Measurement, OptimumResult, Target
from hwmodels.tpu.cost import program_latency_s
from hwmodels.tpu.game import ACTIONS, DROP, Game
from hwmodels.tpu.heuristic import native_play
from hwmodels.tpu.params import TPUParams
from hwmodels.tpu.program import Program, next_within
from hwmodels.tpu.search import brute_force
from workloads.ir import Workload

log = logging.getLogger(__name__)

#: the most buffers :meth:`TPUTarget.optimum` searches exhaustively
MAX_OPTIMUM_UNITS = 14


class TPUTarget(Target):
    """A program's memory-mapping game: units are buffers, one head ``action``.

    Args:
        program: the program (built from the workload by :class:`TPU`).
        contention: the latency counts copies against HBM bandwidth
            (:mod:`hwmodels.tpu.cost`).
    """

    deterministic = True
    map_value_names = ("game_return",)

    def __init__(self, program: Program, contention: bool = True) -> None:
        self.program = program
        self.contention = bool(contention)
        self.heads = {"action": list(ACTIONS)}
        self.num_units = program.num_buffers
        self.unit_names = list(program.buffer_names) or [str(i) for i in range(self.num_units)]
        self._native, self._native_layout = native_play(program)

    @cached_property
    def graph(self):
        """PyG ``Data``: raw Table 1 features ``x [N, 10]``; edges from each buffer to the
        next in execution order, to the next buffer of its tensor and of its alias group."""
        import torch
        from torch_geometric.data import Data

        p = self.program
        n = p.num_buffers
        src = [np.arange(n - 1)]
        dst = [np.arange(1, n)]
        for nxt in (p.next_same_tensor, next_within(p.alias)):
            has = np.flatnonzero(nxt >= 0)
            src.append(has)
            dst.append(nxt[has])
        edges = np.stack([np.concatenate(src), np.concatenate(dst)]).astype(np.int64)
        edges = np.unique(edges, axis=1)
        return Data(
            x=torch.as_tensor(p.features, dtype=torch.float64),
            edge_index=torch.as_tensor(edges, dtype=torch.long),
            num_nodes=n,
            node_names=list(self.unit_names),
            name=p.name,
        )

    def _actions(self, maps: np.ndarray) -> np.ndarray:
        maps = np.asarray(maps)
        if maps.ndim != 3 or maps.shape[1:] != (self.num_units, 1):
            raise ValueError(
                f"tpu-cmem maps for {self.program.name!r} must have shape [B, {self.num_units}, 1], "
                f"got {list(maps.shape)}"
            )
        if maps.size and (maps.min() < 0 or maps.max() >= len(ACTIONS)):
            raise ValueError("tpu-cmem map choices must be 0 (Drop), 1 (Copy) or 2 (NoCopy)")
        return maps[:, :, 0].astype(np.int64)

    def play(self, actions: np.ndarray) -> tuple:
        """Play one map's actions ``[N]``: ``(PlayResult, Layout)``."""
        game = Game(self.program)
        result = game.play(actions)
        return result, game.layout()

    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Measurement:
        """Play each map ``[B, N, 1]`` through the game (see the module doc)."""
        actions = self._actions(maps)
        size = self.program.size.astype(np.float64)
        rectified = np.empty_like(actions)
        ratio = np.empty(len(actions))
        latency = np.empty(len(actions))
        for b, proposal in enumerate(actions):
            result, layout = self.play(proposal)
            rectified[b] = result.actions
            ratio[b] = size[result.replaced].sum() / size.sum()
            latency[b] = layout.latency_s(self.contention)
        return Measurement(
            rectified=rectified[:, :, None],
            valid=(rectified == actions).all(axis=1),
            reassigned_ratio=ratio,
            latency_s=latency,
        )

    def map_values(self, maps: np.ndarray) -> dict[str, np.ndarray]:
        """``game_return``: float64 ``[B]``, the return of each rectified map's game.

        The all-HBM latency minus the latency without copy contention
        (:meth:`hwmodels.tpu.layout.Layout.latency_s`), computed from the buffers each map
        puts in CMEM without playing the game again (equal to the game's own sum of
        rewards up to rounding, about 1e-15 relative).
        """
        p = self.program
        in_cmem = self._actions(maps) != DROP
        latency = [
            program_latency_s(p.compute_s, p.time, p.size, row, None, p.params) for row in in_cmem
        ]
        return {"game_return": self._all_hbm_s - np.array(latency, dtype=np.float64)}

    @cached_property
    def _all_hbm_s(self) -> float:
        """The program's latency with every buffer in HBM, seconds."""
        p = self.program
        none = np.zeros(p.num_buffers, dtype=bool)
        return program_latency_s(p.compute_s, p.time, p.size, none, None, p.params)

    def native_mapping(self) -> np.ndarray:
        """int64 ``[N, 1]``: the memory-space-assignment heuristic's actions."""
        return self._native.actions[:, None].copy()

    def initial_mapping(self) -> np.ndarray:
        """int64 ``[N, 1]``: all-Drop (every buffer in HBM), always legal."""
        return np.full((self.num_units, 1), DROP, dtype=np.int64)

    def fallback_mapping(self) -> np.ndarray:
        """int64 ``[N, 1]``: all-Drop."""
        return self.initial_mapping()

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """The lowest-latency layout by exhaustive search over every legal game.

        Raises:
            NotImplementedError: the program has more than :data:`MAX_OPTIMUM_UNITS`
                buffers (no exact solver for larger games).
        """
        if self.num_units > MAX_OPTIMUM_UNITS:
            raise NotImplementedError(
                f"tpu-cmem optimum: {self.program.name!r} has {self.num_units} buffers; exhaustive "
                f"search stops at {MAX_OPTIMUM_UNITS} and there is no exact solver for larger games"
            )
        start = time.perf_counter()
        try:
            best = brute_force(self.program, objective="latency")
        except ValueError as err:  # too many legal games to enumerate
            raise NotImplementedError(f"tpu-cmem optimum: {err}") from err
        latency = -best.ret
        if not self.contention:
            latency = self.play(best.actions)[1].latency_s(False)
        return OptimumResult(
            mapping=best.actions[:, None].astype(np.int64),
            latency_s=float(latency),
            bound_s=float(latency),
            gap=0.0,
            proven=True,
            status="OPTIMAL",
            wall_s=time.perf_counter() - start,
            info={"games": best.games},
        )


class TPU(HardwareModel):
    """TPUv4i-like CMEM/HBM memory mapping as a game (Wang et al., arXiv:2305.07440).

    Keyword arguments are the fields of :class:`~hwmodels.tpu.params.TPUParams`
    (``cmem_mib``, ``hbm_gbps``, ``cmem_gbps``, ``copy_gbps``, ``peak_tflops``) plus
    ``repeats`` (unroll the workload as a serving loop, :meth:`Program.from_workload`),
    ``alias_ops`` (op types that work in place) and ``contention`` (copies slow the
    instructions they overlap in the latency).
    """

    name = "tpu-cmem"

    def __init__(
        self,
        repeats: int = 1,
        alias_ops: Sequence[str] = ("eltwise",),
        contention: bool = True,
        **params,
    ) -> None:
        known = {f.name for f in fields(TPUParams)}
        unknown = set(params) - known
        if unknown:
            raise TypeError(
                f"unknown tpu-cmem parameter(s) {sorted(unknown)}; expected {sorted(known)}, "
                "repeats, alias_ops or contention"
            )
        self.params = TPUParams(**params)
        self.repeats = int(repeats)
        self.alias_ops = tuple(alias_ops)
        self.contention = bool(contention)

    def program(self, workload: Workload) -> Program:
        """The program of ``workload`` on this chip."""
        return Program.from_workload(workload, self.params, self.repeats, self.alias_ops)

    def bind(self, workload: Workload) -> TPUTarget:
        log.debug("binding tpu-cmem %s to %r", self.params, workload.name)
        return TPUTarget(self.program(workload), self.contention)

    def __repr__(self) -> str:
        return f"TPU({self.params}, repeats={self.repeats}, alias_ops={self.alias_ops})"
