"""The solved prior's map of a problem, read once on its chip: the baseline every result
on a chip is read against.

A compiler engineer with the chip's datasheet would ship this solver: the datasheet as a
model the toolkit solves (``hwmodel.params.prior``: NNP-I parameters), its optimum on the
model's costs (``Env.prior_solution``, hinted with the compiler's map, at most
``prior_time_s`` seconds), checked by the chip's compiler (its repair where it refuses
the map, as ``agent.start=prior`` pays it: :func:`egrl.deploy.checked_prior`) and paid
once on the chip. A plan gives its chip's figures as ``prior`` (a chip variant of
``problem_chips`` its own under ``problem_priors``); a built-in target (nnpi, mcm,
banked) is its own prior, read where the plan sets ``prior_builtin``.

The reading is a step of a plan's first stage (:func:`studies.cells.prior_steps`: ``python -m
studies.prior_map OUT/<problem>/prior.json LIMIT OVERRIDES...``, done once the
file exists); the analysis reads the file (:func:`read_prior`) and never solves.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from studies.runner import StudyError

log = logging.getLogger(__name__)

#: a problem's reading, in ``OUT/<problem>/``
PRIOR_FILE = "prior.json"
#: the solve's time limit where the plan names none (the target of the prior's solve)
TIME_S = 60.0


# ------------------------------------------------------------------ plan
def is_external(cfg: DictConfig, problem: str) -> bool:
    """The problem runs on a chip behind the external protocol."""
    return "hwmodel=external" in cfg.problem_overrides[problem]


def figures_of(cfg: DictConfig, problem: str) -> dict | None:
    """The datasheet figures of an ``external`` problem's chip (``problem_priors.<problem>``,
    else the plan's ``prior``); None for a built-in target or a plan without them."""
    if not is_external(cfg, problem):
        return None
    own = (cfg.get("problem_priors") or {}).get(problem)
    figures = own if own is not None else cfg.get("prior")
    return None if figures is None else dict(OmegaConf.to_container(figures, resolve=True))


def reads_prior(cfg: DictConfig, problem: str) -> bool:
    """The problem's prior is read: an external chip with figures, or a built-in target
    where the plan sets ``prior_builtin``."""
    if is_external(cfg, problem):
        return figures_of(cfg, problem) is not None
    return bool(cfg.get("prior_builtin", False))


def prior_override(figures: dict) -> str:
    """``++hwmodel.params.prior={name:nnpi,sram_mib:2,...}``: the figures as one Hydra
    override (added to the chip's parameters, or replacing the ones it has)."""
    if not figures:
        raise StudyError("a prior's figures are empty: expected {name: nnpi, ...}")
    return "++hwmodel.params.prior={" + ",".join(f"{k}:{v}" for k, v in figures.items()) + "}"


def time_limit_of(cfg: DictConfig) -> float:
    """The solve's time limit, seconds (``prior_time_s``; > 0)."""
    limit = float(cfg.get("prior_time_s", TIME_S))
    if not limit > 0:
        raise StudyError(f"{cfg.study}: prior_time_s={limit} is invalid: expected > 0")
    return limit


def check_priors(cfg: DictConfig) -> None:
    """The solve's time limit is valid and every problem of the plan has a prior to read."""
    time_limit_of(cfg)
    for problem in cfg.problems:
        if not reads_prior(cfg, problem):
            raise StudyError(
                f"{cfg.study}: problem {problem!r} has no prior: give the chip's figures as "
                "prior (or problem_priors), or prior_builtin=true for a built-in target"
            )


def figures_text(cfg: DictConfig) -> str:
    """The plan's datasheet figures, as the runs get them, for a section's text."""
    figures = cfg.get("prior")
    if figures is None:
        return "the target's own cost model"
    return "`{" + ", ".join(f"{k}: {v}" for k, v in figures.items()) + "}`"


# ------------------------------------------------------------------ the reading
@dataclass(frozen=True)
class PriorReading:
    """A problem's prior solved and its map read once.

    Attributes:
        speedup: the map's speedup over the compiler's, one board run (0: the chip
            answered no latency).
        valid: the compiler accepted the solved map as it is (else its repair was read).
        proven: the map is optimal on the prior's costs.
        status: the solve's status (``optimal``, ``feasible``, ``fallback``).
        solve_s: the solve's wall seconds.
        fell_back: no map in the time limit: the compiler's map was read.
        time_limit_s: the solve's time limit.
    """

    speedup: float
    valid: bool
    proven: bool
    status: str
    solve_s: float
    fell_back: bool
    time_limit_s: float

    @property
    def solve_text(self) -> str:
        """``solved in 5.1 s, optimal`` (or the status, or the fallback)."""
        if self.fell_back:
            return f"no map in {self.time_limit_s:.0f} s: the compiler's"
        repaired = "" if self.valid else ", repaired by the compiler"
        return f"solved in {self.solve_s:.1f} s, {self.status}{repaired}"


def read_prior(out: Path, problem: str) -> PriorReading | None:
    """The problem's reading (``OUT/<problem>/prior.json``), None where it has none."""
    path = Path(out) / problem / PRIOR_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return PriorReading(**{k: data[k] for k in PriorReading.__dataclass_fields__})


def measure(overrides: Sequence[str], time_limit_s: float) -> dict:
    """Solve the prior of the egrl-train target ``overrides`` name and read its map once:
    the :class:`PriorReading`'s fields, the compiler's latency, the map's and the map
    itself (``{unit: {head: choice}}``)."""
    from hydra import compose, initialize_config_dir  # start-up time: the command alone

    import configs
    from egrl.cli.overrides import rewrite_workload_paths
    from egrl.deploy import checked_prior
    from egrl.env import env_from_config

    config_dir = str(Path(configs.__file__).resolve().parent)
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose(config_name="train", overrides=rewrite_workload_paths(overrides))
    env = env_from_config(cfg)
    solution = env.prior_solution(time_limit_s)
    mapping = checked_prior(env, time_limit_s)
    answer = env.evaluate(mapping)
    reading = PriorReading(
        speedup=float(answer.speedup[0]),
        valid=bool(np.array_equal(mapping, solution.mapping)),
        proven=bool(solution.proven),
        status=str(solution.status),
        solve_s=float(solution.solve_s),
        fell_back=bool(solution.fell_back),
        time_limit_s=float(time_limit_s),
    )
    log.info(
        "%s on %s: the prior's map %.4fx over the compiler's, %s",
        cfg.workload.name,
        cfg.hwmodel.name,
        reading.speedup,
        reading.solve_text,
    )
    return asdict(reading) | {
        "compiler_latency_s": float(env.baseline_latency_s),
        "latency_s": float(answer.latency_s[0]),
        "predicted_latency_s": float(solution.latency_s),
        "mapping": env.mapping_to_dict(mapping),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m studies.prior_map PATH LIMIT OVERRIDE...``: the reading into ``PATH``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        print("usage: python -m studies.prior_map PATH LIMIT OVERRIDE...", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    path, limit, overrides = Path(args[0]), float(args[1]), args[2:]
    try:
        data = measure(overrides, limit)
    except ValueError as err:  # no prior, bad figures: one line
        print(f"python -m studies.prior_map: {err}".splitlines()[0], file=sys.stderr)
        return 2
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


# ------------------------------------------------------------------ report
def room_over(reference: float, base: float) -> str:
    """``12.34%``: how far ``reference`` is above ``base`` (none below it)."""
    if not base > 0:
        return "-"
    return f"{100 * max(reference / base - 1.0, 0.0):.2f}%"


#: the columns a table of problems gives where a prior was read (:func:`prior_cells`)
PRIOR_HEAD = ("prior's map, one board run", "room over the prior")


def any_prior(results: Sequence) -> bool:
    """Some result (with ``prior``) has its prior read: its table gives :data:`PRIOR_HEAD`."""
    return any(getattr(r, "prior", None) is not None for r in results)


def prior_cells(result) -> list[str]:
    """The :data:`PRIOR_HEAD` cells of ``result`` (with ``reference`` and ``prior``): the
    prior's map, read once, and the room the reference leaves over it; ``-`` unread."""
    p = getattr(result, "prior", None)
    if p is None:
        return ["-", "-"]
    return [f"{p.speedup:.4f}", room_over(result.reference, p.speedup)]


def prior_line(result) -> str:
    """The sentence under a problem's heading: the compiler's map and the prior's, each
    read once, and the room the reference leaves over each; ``result`` has ``reference``
    and ``prior`` (a :class:`PriorReading`)."""
    p = result.prior
    return (
        f"The compiler's map: 1.0000x; the solved prior's map, read once: {p.speedup:.4f}x "
        f"({p.solve_text}). Room over the compiler: {room_over(result.reference, 1.0)}; "
        f"over the prior: {room_over(result.reference, p.speedup)}."
    )


if __name__ == "__main__":
    sys.exit(main())
