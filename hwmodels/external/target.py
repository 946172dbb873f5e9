"""The external command bound to one workload (:class:`ExternalTarget`)."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from hwmodels.base import Check, CheckRefused, Measurement, PriorSolution, Target, workload_graph
from hwmodels.external.errors import CallFailed, ExternalEvaluatorError, Refused
from hwmodels.external.process import run_command
from hwmodels.external.protocol import (
    PROTOCOL,
    parse_answer,
    parse_choices,
    parse_floats,
    parse_valid,
)
from hwmodels.nnpi.prior import PRIOR_KEY, NNPIPrior, nnpi_prior, prior_solve_options
from workloads.ir import Workload

if TYPE_CHECKING:
    from hwmodels.external.model import ExternalModel

log = logging.getLogger(__name__)

T = TypeVar("T")
#: a chunked answer: a measurement or a check
A = TypeVar("A", Measurement, Check)


class ExternalTarget(Target):
    """The external command bound to one workload; units are the workload's nodes.

    Args:
        model: the :class:`ExternalModel` (command, heads, timeout, retries, ...).
        workload: the workload; written to a temporary JSON file for the command unless
            ``model.inline_workload``.
    """

    def __init__(self, model: ExternalModel, workload: Workload) -> None:
        self.model = model
        self.workload = workload
        self.heads = {h: list(c) for h, c in model.heads.items()}
        self.deterministic = model.deterministic
        #: board runs one answer of a map costs (``repeats``): what the budget counts
        self.readings_per_map = model.repeats
        #: readings of a valid map the chip answered without a latency (``repeats`` > 1:
        #: the map's other readings were used)
        self.dropped_readings = 0
        self.num_units = workload.num_nodes
        self.unit_names = list(workload.node_names)
        self._num_choices = np.array([len(c) for c in self.heads.values()], dtype=np.int64)
        self._native: np.ndarray | None = None
        #: why the chip refused a ``check`` request (None: not refused); then never asked again
        self.check_refused: str | None = None
        self.workload_path: Path | None = None
        data = workload.to_dict()
        text = json.dumps(data, separators=(",", ":"))
        descriptor: dict[str, Any] = {
            "name": workload.name,
            "num_nodes": workload.num_nodes,
            "node_names": self.unit_names,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        }
        if model.inline_workload:
            descriptor["data"] = data
        else:
            folder = tempfile.mkdtemp(prefix="egrl-external-")
            weakref.finalize(self, shutil.rmtree, folder, True)
            self.workload_path = Path(folder) / "workload.json"
            self.workload_path.write_text(text, encoding="utf-8")
            descriptor["path"] = str(self.workload_path)
        self._descriptor = descriptor
        #: the chip's datasheet read as the NNP-I model (``model.prior``; None: none)
        self.prior = self._bind_prior()

    def _bind_prior(self) -> NNPIPrior | None:
        """The NNP-I model with the datasheet's figures bound to the workload, or None.

        Raises:
            ValueError: naming ``hwmodel.params.prior``: the workload does not fit the
                datasheet's capacities.
        """
        if self.model.prior is None:
            return None
        try:
            return nnpi_prior(self, **self.model.prior)
        except ValueError as exc:
            raise ValueError(f"{PRIOR_KEY} does not fit {self.workload.name!r}: {exc}") from None

    # -------------------------------------------------------------------- prior
    @property
    def has_prior(self) -> bool:
        """The chip has a datasheet the toolkit can solve (``hwmodel.params.prior``)."""
        return self.prior is not None

    def prior_solution(
        self, time_limit_s: float = 60.0, workers: int = 2, **options
    ) -> PriorSolution:
        """The datasheet solved: the NNP-I optimum on the prior's costs, hinted with the
        chip compiler's map, in this chip's choices (:meth:`NNPIPrior.solve`, which
        takes the ``options``: extra costs, a trust region, maps to exclude). Nothing is
        paid on the chip; its compiler's map is asked once (``baseline``).

        Raises:
            NotImplementedError: the chip has no ``prior``.
        """
        if self.prior is None:
            raise NotImplementedError(f"the external chip has no {PRIOR_KEY}")
        options = prior_solve_options(time_limit_s, options)
        return self.prior.solve(self.native_mapping(), time_limit_s, workers, **options)

    # ------------------------------------------------------------------ protocol
    @cached_property
    def graph(self):
        """The workload's PyG graph (``x`` float64 raw features ``[N, 19]``, ``edge_index``)."""
        return workload_graph(self.workload)

    def request(self, kind: str, **fields) -> dict:
        """A protocol request of ``kind`` (``"evaluate"``, ``"baseline"`` or ``"check"``)."""
        return {
            "protocol": PROTOCOL,
            "request": kind,
            "workload": self._descriptor,
            "heads": self.heads,
            **fields,
        }

    def _attempt(self, request: dict, parse: Callable[[dict], T]) -> T:
        """Run the command once on ``request`` and parse its answer."""
        m = self.model
        start = time.perf_counter()
        stdout = run_command(m.command, json.dumps(request), m.timeout_s, m.process_env, m.cwd)
        result = parse(parse_answer(stdout))
        log.debug(
            "external %s request answered in %.3f s",
            request["request"],
            time.perf_counter() - start,
        )
        return result

    def _call(
        self,
        request: dict,
        parse: Callable[[dict], T],
        attempts: int,
        where: str,
        refusable: bool = False,
    ) -> T:
        """:meth:`_attempt` up to ``attempts`` times.

        Raises:
            ExternalEvaluatorError: every attempt failed (no ``partial`` set).
            Refused: with ``refusable``, the command refused the request (not retried).
        """
        problems: list[str] = []
        for attempt in range(1, attempts + 1):
            try:
                return self._attempt(request, parse)
            except CallFailed as exc:
                if refusable and isinstance(exc, Refused):
                    raise
                problems.append(f"attempt {attempt}/{attempts}: {exc}")
                log.warning(
                    "external command %s, %s failed: %s", self.model.command, where, problems[-1]
                )
        raise ExternalEvaluatorError(
            f"external command {self.model.command} failed on {where} after {attempts} "
            f"attempt(s); last: {problems[-1]}",
            command=self.model.command,
            problems=problems,
        )

    # ---------------------------------------------------------------- measuring
    def _check_maps(self, maps) -> np.ndarray:
        arr = np.asarray(maps)
        expected = (self.num_units, len(self.heads))
        if arr.ndim != 3 or arr.shape[1:] != expected or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"maps must be integers of shape [B, {expected[0]}, {expected[1]}], "
                f"got {arr.dtype} {list(arr.shape)}"
            )
        arr = arr.astype(np.int64)
        self._check_range(arr, "map")
        return arr

    def _check_range(self, arr: np.ndarray, what: str) -> None:
        """Raise ``ValueError`` naming the first out-of-range choice of ``arr`` ``[B, N, H]``."""
        problem = self._range_problem(arr, what)
        if problem:
            raise ValueError(problem)

    def _range_problem(self, arr: np.ndarray, what: str) -> str | None:
        """A sentence naming the first out-of-range choice of ``arr`` ``[B, N, H]``, or None."""
        bad = (arr < 0) | (arr >= self._num_choices)
        if not bad.any():
            return None
        b, u, h = (int(x) for x in np.argwhere(bad)[0])
        head = list(self.heads)[h]
        return (
            f"{what} {b}: unit {self.unit_names[u]!r} head {head!r} has choice {arr[b, u, h]}, "
            f"expected 0..{self._num_choices[h] - 1} ({self.heads[head]})"
        )

    @cached_property
    def mappable_bytes(self) -> float | None:
        """Bytes the heads place (weights for ``weight``, outputs for ``activation``).

        ``None`` when a head is neither, so ``reassigned_bytes`` cannot be converted.
        """
        sizes = {
            "weight": self.workload.weight_bytes,
            "activation": self.workload.output_bytes,
        }
        if not set(self.heads) <= set(sizes):
            return None
        return float(sum(int(sizes[h].sum()) for h in self.heads))

    def _reassigned(self, answer: dict, valid: np.ndarray) -> np.ndarray:
        """float64 ``[B]`` reassigned-bytes ratio; 0 for valid maps, 1.0 when not given."""
        batch = len(valid)
        if "reassigned_ratio" in answer and "reassigned_bytes" in answer:
            raise CallFailed("give one of 'reassigned_ratio' and 'reassigned_bytes', not both")
        if "reassigned_ratio" in answer:
            ratio = parse_floats(answer, "reassigned_ratio", batch)
        elif "reassigned_bytes" in answer:
            if not self.mappable_bytes:
                raise CallFailed(
                    f"'reassigned_bytes' cannot be converted for heads {list(self.heads)} "
                    "(only 'weight' / 'activation' heads of a workload with bytes); "
                    "answer 'reassigned_ratio'"
                )
            ratio = parse_floats(answer, "reassigned_bytes", batch) / self.mappable_bytes
        else:
            ratio = np.ones(batch)
        ratio = np.where(valid, 0.0, np.where(np.isnan(ratio), 1.0, ratio))
        if np.any(ratio < 0) or not np.all(np.isfinite(ratio)):
            i = int(np.argmax((ratio < 0) | ~np.isfinite(ratio)))
            raise CallFailed(f"reassigned ratio of map {i} is {ratio[i]} (must be >= 0, finite)")
        return ratio

    def parse_evaluation(
        self, answer: dict, maps: np.ndarray, missing_ok: bool = False
    ) -> Measurement:
        """The :class:`Measurement` of ``maps`` ``[B, N, H]`` from an ``evaluate`` answer.

        With ``missing_ok`` (the repeats of a map, :meth:`measure`) a valid map answered
        with a ``null`` latency keeps it as NaN: one reading lost, not the call.

        Raises:
            CallFailed: a key is missing, has the wrong length or type, a valid map has
                no finite positive latency, or a rectified map is malformed.
        """
        batch = len(maps)
        valid = parse_valid(answer, batch)
        latency = parse_floats(answer, "latency_s", batch)
        bad = valid & ~(np.isfinite(latency) & (latency > 0))
        if missing_ok:
            bad &= ~np.isnan(latency)
        if bad.any():
            i = int(np.argmax(bad))
            raise CallFailed(f"map {i} is valid but its latency_s is {latency[i]} (NaN/null/<= 0)")
        return Measurement(**vars(self.parse_check(answer, maps)), latency_s=latency)

    def parse_check(self, answer: dict, maps: np.ndarray) -> Check:
        """The :class:`~hwmodels.base.Check` of ``maps`` ``[B, N, H]`` from a ``check``
        answer (or the compiler's part of an ``evaluate`` answer): ``valid``, and
        ``rectified`` and ``reassigned_*`` where given (defaults as in ``evaluate``).

        Raises:
            CallFailed: ``valid`` is missing or malformed, a rectified map is malformed or
                changes a valid map.
        """
        valid = parse_valid(answer, len(maps))
        if "rectified" in answer:
            rectified = parse_choices(answer["rectified"], maps.shape, "'rectified'")
            problem = self._range_problem(rectified, "rectified map")
            if problem:
                raise CallFailed(problem)
            changed = valid & np.any(rectified != maps, axis=(1, 2))
            if changed.any():
                raise CallFailed(
                    f"map {int(np.argmax(changed))} is valid but its rectified map differs from it"
                )
        else:
            rectified = np.where(valid[:, None, None], maps, self.fallback_mapping()[None])
        return Check(
            rectified=rectified.astype(np.int64),
            valid=valid,
            reassigned_ratio=self._reassigned(answer, valid),
        )

    def measure(self, maps, probs=None) -> Measurement:
        """Evaluate ``maps`` int ``[B, N, H]`` on the command, ``repeats`` times each.

        With ``repeats`` > 1 every map is sent that many times (one after the other in the
        same batch) and its answer is the mean latency of the repeats; it is valid only if
        every repeat was, and its repair and re-assigned ratio are the first repeat's.
        ``probs`` is not used (``wants_probabilities`` is false: the protocol sends maps only).

        Raises:
            ExternalEvaluatorError: see :meth:`measure_once`.
        """
        repeats = self.model.repeats
        if repeats == 1:
            return self.measure_once(maps)
        maps = self._check_maps(maps)
        m = self.measure_once(np.repeat(maps, repeats, axis=0), missing_ok=True)
        b = len(maps)
        valid = m.valid.reshape(b, repeats).all(axis=1)
        readings = m.latency_s.reshape(b, repeats)
        self._warn_if_noisy(readings, valid[:, None] & np.isfinite(readings))
        read = np.isfinite(readings).sum(axis=1)
        latency = np.where(read > 0, np.nansum(readings, axis=1) / np.maximum(read, 1), np.nan)
        ratio = m.reassigned_ratio[::repeats].copy()
        lost = valid & (read < repeats)
        if lost.any():
            self._count_lost(readings, valid, read)
        unread = valid & (read == 0)  # no reading left: answered as a map the chip did not run
        ratio[unread] = 1.0
        return Measurement(
            rectified=m.rectified[::repeats],
            valid=valid & ~unread,
            reassigned_ratio=ratio,
            latency_s=latency,
        )

    def _count_lost(self, readings: np.ndarray, valid: np.ndarray, read: np.ndarray) -> None:
        """Count and log the readings ``[B, R]`` of valid maps the chip answered without a
        latency (their maps keep the mean of the rest)."""
        lost = valid[:, None] & np.isnan(readings)
        self.dropped_readings += int(lost.sum())
        first = int(np.argmax(lost.any(axis=1)))
        log.warning(
            "external chip answered %d reading(s) of %d valid map(s) without a latency_s "
            "(map %d: %d of %d readings kept); %d reading(s) lost in this run so far",
            int(lost.sum()),
            int(lost.any(axis=1).sum()),
            first,
            int(read[first]),
            readings.shape[1],
            self.dropped_readings,
        )

    def _warn_if_noisy(self, readings: np.ndarray, valid: np.ndarray) -> None:
        """A chip declared deterministic (``deterministic: true``) whose repeats of one map
        ``[B, R]`` differ gets a warning that quotes them, once per target: its cache then
        answers a map from one reading, and its speedups are as noisy as the chip."""
        if self.deterministic is not True or getattr(self, "_warned_noisy", False):
            return
        ok = valid.all(axis=1)
        differ = np.flatnonzero(ok & (readings.max(axis=1) != readings.min(axis=1)))
        if not len(differ):
            return
        self._warned_noisy = True
        row = readings[differ[0]]
        log.warning(
            "external chip declared deterministic, but its %d readings of one map differ "
            "(%s s, %.2f%% apart): set hwmodel.params.deterministic=auto or false so that "
            "the run confirms its best",
            len(row),
            ", ".join(f"{x:.6g}" for x in row),
            100 * (row.max() - row.min()) / row.min(),
        )

    def measure_once(self, maps, missing_ok: bool = False) -> Measurement:
        """Evaluate ``maps`` int ``[B, N, H]`` on the command, in chunks of ``batch_size``
        (``missing_ok``: see :meth:`parse_evaluation`).

        Raises:
            ExternalEvaluatorError: a chunk failed after all attempts; its ``partial``
                holds the chunks measured before it.
        """
        maps = self._check_maps(maps)
        return self._ask_in_chunks(
            "evaluate", maps, lambda a, c: self.parse_evaluation(a, c, missing_ok), Measurement
        )

    def _ask_in_chunks(
        self,
        kind: str,
        maps: np.ndarray,
        parse: Callable[[dict, np.ndarray], A],
        answer: type[A],
    ) -> A:
        """``maps`` int64 ``[B, N, H]`` sent as ``kind`` requests (``"evaluate"`` or
        ``"check"``) in chunks of ``batch_size`` (:meth:`_chunks`), each chunk tried up to
        ``retries + 1`` times (:meth:`_call`) and read by ``parse(answer, chunk)``; the
        chunks' answers as one ``answer`` (``B`` rows). An error names a ``check`` chunk
        ``check chunk ...``.

        Raises:
            ExternalEvaluatorError: a chunk failed on every attempt; for ``evaluate`` its
                ``chunk_index``, ``chunk_range`` and ``partial`` (the chunks measured
                before it) are set and its message says where they are kept.
            Refused: the command refused a ``check`` request (not retried).
        """
        evaluate = kind == "evaluate"
        parts: list[A] = []
        for index, start, chunk, where in self._chunks(maps):
            request = self.request(kind, batch_index=index, maps=chunk.tolist())
            try:
                parts.append(
                    self._call(
                        request,
                        lambda a, c=chunk: parse(a, c),
                        self.model.retries + 1,
                        where if evaluate else f"{kind} {where}",
                        refusable=not evaluate,
                    )
                )
            except ExternalEvaluatorError as exc:
                if evaluate:
                    self._keep_measured(exc, index, (start, start + len(chunk)), parts)
                raise
        return self._concat(parts, answer)

    def _keep_measured(
        self,
        exc: ExternalEvaluatorError,
        index: int,
        rows: tuple[int, int],
        done: list[Measurement],
    ) -> None:
        """``exc`` of the ``evaluate`` chunk ``index`` (rows ``[start, stop)`` of the batch)
        given the chunks measured before it (``partial``) and a message saying so."""
        exc.chunk_index = index
        exc.chunk_range = rows
        exc.partial = self._concat(done, Measurement)
        exc.args = (
            f"{exc.args[0]}; the {rows[0]} map(s) measured before it are kept in memory "
            "in this error's attribute hwmodels.external.ExternalEvaluatorError.partial "
            "(no file is written)",
        )

    def _chunks(self, maps: np.ndarray) -> Iterator[tuple[int, int, np.ndarray, str]]:
        """``maps`` ``[B, N, H]`` in chunks of ``batch_size``: each chunk's index, its first
        row, the chunk and where it is, as an error names it."""
        size = self.model.batch_size or max(len(maps), 1)
        for index, start in enumerate(range(0, len(maps), size)):
            chunk = maps[start : start + size]
            last = start + len(chunk) - 1
            yield index, start, chunk, f"chunk {index} (maps {start}..{last} of {len(maps)})"

    def _concat(self, parts: list[A], kind: type[A]) -> A:
        """The answers of consecutive chunks as one ``kind`` (:class:`Measurement` or
        :class:`Check`); an empty one for none."""
        if parts:
            return kind(
                *(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(kind))
            )
        n, h = self.num_units, len(self.heads)
        empty = {"rectified": np.zeros((0, n, h), np.int64), "valid": np.zeros(0, bool)}
        return kind(*(empty.get(f.name, np.zeros(0)) for f in fields(kind)))

    # ------------------------------------------------------------------ checking
    @property
    def checks(self) -> bool:
        """The chip may be asked ``check`` requests: it has not refused one."""
        return self.check_refused is None

    def check(self, maps, probs=None) -> Check:
        """The chip's compiler alone on ``maps`` int ``[B, N, H]`` (``check`` requests, in
        chunks of ``batch_size``; no board run, nothing counted against a budget).

        A chip that refuses the request (answers ``{"error": ...}`` or exits non-zero) is
        not asked again in this run: the refusal is logged once and every later call
        raises :class:`CheckRefused` at once.

        Raises:
            CheckRefused: the chip refused a ``check`` request (now or before).
            ExternalEvaluatorError: a chunk's answer was malformed, or the command timed
                out, on every attempt (the message as for ``evaluate``).
        """
        if self.check_refused is not None:
            raise CheckRefused(self.check_refused)
        maps = self._check_maps(maps)
        try:
            return self._ask_in_chunks("check", maps, self.parse_check, Check)
        except Refused as exc:
            self.check_refused = (
                f"external command {self.model.command} refused the check request ({exc}); "
                "its maps are checked by the model alone for the rest of the run"
            )
            log.warning("%s", self.check_refused)
            raise CheckRefused(self.check_refused) from None

    # ----------------------------------------------------------------- baseline
    def parse_baseline(self, answer: dict) -> np.ndarray:
        """int64 ``[N, H]`` from a ``baseline`` answer's ``mapping``."""
        if "mapping" not in answer:
            raise CallFailed(f"answer has no 'mapping' (keys: {sorted(answer)})")
        return parse_choices(answer["mapping"], (self.num_units, len(self.heads)), "'mapping'")

    def native_mapping(self) -> np.ndarray:
        """The chip compiler's own map ``[N, H]`` (asked once, then cached).

        The ``baseline`` request is sent once. If the command fails on it or answers
        with an error, the :meth:`fallback_mapping` stands in and a warning is logged.

        Raises:
            ExternalEvaluatorError: the command answered with a malformed mapping.
        """
        if self._native is None:
            try:
                stdout = run_command(
                    self.model.command,
                    json.dumps(self.request("baseline")),
                    self.model.timeout_s,
                    self.model.process_env,
                    self.model.cwd,
                )
                answer = parse_answer(stdout)
            except CallFailed as exc:
                log.warning(
                    "external command %s gave no baseline map (%s); using the fallback map",
                    self.model.command,
                    exc,
                )
                self._native = self.fallback_mapping()
            else:
                self._native = self._checked_baseline(answer)
        return self._native.copy()

    def initial_mapping(self) -> np.ndarray:
        """int64 ``[N, H]``: every unit on the model's ``initial`` choice of each head."""
        return np.tile(self.model.initial_choices, (self.num_units, 1))

    def fallback_mapping(self) -> np.ndarray:
        """int64 ``[N, H]``: every unit on the model's ``fallback`` choice of each head
        (never asks the command, so it can stand in when the command fails)."""
        return np.tile(self.model.fallback_choices, (self.num_units, 1))

    def _checked_baseline(self, answer: dict) -> np.ndarray:
        try:
            mapping = self.parse_baseline(answer)
            problem = self._range_problem(mapping[None], "baseline mapping")
            if problem:
                raise CallFailed(problem)
        except CallFailed as exc:
            raise ExternalEvaluatorError(
                f"external command {self.model.command} answered the baseline request "
                f"with a malformed mapping: {exc}",
                command=self.model.command,
                problems=[str(exc)],
            ) from None
        return mapping

    def __repr__(self) -> str:
        return f"ExternalTarget({self.workload.name!r}, command={self.model.command})"
