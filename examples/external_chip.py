#!/usr/bin/env python
"""A toy chip that speaks the ``egrl-external/1`` protocol (see docs/external.md).

It stands in for a real chip's compiler and runtime: it reads one JSON request on
stdin and prints one JSON answer on stdout. It does not import egrl; it only reads
the workload file the request points at.

Cost model (three memory levels, NNP-I-like defaults from the Spring Hill figures):

* compiler: tensors are placed in execution order (each node's weight, then its
  activation); a weight occupies its level for the whole run, an activation from its
  producer's step to its last consumer's step. A tensor that does not fit where the
  map asks is demoted one level at a time (choice 0, DRAM, is unbounded). A map is
  valid when nothing was demoted; ``reassigned_bytes`` counts the demoted bytes.
* runtime: a node takes ``max(macs / mac_rate, bytes moved / bandwidth)``: it reads
  its weight and its inputs from their levels (host inputs from DRAM) and writes its
  output to its level. Latency is the sum over nodes. Invalid maps are not run
  (``latency_s`` is null), as on the real chip in EGRL.
* ``--shared-bandwidth``: a node's transfers run at the same time instead of one after
  another; transfers on the same memory level share that level's bandwidth, transfers on
  different levels overlap. A node's memory time is then its busiest level's bytes over
  that level's bandwidth, ``max_L bytes_L / bandwidth_L``, instead of the sum of every
  transfer's bytes over its level's bandwidth. Spreading a node's tensors over levels
  pays, and putting everything in SRAM is no longer the fastest map.
* ``--dram-access-us L``: every transfer to or from DRAM (a weight read, an output
  written, an input read, a host input) also pays a fixed ``L`` microseconds (row
  activation, command and DMA set-up), so a small tensor in DRAM costs more than its bytes
  say. The compiler places by capacity alone and does not see it.
* ``--llc-contention A`` (in [0, 1)): the LLC's bandwidth at a node's step falls with how
  full the LLC is then, ``bandwidth x (1 - A x held / capacity)`` (conflict misses and
  evictions grow as it fills), so filling the LLC slows every transfer through it. The
  compiler only checks that what it places fits.

* ``--noise-cv CV``: every reading of a valid map's latency is multiplied by lognormal
  noise of coefficient of variation ``CV`` (mean 1), as on a board whose runs vary. With
  ``--noise-state FILE`` the draws are reproducible: reading ``r`` of a run (counted in
  ``FILE``, which a run should start without) draws from ``--noise-seed`` and ``r``, so
  two readings of the same map still differ; without it they come from the OS.

Effects a datasheet model (the NNP-I roofline, ``hwmodels/nnpi``) does not have:

* ``--op-efficiency CLASS=F,...``: a node of that operator class runs its MACs at ``F``
  (in (0, 1]) times the MAC rate. Classes, read from the workload file's ``op_type``,
  ``attrs`` and shapes, first match: ``vector`` (no MACs: pooling, norms, softmax,
  layout), ``attention`` (a matmul of two activations), ``depthwise`` (a grouped conv),
  ``small-channel`` (a conv with under 16 input channels), ``pointwise`` (a 1x1 conv),
  ``conv`` (any other conv), ``linear`` (every other node with MACs). Unnamed classes
  run at peak. Naming ``vector`` also counts every node's ``vector_ops`` (fused norms,
  activations, pooling), at that share of the MAC rate, after its MACs.
* ``--weight-prefetch``: a node's weight streams in while the previous node computes:
  the part of its weight read (bytes over bandwidth, plus the DRAM access time) that fits
  in the previous node's memory-idle time, ``max(compute - memory, 0)`` with that node's
  transfers counted in full, costs nothing. A weight left in a slow level behind a
  compute-bound node is then free.
* ``--bank-conflicts F`` (>= 0): the tensors a node moves in SRAM at once (its weight,
  output and producers' outputs placed there) share its banks: SRAM's bandwidth for that
  node is divided by ``1 + F x (k - 1)`` for ``k`` such tensors.
* ``--bandwidth-fraction LEVEL=F,...``: a level reaches ``F`` (in (0, 1]) of its
  datasheet bandwidth (``--dram-gbps``, ...), e.g. ``DRAM=0.7``; the SRAM figure is the
  engines' aggregate, which one layer's tensors do not reach.
* ``--half-bandwidth-kib LEVEL=K,...``: a transfer of ``b`` bytes on that level reaches
  ``b / (b + K KiB)`` of its bandwidth (it takes ``(b + K KiB) / bandwidth``): set-up and
  burst overheads make small transfers slow.

Every effect combines with the others; a node's time per memory level is the bytes moved
there (plus ``--half-bandwidth-kib`` per transfer) over the level's effective bandwidth
(its fraction, the LLC's contention, SRAM's bank conflicts) plus the DRAM access times,
less the prefetched part of its weight read, and the node's memory time is the sum over
levels, or the busiest level with ``--shared-bandwidth``. Without any effect flag the
chip answers exactly as before.

Chips that depart from the roofline, by name: ``--chip NAME`` puts the flags of
``CHIPS[NAME]`` first (``docs/external.md``; ``benchmarks/chip_effects.py`` measures
them). Each has the study chips' figures ``--shared-bandwidth --sram-kib 2048 --tmacs
50`` (its datasheet as NNP-I figures: ``sram_mib=2, peak_tops=100``, the others the
defaults) and effects no datasheet gives:

* ``banks``: ``--bandwidth-fraction SRAM=0.1 --bank-conflicts 0.4``: one layer reaches a
  tenth of the SRAM's aggregate figure, and the tensors a node keeps there conflict;
* ``stream``: ``--bandwidth-fraction SRAM=0.2 --bank-conflicts 1 --weight-prefetch``;
* ``ops``: ``--op-efficiency conv=0.5,pointwise=0.5,vector=0.25 --weight-prefetch
  --bandwidth-fraction SRAM=0.1,DRAM=0.7 --bank-conflicts 1``;
* ``mislead``: ``--bandwidth-fraction SRAM=0.083 --bank-conflicts 1``: a layer reaches
  one engine's twelfth of the SRAM's aggregate figure, below the LLC's, so the level the
  datasheet calls fastest is the slowest place for the activations.

Usage::

    python examples/external_chip.py --sram-kib 4096 --llc-kib 24576 < request.json
    python examples/external_chip.py --shared-bandwidth --sram-kib 2048 < request.json
    python examples/external_chip.py --dram-access-us 2 --llc-contention 0.5 < request.json
    python examples/external_chip.py --noise-cv 0.05 --noise-state run/noise.txt < request.json
    python examples/external_chip.py --chip mislead < request.json
    python examples/external_chip.py --op-efficiency pointwise=0.5,vector=0.25 < request.json
    python examples/external_chip.py --weight-prefetch --bank-conflicts 0.5 < request.json
    python examples/external_chip.py --bandwidth-fraction DRAM=0.7 --half-bandwidth-kib DRAM=8 < request.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

LEVELS = ("DRAM", "LLC", "SRAM")
#: operator classes of ``--op-efficiency``, in the order a node is matched to them
OP_CLASSES = ("vector", "attention", "depthwise", "small-channel", "pointwise", "conv", "linear")
#: a convolution with fewer input channels than this is ``small-channel``
SMALL_CHANNELS = 16
#: the study chips' figures (SRAM 2 MiB, 50 tera-MACs/s, transfers that share bandwidth)
STUDY_FIGURES = ("--shared-bandwidth", "--sram-kib", "2048", "--tmacs", "50")
#: ``--chip NAME``: chips that depart from the roofline, the study chips' figures and
#: effects no datasheet gives (module docstring); ``mislead``'s datasheet misleads
CHIPS = {
    "banks": (*STUDY_FIGURES, "--bandwidth-fraction", "SRAM=0.1", "--bank-conflicts", "0.4"),
    "stream": (
        *STUDY_FIGURES,
        *("--bandwidth-fraction", "SRAM=0.2", "--bank-conflicts", "1", "--weight-prefetch"),
    ),
    "ops": (
        *STUDY_FIGURES,
        *("--op-efficiency", "conv=0.5,pointwise=0.5,vector=0.25", "--weight-prefetch"),
        *("--bandwidth-fraction", "SRAM=0.1,DRAM=0.7", "--bank-conflicts", "1"),
    ),
    "mislead": (*STUDY_FIGURES, "--bandwidth-fraction", "SRAM=0.083", "--bank-conflicts", "1"),
}


def op_class(node: dict) -> str:
    """The ``--op-efficiency`` class of one workload node: ``vector`` (no MACs: pooling,
    norms, softmax, layout), ``attention`` (a matmul of two activations), ``depthwise``
    (a grouped conv), ``small-channel`` (a conv with under ``SMALL_CHANNELS`` input
    channels), ``pointwise`` (a 1x1 conv), ``conv`` (any other conv), ``linear`` (every
    other node with MACs: a weight matrix times an activation)."""
    if node["macs"] == 0:
        return "vector"
    op, attrs = node["op_type"], node.get("attrs") or {}
    if op == "matmul" and node["weight_bytes"] == 0:
        return "attention"
    if op != "conv":
        return "linear"
    if attrs.get("groups", 1) > 1:
        return "depthwise"
    if node["input_shapes"] and node["input_shapes"][0][1] < SMALL_CHANNELS:
        return "small-channel"
    return "pointwise" if tuple(attrs.get("kernel", (1, 1))) == (1, 1) else "conv"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--chip",
        choices=sorted(CHIPS),
        default=None,
        help="a named chip's flags first (CHIPS); the flags given after them still apply",
    )
    p.add_argument("--sram-kib", type=float, default=4096.0, help="SRAM capacity, KiB")
    p.add_argument("--llc-kib", type=float, default=24576.0, help="LLC capacity, KiB")
    p.add_argument("--dram-gbps", type=float, default=67.2, help="DRAM bandwidth, GB/s")
    p.add_argument("--llc-gbps", type=float, default=680.0, help="LLC bandwidth, GB/s")
    p.add_argument("--sram-gbps", type=float, default=6800.0, help="SRAM bandwidth, GB/s")
    p.add_argument("--tmacs", type=float, default=25.0, help="compute, tera-MACs per second")
    p.add_argument(
        "--shared-bandwidth",
        action="store_true",
        help="a node's transfers run concurrently and share each level's bandwidth",
    )
    p.add_argument(
        "--dram-access-us",
        type=float,
        default=0.0,
        help="fixed microseconds every DRAM transfer pays beside its bytes (>= 0)",
    )
    p.add_argument(
        "--llc-contention",
        type=float,
        default=0.0,
        help="share of the LLC bandwidth lost when the LLC is full, in [0, 1)",
    )
    p.add_argument(
        "--op-efficiency",
        type=figures(OP_CLASSES, lambda f: 0 < f <= 1, "a share of peak in (0, 1]"),
        default={},
        help=f"CLASS=F,...: operator classes {OP_CLASSES} run at F x the MAC rate",
    )
    p.add_argument(
        "--weight-prefetch",
        action="store_true",
        help="a node's weight streams in during the previous node's compute-bound time",
    )
    p.add_argument(
        "--bank-conflicts",
        type=float,
        default=0.0,
        help="SRAM slowdown per further tensor a node moves in SRAM at once (>= 0)",
    )
    p.add_argument(
        "--bandwidth-fraction",
        type=figures(LEVELS, lambda f: 0 < f <= 1, "a share of the datasheet figure in (0, 1]"),
        default={},
        help="LEVEL=F,...: the bandwidth a level reaches, as a share of its figure",
    )
    p.add_argument(
        "--half-bandwidth-kib",
        type=figures(LEVELS, lambda k: 0 <= k < math.inf, "a size in KiB >= 0"),
        default={},
        help="LEVEL=K,...: a transfer of K KiB reaches half the level's bandwidth",
    )
    p.add_argument(
        "--noise-cv",
        type=float,
        default=0.0,
        help="coefficient of variation of lognormal noise on every latency reading (>= 0)",
    )
    p.add_argument("--noise-seed", type=int, default=0, help="seed of the noise draws")
    p.add_argument(
        "--noise-state",
        default=None,
        help="file counting the readings so far (reproducible noise; absent: a new run)",
    )
    p.add_argument(
        "--no-baseline", action="store_true", help="answer the baseline request with an error"
    )
    p.add_argument("--no-check", action="store_true", help="answer the check request with an error")
    args = p.parse_args(argv)
    if args.chip is not None:
        args = p.parse_args([*CHIPS[args.chip], *argv])
    if args.noise_cv < 0:
        p.error(f"--noise-cv {args.noise_cv} is invalid: expected >= 0")
    if args.dram_access_us < 0:
        p.error(f"--dram-access-us {args.dram_access_us} is invalid: expected >= 0")
    if not 0 <= args.llc_contention < 1:
        p.error(f"--llc-contention {args.llc_contention} is invalid: expected a value in [0, 1)")
    if args.bank_conflicts < 0:
        p.error(f"--bank-conflicts {args.bank_conflicts} is invalid: expected >= 0")
    return args


def figures(names: tuple[str, ...], check, allowed: str):
    """A parser of ``NAME=F,NAME=F`` into ``{name: F}``: names from ``names``, each ``F``
    a number ``check`` accepts; anything else is refused naming the entry and ``allowed``."""

    def parse(text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for entry in filter(None, text.split(",")):
            name, _, value = entry.partition("=")
            if name not in names:
                raise argparse.ArgumentTypeError(f"{entry!r}: {name!r} is not one of {names}")
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not check(number):
                raise argparse.ArgumentTypeError(f"{entry!r}: expected {allowed}")
            out[name] = number
        return out

    return parse


class Chip:
    """The toy chip bound to one workload (a dict in the ``egrl-workload/1`` format)."""

    def __init__(self, workload: dict, heads: dict[str, list[str]], args: argparse.Namespace):
        if list(heads) != ["weight", "activation"]:
            raise ValueError(f"this chip has heads ['weight', 'activation'], not {list(heads)}")
        for head, choices in heads.items():
            unknown = set(choices) - set(LEVELS)
            if unknown or choices[0] != "DRAM":
                raise ValueError(f"head {head!r}: choices {choices} must be {LEVELS}, DRAM first")
        self.heads = heads
        capacity = {"DRAM": math.inf, "LLC": args.llc_kib * 1024, "SRAM": args.sram_kib * 1024}
        bandwidth = {"DRAM": args.dram_gbps, "LLC": args.llc_gbps, "SRAM": args.sram_gbps}
        # per head: capacity and bandwidth of each choice, in choice order
        self.capacity = {h: np.array([capacity[c] for c in cs]) for h, cs in heads.items()}
        self.bandwidth = {h: np.array([bandwidth[c] * 1e9 for c in cs]) for h, cs in heads.items()}
        self.level = {h: [LEVELS.index(c) for c in cs] for h, cs in heads.items()}
        self.dram_bw = bandwidth["DRAM"] * 1e9
        self.level_bw = np.array([bandwidth[level] * 1e9 for level in LEVELS])
        self.shared_bandwidth = bool(getattr(args, "shared_bandwidth", False))
        self.dram_access_s = float(getattr(args, "dram_access_us", 0.0)) * 1e-6
        self.llc_contention = float(getattr(args, "llc_contention", 0.0))
        self.llc_capacity = capacity["LLC"]
        self.mac_rate = args.tmacs * 1e12
        self.op_efficiency = dict(getattr(args, "op_efficiency", None) or {})
        self.weight_prefetch = bool(getattr(args, "weight_prefetch", False))
        self.bank_conflicts = float(getattr(args, "bank_conflicts", 0.0))
        fraction = getattr(args, "bandwidth_fraction", None) or {}
        half = getattr(args, "half_bandwidth_kib", None) or {}
        self.bandwidth_fraction = np.array([fraction.get(level, 1.0) for level in LEVELS])
        self.half_bytes = np.array([half.get(level, 0.0) * 1024 for level in LEVELS])
        self.level_effects = bool(
            self.shared_bandwidth
            or self.dram_access_s
            or self.llc_contention
            or self.weight_prefetch
            or self.bank_conflicts
            or (self.bandwidth_fraction != 1).any()
            or self.half_bytes.any()
        )

        nodes = workload["nodes"]
        dtype = workload.get("dtype_bytes", 1)
        index = {n["name"]: i for i, n in enumerate(nodes)}
        self.n = len(nodes)
        self.weight = np.array([n["weight_bytes"] for n in nodes], dtype=np.float64)
        self.output = np.array([math.prod(n["output_shape"]) * dtype for n in nodes], float)
        self.macs = np.array([n["macs"] for n in nodes], dtype=np.float64)
        edges = [
            (index[src], i, math.prod(shape) * dtype)
            for i, n in enumerate(nodes)
            for src, shape in zip(n["inputs"], n["input_shapes"])
            if src in index
        ]
        self.src = np.array([e[0] for e in edges], dtype=np.int64)
        self.dst = np.array([e[1] for e in edges], dtype=np.int64)
        self.edge_bytes = np.array([e[2] for e in edges], dtype=np.float64)
        self.host_bytes = np.zeros(self.n)
        for i, n in enumerate(nodes):
            for src, shape in zip(n["inputs"], n["input_shapes"]):
                if src not in index:
                    self.host_bytes[i] += math.prod(shape) * dtype
        self.last_use = np.arange(self.n)
        np.maximum.at(self.last_use, self.src, self.dst)
        self.compute = self.compute_times(nodes)

    def compute_times(self, nodes: list[dict]) -> np.ndarray:
        """Seconds ``[N]`` of each node's compute: its MACs at the MAC rate, times
        ``--op-efficiency``'s share for its class; where ``vector`` is named, every node's
        vector operations too, at that share of the MAC rate."""
        if not self.op_efficiency:
            return self.macs / self.mac_rate
        share = np.array([self.op_efficiency.get(op_class(n), 1.0) for n in nodes])
        compute = self.macs / (self.mac_rate * share)
        if "vector" in self.op_efficiency:
            vector = np.array([n.get("vector_ops", 0) for n in nodes], dtype=np.float64)
            compute = compute + vector / (self.mac_rate * self.op_efficiency["vector"])
        return compute

    def compile(self, mapping: np.ndarray) -> tuple[np.ndarray, float]:
        """Rectify one map ``[N, 2]``: the placed map and the bytes demoted."""
        placed = mapping.copy()
        used = np.zeros((len(LEVELS), self.n))  # bytes held per physical level and step
        demoted = 0.0
        for i in range(self.n):
            tensors = (
                (0, "weight", self.weight[i], 0, self.n - 1),
                (1, "activation", self.output[i], i, self.last_use[i]),
            )
            for col, head, size, first, last in tensors:
                if size == 0:
                    continue
                choice = int(placed[i, col])
                while True:
                    level = self.level[head][choice]
                    peak = used[level, first : last + 1].max()
                    if peak + size <= self.capacity[head][choice]:
                        break
                    choice -= 1
                if choice != placed[i, col]:
                    demoted += size
                    placed[i, col] = choice
                used[level, first : last + 1] += size
        return placed, demoted

    def latency(self, mapping: np.ndarray) -> float:
        """Seconds to run one (valid) map ``[N, 2]``."""
        if self.level_effects:
            return float(np.maximum(self.compute, self.memory_times(mapping)).sum())
        w_bw = self.bandwidth["weight"][mapping[:, 0]]
        a_bw = self.bandwidth["activation"][mapping[:, 1]]
        reads = np.bincount(self.dst, self.edge_bytes / a_bw[self.src], minlength=self.n)
        memory = self.weight / w_bw + self.output / a_bw + reads + self.host_bytes / self.dram_bw
        return float(np.maximum(self.compute, memory).sum())

    def memory_times(self, mapping: np.ndarray) -> np.ndarray:
        """Seconds ``[N]`` of each node's transfers: the sum of its level times, or the
        busiest level's with ``--shared-bandwidth``; with ``--weight-prefetch`` less the
        part of its weight read hidden under the previous node's compute."""
        times, weight_s = self.level_times(mapping)
        combine = np.max if self.shared_bandwidth else np.sum
        memory = combine(times, axis=1)
        if not self.weight_prefetch:
            return memory
        slack = np.maximum(self.compute - memory, 0.0)  # memory idle while computing
        hidden = np.minimum(weight_s, np.concatenate(([0.0], slack[:-1])))
        w_level = np.asarray(self.level["weight"])[mapping[:, 0]]
        times[np.arange(self.n), w_level] = np.maximum(
            times[np.arange(self.n), w_level] - hidden, 0.0
        )
        return combine(times, axis=1)

    def streams(self, w_level: np.ndarray, a_level: np.ndarray) -> np.ndarray:
        """Transfers ``[N, levels]`` each node makes on each level: its weight, its output,
        one read per producer, and its host inputs (DRAM)."""
        nodes = np.arange(self.n)
        count = np.zeros((self.n, len(LEVELS)))
        np.add.at(count, (nodes, w_level), self.weight > 0)
        np.add.at(count, (nodes, a_level), self.output > 0)
        np.add.at(count, (self.dst, a_level[self.src]), 1.0)
        count[:, LEVELS.index("DRAM")] += self.host_bytes > 0
        return count

    def level_times(self, mapping: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seconds ``[N, levels]`` each node's transfers take on each memory level, and
        seconds ``[N]`` of its weight read alone.

        ``bytes [N, levels]``: the node's weight and output at their levels, its inputs at
        their producers' activation levels, host inputs in DRAM, plus
        ``--half-bandwidth-kib`` per transfer, over the level's bandwidth (its
        ``--bandwidth-fraction``; the LLC's contended at the node's step,
        ``--llc-contention``; SRAM's shared by the node's tensors there,
        ``--bank-conflicts``), plus ``--dram-access-us`` per DRAM transfer.
        """
        w_level = np.asarray(self.level["weight"])[mapping[:, 0]]
        a_level = np.asarray(self.level["activation"])[mapping[:, 1]]
        nodes = np.arange(self.n)
        moved = np.zeros((self.n, len(LEVELS)))
        np.add.at(moved, (nodes, w_level), self.weight)
        np.add.at(moved, (nodes, a_level), self.output)
        np.add.at(moved, (self.dst, a_level[self.src]), self.edge_bytes)
        dram = LEVELS.index("DRAM")
        moved[:, dram] += self.host_bytes
        streams = self.streams(w_level, a_level)
        if self.half_bytes.any():
            moved += streams * self.half_bytes
        level_bw = self.level_bw
        if (self.bandwidth_fraction != 1).any():
            level_bw = level_bw * self.bandwidth_fraction
        bandwidth = np.broadcast_to(level_bw, moved.shape)
        if self.llc_contention or self.bank_conflicts:
            bandwidth = bandwidth.copy()
        if self.llc_contention:
            llc = LEVELS.index("LLC")
            bandwidth[:, llc] *= 1.0 - self.llc_contention * self.llc_held(w_level, a_level)
        if self.bank_conflicts:
            sram = LEVELS.index("SRAM")
            bandwidth[:, sram] /= 1.0 + self.bank_conflicts * np.maximum(streams[:, sram] - 1, 0)
        times = moved / bandwidth
        if self.dram_access_s:
            times[:, dram] += self.dram_access_s * streams[:, dram]
        has_weight = self.weight > 0
        weight_s = (self.weight + has_weight * self.half_bytes[w_level]) / bandwidth[
            nodes, w_level
        ] + (self.dram_access_s * (has_weight & (w_level == dram)))
        return times, weight_s

    def llc_held(self, w_level: np.ndarray, a_level: np.ndarray) -> np.ndarray:
        """The share ``[N]`` of the LLC held at each step: every weight placed there, and
        every activation placed there from its producer's step to its last consumer's."""
        llc = LEVELS.index("LLC")
        held = np.zeros(self.n + 1)
        live = a_level == llc
        np.add.at(held, np.flatnonzero(live), self.output[live])
        np.add.at(held, self.last_use[live] + 1, -self.output[live])
        weights = self.weight[w_level == llc].sum()
        return np.minimum((np.cumsum(held)[: self.n] + weights) / self.llc_capacity, 1.0)

    def check(self, maps: np.ndarray) -> dict:
        """The ``check`` answer for maps ``[B, N, 2]``: the compiler alone, nothing run."""
        answer: dict[str, list] = {"valid": [], "rectified": [], "reassigned_bytes": []}
        for mapping in maps:
            placed, demoted = self.compile(mapping)
            answer["valid"].append(bool(demoted == 0))
            answer["rectified"].append(placed.tolist())
            answer["reassigned_bytes"].append(demoted)
        return answer

    def evaluate(self, maps: np.ndarray) -> dict:
        """The ``evaluate`` answer for maps ``[B, N, 2]``: the ``check`` answer, and the
        latency of each valid map (invalid maps are not run: ``null``)."""
        answer = self.check(maps)
        answer["latency_s"] = [
            self.latency(np.asarray(placed)) if valid else None
            for placed, valid in zip(answer["rectified"], answer["valid"])
        ]
        return answer

    def baseline(self) -> dict:
        """The compiler's own map: everything asked of the fastest level, then rectified."""
        fastest = np.array([len(c) - 1 for c in self.heads.values()])
        placed, _ = self.compile(np.tile(fastest, (self.n, 1)))
        return {"mapping": placed.tolist()}


def load_workload(descriptor: dict) -> dict:
    if "data" in descriptor:
        return descriptor["data"]
    with open(descriptor["path"], encoding="utf-8") as f:
        return json.load(f)


def noise(count: int, args: argparse.Namespace) -> np.ndarray:
    """Lognormal factors ``[count]`` of mean 1 and coefficient of variation
    ``--noise-cv``: drawn from ``--noise-seed`` and the readings counted in
    ``--noise-state`` (which they advance), or from the OS without it."""
    sigma = math.sqrt(math.log1p(args.noise_cv**2))
    if args.noise_state is None:
        rng = np.random.default_rng()
        return rng.lognormal(-(sigma**2) / 2, sigma, count)
    import fcntl

    with open(args.noise_state, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        first = int(f.read().strip() or 0)
        f.seek(0)
        f.truncate()
        f.write(str(first + count))
    draws = [
        np.random.default_rng([args.noise_seed, first + i]).lognormal(-(sigma**2) / 2, sigma)
        for i in range(count)
    ]
    return np.array(draws)


def answer(request: dict, args: argparse.Namespace) -> dict:
    if request.get("protocol") != "egrl-external/1":
        raise ValueError(f"unsupported protocol {request.get('protocol')!r}")
    chip = Chip(load_workload(request["workload"]), request["heads"], args)
    if request["request"] == "evaluate":
        reply = chip.evaluate(np.asarray(request["maps"], dtype=np.int64))
        if args.noise_cv:
            factors = noise(len(reply["latency_s"]), args)
            reply["latency_s"] = [
                None if t is None else t * float(f) for t, f in zip(reply["latency_s"], factors)
            ]
        return reply
    if request["request"] == "baseline" and not args.no_baseline:
        return chip.baseline()
    if request["request"] == "check" and not args.no_check:
        return chip.check(np.asarray(request["maps"], dtype=np.int64))
    raise ValueError(f"unsupported request {request['request']!r}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        reply = answer(json.load(sys.stdin), args)
    except (ValueError, KeyError, OSError) as exc:
        json.dump({"error": str(exc)}, sys.stdout)
        return 2
    json.dump(reply, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
