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

The three effects combine; a node's time per memory level is the bytes moved there over
the level's (contended) bandwidth plus the DRAM access times, and the node's memory time
is the sum over levels, or the busiest level with ``--shared-bandwidth``.

Usage::

    python examples/external_chip.py --sram-kib 4096 --llc-kib 24576 < request.json
    python examples/external_chip.py --shared-bandwidth --sram-kib 2048 < request.json
    python examples/external_chip.py --dram-access-us 2 --llc-contention 0.5 < request.json
    python examples/external_chip.py --noise-cv 0.05 --noise-state run/noise.txt < request.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

LEVELS = ("DRAM", "LLC", "SRAM")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    if args.noise_cv < 0:
        p.error(f"--noise-cv {args.noise_cv} is invalid: expected >= 0")
    if args.dram_access_us < 0:
        p.error(f"--dram-access-us {args.dram_access_us} is invalid: expected >= 0")
    if not 0 <= args.llc_contention < 1:
        p.error(f"--llc-contention {args.llc_contention} is invalid: expected a value in [0, 1)")
    return args


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
        if self.shared_bandwidth or self.dram_access_s or self.llc_contention:
            times = self.level_times(mapping)
            memory = times.max(axis=1) if self.shared_bandwidth else times.sum(axis=1)
            return float(np.maximum(self.macs / self.mac_rate, memory).sum())
        w_bw = self.bandwidth["weight"][mapping[:, 0]]
        a_bw = self.bandwidth["activation"][mapping[:, 1]]
        reads = np.bincount(self.dst, self.edge_bytes / a_bw[self.src], minlength=self.n)
        memory = self.weight / w_bw + self.output / a_bw + reads + self.host_bytes / self.dram_bw
        return float(np.maximum(self.macs / self.mac_rate, memory).sum())

    def level_times(self, mapping: np.ndarray) -> np.ndarray:
        """Seconds ``[N, levels]`` each node's transfers take on each memory level.

        ``bytes [N, levels]``: the node's weight and output at their levels, its inputs at
        their producers' activation levels, host inputs in DRAM, over the level's bandwidth
        (the LLC's contended at the node's step, ``--llc-contention``), plus
        ``--dram-access-us`` per DRAM transfer.
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
        bandwidth = np.broadcast_to(self.level_bw, moved.shape)
        if self.llc_contention:
            llc = LEVELS.index("LLC")
            bandwidth = bandwidth.copy()
            bandwidth[:, llc] *= 1.0 - self.llc_contention * self.llc_held(w_level, a_level)
        times = moved / bandwidth
        if self.dram_access_s:
            transfers = (
                ((w_level == dram) & (self.weight > 0)).astype(float)
                + ((a_level == dram) & (self.output > 0))
                + np.bincount(self.dst, a_level[self.src] == dram, minlength=self.n)
                + (self.host_bytes > 0)
            )
            times[:, dram] += self.dram_access_s * transfers
        return times

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
