"""How well the targets' map descriptions (``Target.describe``) rank maps by measured reward.

For each problem (default: NNP-I ``resnet101`` with EGRL's reward, the multi-chip
``mobilenet-d50-w50-k5-e4`` with ``reward=repaired``, as in the ablation study) two sets
of maps are measured: ``--maps`` uniformly random maps, and the distinct maps a short
run of ``--agent`` (default the EGRL paper's EA) proposed within a budget of ``--maps``
(as proposed, before repair). On each set:

* the Spearman correlation of every description feature with the measured reward;
* models fitted on one half of the maps and scored on the other (Spearman of prediction
  against reward, and the share of the held-out half's true top quarter that the model
  put in its own top quarter): ridge least squares on the standardised description, a
  random forest on the one-hot map, on the description, and on both. Halves are a seeded
  random split, and for the run's maps also chronological (fit on the first half of the
  proposals, rank the later half: what a screen does);
* the wall time of ``describe`` and of ``measure`` on the same maps.

Writes ``benchmarks/results/describe_usefulness.json`` and prints markdown tables::

    python benchmarks/describe_usefulness.py
    python benchmarks/describe_usefulness.py --maps 200 --problems nnpi/resnet18
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from egrl import make_env  # noqa: E402
from egrl.env import Env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: problem -> (hardware model, workload, reward, parameters), as the ablation study runs
#: them; mcm describes the proposal here (``description=repaired``, the default, describes
#: the measured partition itself: docs/mcm.md)
PROBLEMS = {
    "nnpi/resnet101": ("nnpi", "resnet101", "egrl", {}),
    "mcm/mobilenet-d50-w50-k5-e4": (
        "mcm",
        "mobilenet-d50-w50-k5-e4",
        "repaired",
        {"description": "proposed"},
    ),
}

log = logging.getLogger("describe_usefulness")


def problem_env(problem: str, seed: int) -> Env:
    """The environment of ``problem`` (``hwmodel/workload`` as in :data:`PROBLEMS`)."""
    hw, workload, reward, params = PROBLEMS.get(problem) or (*problem.split("/", 1), "egrl", {})
    params = {**params, "seed": seed} if hw == "mcm" else params
    return make_env(hw, workload, reward=reward, **params)


def run_maps(env: Env, agent: str, budget: int, seed: int) -> np.ndarray:
    """int64 ``[M, N, H]``: the distinct maps a run of ``agent`` proposed, in order.

    The agent runs with its config group's defaults (``configs/agent/<agent>.yaml``);
    what it sent to the target is recorded (cache hits are not sent again).
    """
    import yaml

    from egrl.agents import make_agent, train_config

    seen: list[np.ndarray] = []
    measure = env.measure

    def recording(maps, probs=None):
        seen.append(np.array(maps, dtype=np.int64, copy=True))
        return measure(maps, probs)

    env.measure = recording
    agent_cfg = yaml.safe_load((ROOT / "configs" / "agent" / f"{agent}.yaml").read_text())
    cfg = train_config({"seed": seed, "budget": budget, "progress": False, "agent": agent_cfg})
    try:
        with tempfile.TemporaryDirectory(prefix="describe-usefulness-") as run_dir:
            make_agent(env, cfg, run_dir).run()
    finally:
        env.measure = measure
    maps = np.concatenate(seen)[:budget]
    _, first = np.unique(maps.reshape(len(maps), -1), axis=0, return_index=True)
    return maps[np.sort(first)]


def one_hot(env: Env, maps: np.ndarray) -> np.ndarray:
    """float64 ``[B, N * H * C]``: the one-hot choices of ``maps``."""
    return (maps[..., None] == np.arange(env.max_choices)).reshape(len(maps), -1).astype(float)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho, NaN where either side is constant."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def top_quarter(pred: np.ndarray, truth: np.ndarray) -> float:
    """Share of the true top quarter (by ``truth``) that is in the top quarter of ``pred``."""
    k = max(len(truth) // 4, 1)
    best = set(np.argsort(-truth, kind="stable")[:k].tolist())
    picked = set(np.argsort(-pred, kind="stable")[:k].tolist())
    return len(best & picked) / k


def ridge(train_x, train_y, test_x, alpha: float = 1.0) -> np.ndarray:
    """Ridge least squares on standardised columns (constant columns dropped)."""
    mean, std = train_x.mean(axis=0), train_x.std(axis=0)
    keep = std > 0
    z = (train_x[:, keep] - mean[keep]) / std[keep]
    zt = (test_x[:, keep] - mean[keep]) / std[keep]
    a = np.column_stack([z, np.ones(len(z))])
    reg = alpha * np.eye(a.shape[1])
    reg[-1, -1] = 0.0
    coef = np.linalg.solve(a.T @ a + reg, a.T @ train_y)
    return np.column_stack([zt, np.ones(len(zt))]) @ coef


def forest(train_x, train_y, test_x, seed: int) -> np.ndarray:
    from sklearn.ensemble import RandomForestRegressor

    model = RandomForestRegressor(n_estimators=100, min_samples_leaf=2, random_state=seed, n_jobs=1)
    return model.fit(train_x, train_y).predict(test_x)


def fits(desc, onehot, reward, train, test, seed: int) -> dict[str, dict[str, float]]:
    """Held-out Spearman and top-quarter share of each model fitted on ``train`` rows."""
    both = np.concatenate([onehot, desc], axis=1)
    preds = {
        "ridge(description)": ridge(desc[train], reward[train], desc[test]),
        "forest(one-hot)": forest(onehot[train], reward[train], onehot[test], seed),
        "forest(description)": forest(desc[train], reward[train], desc[test], seed),
        "forest(one-hot + description)": forest(both[train], reward[train], both[test], seed),
    }
    return {
        name: {
            "spearman": spearman(p, reward[test]),
            "top_quarter": top_quarter(p, reward[test]),
        }
        for name, p in preds.items()
    }


def study(env: Env, maps: np.ndarray, seed: int, chronological: bool) -> dict:
    """Feature correlations, held-out fits and timings on ``maps``."""
    start = time.perf_counter()
    desc = env.target.describe(maps)
    describe_s = time.perf_counter() - start
    start = time.perf_counter()
    ev = env.evaluate(maps)
    measure_s = time.perf_counter() - start
    reward = ev.reward
    names = env.target.description_names
    features = {n: spearman(desc[:, i], reward) for i, n in enumerate(names)}
    kept = ev.valid
    features_valid = (
        {n: spearman(desc[kept, i], reward[kept]) for i, n in enumerate(names)}
        if kept.sum() >= 10
        else {}
    )
    onehot = one_hot(env, maps)
    order = np.random.default_rng(seed).permutation(len(maps))
    half = len(maps) // 2
    out = {
        "maps": len(maps),
        "valid_share": float(ev.valid.mean()),
        "reward_mean": float(reward.mean()),
        "reward_std": float(reward.std()),
        "describe_s": describe_s,
        "measure_s": measure_s,
        "features": features,
        "features_valid": features_valid,
        "random_halves": fits(desc, onehot, reward, order[:half], order[half:], seed),
    }
    if chronological:
        idx = np.arange(len(maps))
        out["chronological"] = fits(desc, onehot, reward, idx[:half], idx[half:], seed)
    return out


def top_features(features: dict[str, float], k: int) -> list[tuple[str, float]]:
    """The ``k`` features of largest absolute correlation (NaN last)."""
    finite = [(n, r) for n, r in features.items() if np.isfinite(r)]
    return sorted(finite, key=lambda nr: -abs(nr[1]))[:k]


def report(results: dict, k: int) -> str:
    """Markdown tables of :func:`study` results, per problem and map set."""
    lines = []
    for problem, sets in results.items():
        for which, r in sets.items():
            lines += [
                f"### {problem}, {which} maps ({r['maps']}, {100 * r['valid_share']:.0f}% valid)",
                "",
                f"describe {r['describe_s'] * 1e3:.1f} ms, measure {r['measure_s'] * 1e3:.1f} ms "
                f"for these {r['maps']} maps",
                "",
                "| feature | Spearman with reward |",
                "|---|---:|",
                *(f"| {n} | {rho:+.3f} |" for n, rho in top_features(r["features"], k)),
                "",
                *(
                    [
                        f"Among the {round(r['valid_share'] * r['maps'])} maps the compiler kept:",
                        "",
                        "| feature | Spearman with reward (kept maps) |",
                        "|---|---:|",
                        *(
                            f"| {n} | {rho:+.3f} |"
                            for n, rho in top_features(r["features_valid"], k)
                        ),
                        "",
                    ]
                    if r["features_valid"]
                    else []
                ),
                "| model (fit on half, ranked the other half) | split | Spearman | top quarter |",
                "|---|---|---:|---:|",
            ]
            for split in ("random_halves", "chronological"):
                for model, s in r.get(split, {}).items():
                    lines.append(
                        f"| {model} | {split} | {s['spearman']:+.3f} | {s['top_quarter']:.2f} |"
                    )
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("--maps", type=int, default=400, help="maps per set (and run budget)")
    parser.add_argument("--agent", default="ea", help="agent of the run whose maps are scored")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=12, help="features listed per table")
    parser.add_argument("--json", type=Path, default=RESULTS / "describe_usefulness.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    results: dict = {}
    for problem in args.problems:
        env = problem_env(problem, args.seed)
        rng = np.random.default_rng(args.seed)
        sets = {"random": env.random_mappings(args.maps, rng)}
        if args.agent:
            start = time.perf_counter()
            sets[args.agent] = run_maps(
                problem_env(problem, args.seed), args.agent, args.maps, args.seed
            )
            log.info(
                "%s: %s run, %d distinct maps in %.1f s",
                problem,
                args.agent,
                len(sets[args.agent]),
                time.perf_counter() - start,
            )
        results[problem] = {
            which: study(env, maps, args.seed, chronological=which != "random")
            for which, maps in sets.items()
        }
        log.info("%s done", problem)
    print(report(results, args.top))
    print(f"\n{platform.machine()}, {os.cpu_count()} cores, seed {args.seed}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    meta = {"maps": args.maps, "agent": args.agent, "seed": args.seed}
    args.json.write_text(json.dumps({"config": meta, "results": results}, indent=1), "utf-8")


if __name__ == "__main__":
    main()
