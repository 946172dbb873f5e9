"""The ``external`` hardware model: a real chip (or its compiler) behind a command.

>>> import hwmodels
>>> hw = hwmodels.make("external", command=["python", "examples/external_chip.py"])
>>> target = hw.bind(workload)
>>> m = target.measure(maps)  # maps: int [B, N, H]

The command speaks the ``egrl-external/1`` protocol (``docs/external.md``): it is run
once per chunk of maps, reads one JSON request on stdin and prints one JSON answer on
stdout. Three requests exist: ``evaluate`` (compile and run a batch of maps),
``baseline`` (the chip compiler's own map) and, optionally, ``check`` (the compiler
alone: which maps it accepts and its repair of the others, no board run). The workload is written once, at bind
time, to a JSON file whose path every request carries (or, with
``inline_workload=True``, it rides inside every request).

Robustness: every call has a timeout (the command's whole process group is killed),
failed calls are retried, and when a chunk still fails an
:class:`ExternalEvaluatorError` carries the chunks already measured.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from hwmodels import register
from hwmodels.base import Check, HardwareModel, Measurement, Target, workload_graph
from workloads.ir import Workload

if TYPE_CHECKING:
    from hwmodels.nnpi import NNPITarget

log = logging.getLogger(__name__)

PROTOCOL = "egrl-external/1"

#: NNP-I's decision heads: the weight and the activation of every node go to one level
#: (the default heads; their first choice, DRAM, is the default initial and fallback choice).
NNPI_HEADS: dict[str, list[str]] = {
    "weight": ["DRAM", "LLC", "SRAM"],
    "activation": ["DRAM", "LLC", "SRAM"],
}

#: characters of the command's stderr quoted in errors
_STDERR_TAIL_CHARS = 2000
#: seconds to wait for the pipes to close once a timed-out process group is killed
_DRAIN_S = 5.0

T = TypeVar("T")
#: a chunked answer: a measurement or a check
A = TypeVar("A", Measurement, Check)


class ExternalEvaluatorError(RuntimeError):
    """The external command failed on a chunk of maps after all its attempts.

    Attributes:
        command: the command as run (argv list).
        chunk_index: index of the chunk that failed (``None`` outside ``measure``).
        chunk_range: ``(start, stop)`` rows of the measured batch that chunk held.
        problems: what went wrong on each attempt, oldest first.
        partial: the :class:`Measurement` of the chunks measured before the failure
            (rows ``0 .. chunk_range[0] - 1`` of the batch); ``None`` outside ``measure``.
    """

    def __init__(
        self,
        message: str,
        command: list[str],
        problems: Sequence[str] = (),
        chunk_index: int | None = None,
        chunk_range: tuple[int, int] | None = None,
        partial: Measurement | None = None,
    ) -> None:
        super().__init__(message)
        self.command = list(command)
        self.problems = list(problems)
        self.chunk_index = chunk_index
        self.chunk_range = chunk_range
        self.partial = partial


class _CallFailed(Exception):
    """One attempt failed; the message says why (internal, triggers a retry)."""


class _Refused(_CallFailed):
    """The command exited non-zero or answered ``{"error": ...}``: it refused the request
    (a ``check`` request so refused is not asked again)."""


class CheckRefused(NotImplementedError):
    """The chip answered a ``check`` request with an error: its maps are checked by the
    model alone for the rest of the run (:meth:`ExternalTarget.check`)."""


# --------------------------------------------------------------------------- process
def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (it was started in a new session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(proc: subprocess.Popen) -> tuple[str, str]:
    """Collect what a killed process left in its pipes, without waiting forever."""
    try:
        return proc.communicate(timeout=_DRAIN_S)
    except subprocess.TimeoutExpired:  # a descendant escaped the group and holds a pipe
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return "", ""


def _tail(text: str) -> str:
    text = text.strip()
    if len(text) > _STDERR_TAIL_CHARS:
        text = "..." + text[-_STDERR_TAIL_CHARS:]
    return text or "(empty)"


def _run_command(
    command: list[str],
    payload: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> str:
    """Run ``command`` once with ``payload`` on stdin and return its stdout.

    The command runs in a new session; on timeout (or when the caller is interrupted)
    its whole process group is killed.

    Raises:
        _CallFailed: the command could not start, timed out, or exited non-zero.
    """
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise _CallFailed(f"could not start: {exc}") from exc
    try:
        out, err = proc.communicate(payload, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, err = _drain(proc)
        raise _CallFailed(
            f"timed out after {timeout_s:g} s (process group killed); stderr tail: {_tail(err)}"
        ) from None
    except BaseException:
        _kill_group(proc)
        _drain(proc)
        raise
    if proc.returncode != 0:
        raise _Refused(f"exit code {proc.returncode}{_said(out)}; stderr tail: {_tail(err)}")
    if err.strip():
        log.debug("external command stderr: %s", _tail(err))
    return out


def _said(stdout: str) -> str:
    """``", answered with an error: ..."`` when ``stdout`` holds a JSON error answer."""
    try:
        answer = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except json.JSONDecodeError:
        return ""
    if isinstance(answer, dict) and "error" in answer:
        return f", answered with an error: {answer['error']}"
    return ""


def _parse_answer(stdout: str) -> dict:
    """The JSON object a command printed: the whole stdout, else its last non-empty line.

    Raises:
        _CallFailed: no JSON object could be read, or it carries ``"error"`` or another
            protocol's name.
    """
    text = stdout.strip()
    if not text:
        raise _CallFailed("printed nothing on stdout (expected one JSON object)")
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        last = text.splitlines()[-1]
        try:
            answer = json.loads(last)
        except json.JSONDecodeError:
            raise _CallFailed(
                f"stdout is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                f"stdout starts with {text[:200]!r}"
            ) from None
    if not isinstance(answer, dict):
        raise _CallFailed(f"answer is a JSON {type(answer).__name__}, expected an object")
    if "error" in answer:
        raise _Refused(f"answered with an error: {answer['error']}")
    if answer.get("protocol", PROTOCOL) != PROTOCOL:
        raise _CallFailed(f"answered protocol {answer['protocol']!r}, expected {PROTOCOL!r}")
    return answer


# --------------------------------------------------------------------------- answers
def _key(answer: dict, key: str, batch: int) -> list:
    """``answer[key]`` as a list of ``batch`` entries."""
    if key not in answer:
        raise _CallFailed(f"answer has no {key!r} (keys: {sorted(answer)})")
    value = answer[key]
    if not isinstance(value, list) or len(value) != batch:
        got = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
        raise _CallFailed(f"{key!r} must be a list of {batch} entries (one per map), got {got}")
    return value


def _parse_valid(answer: dict, batch: int) -> np.ndarray:
    """bool ``[B]`` from ``answer["valid"]`` (JSON booleans only)."""
    values = _key(answer, "valid", batch)
    bad = [i for i, v in enumerate(values) if not isinstance(v, bool)]
    if bad:
        raise _CallFailed(f"'valid' must hold JSON booleans; map {bad[0]} has {values[bad[0]]!r}")
    return np.array(values, dtype=bool)


def _parse_floats(answer: dict, key: str, batch: int) -> np.ndarray:
    """float64 ``[B]`` from ``answer[key]``; ``null`` becomes NaN."""
    values = _key(answer, key, batch)
    bad = [
        i
        for i, v in enumerate(values)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))
    ]
    if bad:
        raise _CallFailed(f"{key!r} must hold numbers or null; map {bad[0]} has {values[bad[0]]!r}")
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def _parse_choices(value, shape: tuple[int, ...], what: str) -> np.ndarray:
    """int64 array of ``shape`` from nested JSON lists of integers."""
    try:
        arr = np.asarray(value)
    except ValueError:
        raise _CallFailed(
            f"{what} is ragged: expected nested lists of shape {list(shape)}"
        ) from None
    if arr.shape != shape:
        raise _CallFailed(f"{what} has shape {list(arr.shape)}, expected {list(shape)}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise _CallFailed(f"{what} must hold integer choices (got {arr.dtype} values)")
    return arr.astype(np.int64)


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
        stdout = _run_command(m.command, json.dumps(request), m.timeout_s, m.process_env, m.cwd)
        result = parse(_parse_answer(stdout))
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
            _Refused: with ``refusable``, the command refused the request (not retried).
        """
        problems: list[str] = []
        for attempt in range(1, attempts + 1):
            try:
                return self._attempt(request, parse)
            except _CallFailed as exc:
                if refusable and isinstance(exc, _Refused):
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
            raise _CallFailed("give one of 'reassigned_ratio' and 'reassigned_bytes', not both")
        if "reassigned_ratio" in answer:
            ratio = _parse_floats(answer, "reassigned_ratio", batch)
        elif "reassigned_bytes" in answer:
            if not self.mappable_bytes:
                raise _CallFailed(
                    f"'reassigned_bytes' cannot be converted for heads {list(self.heads)} "
                    "(only 'weight' / 'activation' heads of a workload with bytes); "
                    "answer 'reassigned_ratio'"
                )
            ratio = _parse_floats(answer, "reassigned_bytes", batch) / self.mappable_bytes
        else:
            ratio = np.ones(batch)
        ratio = np.where(valid, 0.0, np.where(np.isnan(ratio), 1.0, ratio))
        if np.any(ratio < 0) or not np.all(np.isfinite(ratio)):
            i = int(np.argmax((ratio < 0) | ~np.isfinite(ratio)))
            raise _CallFailed(f"reassigned ratio of map {i} is {ratio[i]} (must be >= 0, finite)")
        return ratio

    def parse_evaluation(
        self, answer: dict, maps: np.ndarray, missing_ok: bool = False
    ) -> Measurement:
        """The :class:`Measurement` of ``maps`` ``[B, N, H]`` from an ``evaluate`` answer.

        With ``missing_ok`` (the repeats of a map, :meth:`measure`) a valid map answered
        with a ``null`` latency keeps it as NaN: one reading lost, not the call.

        Raises:
            _CallFailed: a key is missing, has the wrong length or type, a valid map has
                no finite positive latency, or a rectified map is malformed.
        """
        batch = len(maps)
        valid = _parse_valid(answer, batch)
        latency = _parse_floats(answer, "latency_s", batch)
        bad = valid & ~(np.isfinite(latency) & (latency > 0))
        if missing_ok:
            bad &= ~np.isnan(latency)
        if bad.any():
            i = int(np.argmax(bad))
            raise _CallFailed(f"map {i} is valid but its latency_s is {latency[i]} (NaN/null/<= 0)")
        return Measurement(**vars(self.parse_check(answer, maps)), latency_s=latency)

    def parse_check(self, answer: dict, maps: np.ndarray) -> Check:
        """The :class:`~hwmodels.base.Check` of ``maps`` ``[B, N, H]`` from a ``check``
        answer (or the compiler's part of an ``evaluate`` answer): ``valid``, and
        ``rectified`` and ``reassigned_*`` where given (defaults as in ``evaluate``).

        Raises:
            _CallFailed: ``valid`` is missing or malformed, a rectified map is malformed or
                changes a valid map.
        """
        valid = _parse_valid(answer, len(maps))
        if "rectified" in answer:
            rectified = _parse_choices(answer["rectified"], maps.shape, "'rectified'")
            problem = self._range_problem(rectified, "rectified map")
            if problem:
                raise _CallFailed(problem)
            changed = valid & np.any(rectified != maps, axis=(1, 2))
            if changed.any():
                raise _CallFailed(
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
        done: list[Measurement] = []
        for index, start, chunk, where in self._chunks(maps):
            request = self.request("evaluate", batch_index=index, maps=chunk.tolist())
            try:
                done.append(
                    self._call(
                        request,
                        lambda a, c=chunk: self.parse_evaluation(a, c, missing_ok),
                        self.model.retries + 1,
                        where,
                    )
                )
            except ExternalEvaluatorError as exc:
                exc.chunk_index = index
                exc.chunk_range = (start, start + len(chunk))
                exc.partial = self._concat(done, Measurement)
                exc.args = (
                    f"{exc.args[0]}; the {start} map(s) measured before it are kept in memory "
                    "in this error's attribute hwmodels.external.ExternalEvaluatorError.partial "
                    "(no file is written)",
                )
                raise
        return self._concat(done, Measurement)

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
        parts: list[Check] = []
        for index, _, chunk, where in self._chunks(maps):
            request = self.request("check", batch_index=index, maps=chunk.tolist())
            try:
                parts.append(
                    self._call(
                        request,
                        lambda a, c=chunk: self.parse_check(a, c),
                        self.model.retries + 1,
                        f"check {where}",
                        refusable=True,
                    )
                )
            except _Refused as exc:
                self.check_refused = (
                    f"external command {self.model.command} refused the check request ({exc}); "
                    "its maps are checked by the model alone for the rest of the run"
                )
                log.warning("%s", self.check_refused)
                raise CheckRefused(self.check_refused) from None
        return self._concat(parts, Check)

    # ----------------------------------------------------------------- baseline
    def parse_baseline(self, answer: dict) -> np.ndarray:
        """int64 ``[N, H]`` from a ``baseline`` answer's ``mapping``."""
        if "mapping" not in answer:
            raise _CallFailed(f"answer has no 'mapping' (keys: {sorted(answer)})")
        return _parse_choices(answer["mapping"], (self.num_units, len(self.heads)), "'mapping'")

    def native_mapping(self) -> np.ndarray:
        """The chip compiler's own map ``[N, H]`` (asked once, then cached).

        The ``baseline`` request is sent once. If the command fails on it or answers
        with an error, the :meth:`fallback_mapping` stands in and a warning is logged.

        Raises:
            ExternalEvaluatorError: the command answered with a malformed mapping.
        """
        if self._native is None:
            try:
                stdout = _run_command(
                    self.model.command,
                    json.dumps(self.request("baseline")),
                    self.model.timeout_s,
                    self.model.process_env,
                    self.model.cwd,
                )
                answer = _parse_answer(stdout)
            except _CallFailed as exc:
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
                raise _CallFailed(problem)
        except _CallFailed as exc:
            raise ExternalEvaluatorError(
                f"external command {self.model.command} answered the baseline request "
                f"with a malformed mapping: {exc}",
                command=self.model.command,
                problems=[str(exc)],
            ) from None
        return mapping

    def __repr__(self) -> str:
        return f"ExternalTarget({self.workload.name!r}, command={self.model.command})"


def _check_heads(heads: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    if not heads:
        raise ValueError("heads must name at least one decision head")
    out: dict[str, list[str]] = {}
    for name, choices in heads.items():
        if isinstance(choices, str) or not choices:
            raise ValueError(f"head {name!r} must list its choice names, got {choices!r}")
        if len(set(choices)) != len(choices):
            raise ValueError(f"head {name!r} repeats a choice: {list(choices)}")
        out[str(name)] = [str(c) for c in choices]
    return out


def _choice_per_head(
    heads: dict[str, list[str]], named: Mapping[str, str] | None, what: str
) -> np.ndarray:
    """int64 ``[H]``: the index of the choice ``named[head]`` of each head (its first
    choice where ``named`` gives none)."""
    named = dict(named or {})
    unknown = sorted(set(named) - set(heads))
    if unknown:
        raise ValueError(f"{what} names unknown head(s) {unknown}; heads are {list(heads)}")
    out = []
    for head, choices in heads.items():
        choice = str(named.get(head, choices[0]))
        if choice not in choices:
            raise ValueError(f"{what}: head {head!r} has no choice {choice!r} ({choices})")
        out.append(choices.index(choice))
    return np.array(out, dtype=np.int64)


@register("external")
class ExternalModel(HardwareModel):
    """A chip behind a command that speaks ``egrl-external/1`` (``docs/external.md``).

    Args:
        command: argv list, or a string split with :func:`shlex.split`.
        heads: decision heads and their choice names; default :data:`NNPI_HEADS`.
        initial: the choice name of each head that makes the initial map (EGRL's initial
            mapping action: every unit on it); a head not named gets its first choice.
        fallback: the same for the fallback map, which must be valid on the chip: it
            stands in for the repair of an invalid map the command does not report, and
            for the baseline when the command gives none.
        timeout_s: seconds one call may take before its process group is killed.
        retries: further attempts after a failed call (``evaluate`` requests only).
        batch_size: maps per call; ``None`` sends the whole batch in one call.
        env: environment variables added to (overriding) the current environment.
        cwd: working directory of the command.
        inline_workload: put the workload itself in every request instead of the path
            of a file written at bind time (for commands that cannot read local files).
        deterministic: the chip answers the same map the same way every time, so a map
            is measured once and answered from memory afterwards (``Target.deterministic``);
            false for a noisy chip, whose maps are measured every time they are proposed;
            ``"auto"`` (the default): the compiler's map is read twice when the chip is
            bound, and the chip is deterministic if the two readings are identical
            (:class:`egrl.env.Env` decides).
        repeats: measurements of each map, averaged (for a noisy chip); each is a board
            run, and the budget counts board runs (``readings_per_map``).
    """

    name = "external"
    reading_params = (
        "timeout_s",
        "retries",
        "batch_size",
        "inline_workload",
        "deterministic",
        "repeats",
    )

    def __init__(
        self,
        command: str | Sequence[str],
        heads: Mapping[str, Sequence[str]] | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        batch_size: int | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        inline_workload: bool = False,
        initial: Mapping[str, str] | None = None,
        fallback: Mapping[str, str] | None = None,
        deterministic: bool | str = "auto",
        repeats: int = 1,
    ) -> None:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise ValueError("command is empty")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if int(retries) < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if not isinstance(deterministic, bool) and deterministic != "auto":
            raise ValueError(f"deterministic must be true, false or auto, got {deterministic!r}")
        if isinstance(repeats, bool) or int(repeats) != repeats or int(repeats) < 1:
            raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
        self.command = argv
        self.heads = _check_heads(copy.deepcopy(dict(heads or NNPI_HEADS)))
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.env = dict(env or {})
        self.cwd = cwd
        self.inline_workload = bool(inline_workload)
        self.deterministic = deterministic
        self.repeats = int(repeats)
        self.initial_choices = _choice_per_head(self.heads, initial, "initial")
        self.fallback_choices = _choice_per_head(self.heads, fallback, "fallback")

    @property
    def process_env(self) -> dict[str, str] | None:
        """The command's environment: the current one with :attr:`env` on top."""
        return {**os.environ, **{k: str(v) for k, v in self.env.items()}} if self.env else None

    def bind(self, workload: Workload) -> ExternalTarget:
        """The command bound to ``workload`` (writes the workload file)."""
        return ExternalTarget(self, workload)

    def __repr__(self) -> str:
        return f"ExternalModel(command={self.command}, heads={list(self.heads)})"


# --------------------------------------------------------------------------- NNP-I prior
@dataclass(frozen=True)
class NNPIPrior:
    """The NNP-I model's view of an external chip's maps: a free prior, never a measurement.

    An external chip with the NNP-I heads places the same tensors on the same kind of
    levels, so the NNP-I target bound to the same workload can describe its maps
    (:meth:`hwmodels.nnpi.NNPITarget.describe`) or predict their latency before the chip
    is paid to run them. Build it with :func:`nnpi_prior`.

    Attributes:
        target: the NNP-I target bound to the external target's workload.
        columns: int64 ``[2]``: the external head read as NNP-I's ``weight`` and
            ``activation`` head.
        levels: int64 ``[2, K]``: the NNP-I level of each choice of those heads
            (``K`` = the most choices of either; -1 past a head's own choices).
    """

    target: NNPITarget
    columns: np.ndarray
    levels: np.ndarray

    @property
    def description_names(self) -> list[str]:
        """Columns of :meth:`describe` (the NNP-I target's)."""
        return self.target.description_names

    def nnpi_maps(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, N, 2]``: the external maps ``[B, N, H]`` in NNP-I's choices."""
        maps = np.asarray(maps, dtype=np.int64)
        picked = maps[:, :, self.columns]  # [B, N, 2]
        return self.levels[np.arange(2)[None, None, :], picked]

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B, F]``: the NNP-I description of the external maps ``[B, N, H]``."""
        return self.target.describe(self.nnpi_maps(maps))

    def latency_s(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: the NNP-I cost model's latency of the external maps as given."""
        from hwmodels.nnpi.params import FS_PER_S

        return self.target.latency_fs(self.nnpi_maps(maps)) / FS_PER_S


def nnpi_prior(target: Target, **params) -> NNPIPrior:
    """The NNP-I model bound to ``target``'s workload, reading ``target``'s maps.

    Nothing is measured and the external command is not called: the NNP-I target is
    built from the workload alone (its compiler never runs). ``target`` needs the heads
    ``weight`` and ``activation`` (any order, beside other heads, which are ignored)
    whose choices are named after NNP-I levels (``DRAM``, ``LLC``, ``SRAM``, any case,
    any order or subset), as :data:`NNPI_HEADS` are.

    Args:
        target: an :class:`ExternalTarget` (or any target with ``heads`` and ``workload``).
        **params: NNP-I parameters (:class:`~hwmodels.nnpi.NNPIParams` fields,
            ``native``); the defaults model the EGRL paper's chip.

    Raises:
        ValueError: a head is missing or names a choice that is no NNP-I level; the
            workload does not fit NNP-I's DRAM.
    """
    from hwmodels.nnpi import LEVELS, NNPI

    heads = list(target.heads)
    columns, levels = [], []
    for head in ("weight", "activation"):
        if head not in target.heads:
            raise ValueError(
                f"an NNP-I prior needs the heads 'weight' and 'activation'; the target has {heads}"
            )
        choices = [c.upper() for c in target.heads[head]]
        unknown = [c for c in target.heads[head] if c.upper() not in LEVELS]
        if unknown:
            raise ValueError(
                f"an NNP-I prior reads head {head!r} choices as NNP-I levels {list(LEVELS)}; "
                f"{unknown} are none of them"
            )
        columns.append(heads.index(head))
        levels.append([LEVELS.index(c) for c in choices])
    width = max(len(row) for row in levels)
    table = np.full((2, width), -1, dtype=np.int64)
    for h, row in enumerate(levels):
        table[h, : len(row)] = row
    nnpi = NNPI(**params).bind(target.workload)
    return NNPIPrior(nnpi, np.array(columns, dtype=np.int64), table)
