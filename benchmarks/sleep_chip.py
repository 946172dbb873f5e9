"""A chip that takes a fixed time per map: an ``egrl-external/1`` command for throughput
and fault tests of the runtimes (docs/ray.md).

Every map is valid; its latency is ``1 ms / (1 + mean choice)`` (so the all-zeros
baseline has speedup 1 and higher choices are faster). The call sleeps ``--seconds``
per map before it answers, so it is bound by waiting, not by the CPU. Faults on demand:

* ``--fail-every K --counter FILE``: every K-th ``evaluate`` call (counted in FILE,
  shared by every process that names it) exits with status 1.
* ``--hang-seconds S``: every ``evaluate`` call sleeps S seconds first (a hung chip).

Standard library only, so it starts fast.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="sleep per map")
    parser.add_argument("--fail-every", type=int, default=0, help="fail every K-th call")
    parser.add_argument("--counter", default=None, help="call counter file for --fail-every")
    parser.add_argument("--hang-seconds", type=float, default=0.0, help="hang every call")
    return parser.parse_args(argv)


def next_call(path: str) -> int:
    """Increment and return the call number stored in ``path`` (1 for the first call)."""
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read().strip()
        count = int(text or 0) + 1
        f.seek(0)
        f.truncate()
        f.write(str(count))
        return count


def answer(request: dict, args: argparse.Namespace) -> dict:
    if request["request"] == "baseline":
        heads = len(request["heads"])
        return {"mapping": [[0] * heads for _ in range(request["workload"]["num_nodes"])]}
    if args.fail_every and args.counter:
        call = next_call(args.counter)
        if call % args.fail_every == 0:
            sys.stderr.write(f"sleep_chip: call {call} fails on purpose\n")
            sys.exit(1)
    if args.hang_seconds:
        time.sleep(args.hang_seconds)
    maps = request["maps"]
    time.sleep(args.seconds * len(maps))
    latency = []
    for mapping in maps:
        choices = [c for row in mapping for c in row]
        latency.append(1e-3 / (1.0 + sum(choices) / max(1, len(choices))))
    return {"latency_s": latency, "valid": [True] * len(maps)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print(json.dumps(answer(json.load(sys.stdin), args)))


if __name__ == "__main__":
    main()
