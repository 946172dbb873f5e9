"""Zero-shot transfer of trained GNN policies to other workloads (EGRL section 5, Figure 4).

A Graph U-Net actor reads a decision graph of any size: its weights act on node features
(width ``F``) and on messages along edges, never on a fixed number of nodes. A policy
trained on one workload can therefore map another one *without further training*, as
long as the two decision graphs have the same feature width and the same decision heads.

For every policy snapshot (``policies/iter_XXXXXX.safetensors``, :mod:`policies.snapshot`,
written by the EGRL trainer and by :mod:`egrl.agents.egrl.pretrain`) and every target
environment, :func:`zero_shot` evaluates:

* the greedy map (argmax of every decision), and
* ``samples`` maps drawn from the policy's softmax with a ``torch.Generator`` seeded from
  ``seed`` (a fresh one per snapshot, policy and target, so that one evaluation does not
  depend on which others were run),

and records the greedy map's speedup over the target's native compiler, the best speedup
among the sampled maps and the fraction of all evaluated maps (greedy and sampled) the
compiler accepted unchanged. Invalid maps have speedup 0 (the env's convention).
:func:`write_outputs` writes ``transfer.csv``, ``transfer.png`` (speedup against training
iterations, one line per target, compiler at 1.0) and ``transfer.md``.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm

from egrl.agents.egrl.init_from import list_snapshots
from egrl.env import Env, make_env, reward_of
from egrl.rundir import CONFIG_FILE, POLICIES_DIR, TRANSFER_CSV, TRANSFER_DIR, RunDir
from policies.categorical import sample_maps
from policies.snapshot import POLICY_KINDS, PolicyError, Snapshot, load_actor

if TYPE_CHECKING:
    from policies import GraphUNetActor

log = logging.getLogger(__name__)

#: a run's snapshot folder (:data:`egrl.rundir.POLICIES_DIR`; ``SNAPSHOT_GLOB`` its files)
SNAPSHOT_DIR = POLICIES_DIR
WHICH = ("learner", "champion", "both")
ROLES = ("train", "holdout")
CSV_COLUMNS = (
    "iterations",
    "generation",
    "policy",
    "target",
    "role",
    "units",
    "greedy_speedup",
    "best_sampled_speedup",
    "valid_fraction",
)


# ------------------------------------------------------------------- snapshots
def check_compatible(snapshot: Snapshot, env: Env) -> None:
    """Raise :class:`PolicyError` unless ``env``'s decision graph fits the snapshot's policy.

    The feature width of the decision graph and the choices of every head must match; the
    number of nodes and edges may differ.
    """
    width = int(env.graph.x.shape[1])
    if width != snapshot.in_dim:
        raise PolicyError(
            f"workload {env.workload.name!r}: decision-graph features have width {width}, but "
            f"the policy in {snapshot.path} was trained on width {snapshot.in_dim}",
            snapshot.path,
        )
    choices = tuple(int(c) for c in env.num_choices)
    if choices != snapshot.num_choices:
        raise PolicyError(
            f"workload {env.workload.name!r}: heads {env.head_names} have choices "
            f"{list(choices)}, but the policy in {snapshot.path} was trained on "
            f"{list(snapshot.num_choices)}",
            snapshot.path,
        )


# ------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class ZeroShot:
    """One policy evaluated on one target without training.

    Attributes:
        greedy_speedup: speedup of the greedy map over the native compiler (0: invalid).
        best_sampled_speedup: best speedup among the sampled maps (nan when none).
        valid_fraction: fraction of the evaluated maps (greedy and sampled) that were valid.
        greedy_map: int64 ``[N, H]``, the greedy map.
    """

    greedy_speedup: float
    best_sampled_speedup: float
    valid_fraction: float
    greedy_map: np.ndarray


@torch.no_grad()
def zero_shot(
    actor: GraphUNetActor, env: Env, samples: int, generator: torch.Generator | None
) -> ZeroShot:
    """Evaluate ``actor`` on ``env`` as is: the greedy map and ``samples`` sampled maps.

    One forward pass gives logits ``[N, H, C]``; the greedy map is their argmax and the
    sampled maps ``[samples, N, H]`` are drawn from their softmax with ``generator``.
    All ``1 + samples`` maps go through ``env.evaluate`` in one batch.
    """
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    actor.eval()
    device = next(actor.parameters()).device
    graph = env.graph
    logits = actor(graph.x.to(device), graph.edge_index.to(device))
    maps = [sample_maps(logits, 1, None, greedy=True)]
    if samples:
        if generator is None:
            raise ValueError("sampled maps need a torch.Generator")
        maps.append(sample_maps(logits, samples, generator))
    batch = torch.cat(maps).cpu().numpy().astype(np.int64)
    ev = env.evaluate(batch)
    sampled = ev.speedup[1:]
    return ZeroShot(
        greedy_speedup=float(ev.speedup[0]),
        best_sampled_speedup=float(sampled.max()) if len(sampled) else math.nan,
        valid_fraction=float(ev.valid.mean()),
        greedy_map=batch[0],
    )


def kinds_for(which: str, snapshot: Snapshot) -> list[str]:
    """The policies of ``snapshot`` that ``which`` (``learner|champion|both``) selects.

    ``both`` takes whichever of the two the snapshot holds; a single kind must be present.
    """
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, got {which!r}")
    if which == "both":
        return [k for k in POLICY_KINDS if k in snapshot.kinds]
    if which not in snapshot.kinds:
        raise PolicyError(
            f"policy snapshot {snapshot.path} holds no {which!r} policy (it holds "
            f"{snapshot.kinds}); choose --which among them",
            snapshot.path,
        )
    return [which]


def evaluate_snapshots(
    snapshots: Sequence[Snapshot],
    targets: Mapping[str, Env],
    roles: Mapping[str, str] | None = None,
    which: str = "both",
    samples: int = 16,
    seed: int = 0,
) -> list[dict]:
    """Zero-shot rows (columns :data:`CSV_COLUMNS`) for every snapshot, policy and target.

    Args:
        snapshots: from :func:`list_snapshots` (or :func:`policies.snapshot.read_snapshot`).
        targets: environment of each target, by the name the outputs use.
        roles: ``"train"`` (a workload the policy was trained on: the reference curve)
            or ``"holdout"`` per target; missing names are ``"holdout"``.
        which: ``learner``, ``champion`` or ``both``.
        samples: sampled maps per evaluation besides the greedy one.
        seed: seed of every evaluation's sampling generator.

    Raises:
        PolicyError: a target's decision graph does not fit the policies (checked for
            every snapshot and target before anything is evaluated).
    """
    roles = dict(roles or {})
    for snap in snapshots:
        for env in targets.values():
            check_compatible(snap, env)
    jobs = [(snap, kind) for snap in snapshots for kind in kinds_for(which, snap)]
    rows: list[dict] = []
    for snap, kind in tqdm(jobs, desc="zero-shot", unit="policy", disable=len(jobs) < 4):
        actor = load_actor(snap, kind)
        for name, env in targets.items():
            gen = torch.Generator(device="cpu").manual_seed(int(seed))
            result = zero_shot(actor, env, samples, gen)
            rows.append(
                {
                    "iterations": snap.iterations,
                    "generation": snap.generation,
                    "policy": kind,
                    "target": name,
                    "role": roles.get(name, "holdout"),
                    "units": env.num_units,
                    "greedy_speedup": result.greedy_speedup,
                    "best_sampled_speedup": result.best_sampled_speedup,
                    "valid_fraction": result.valid_fraction,
                }
            )
            log.debug(
                "%s %s iter %d on %s: %s", snap.path.name, kind, snap.iterations, name, result
            )
    return rows


# --------------------------------------------------------------------- outputs
def write_csv(rows: Iterable[dict], path: str | Path) -> Path:
    """``transfer.csv``: one row per snapshot, policy and target."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_csv(path: str | Path) -> list[dict]:
    """Rows of a ``transfer.csv`` with numbers parsed."""
    ints = ("iterations", "generation", "units")
    floats = ("greedy_speedup", "best_sampled_speedup", "valid_fraction")
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row.update({k: int(row[k]) for k in ints})
        row.update({k: float(row[k]) for k in floats})
    return rows


def _groups(rows: Sequence[dict]) -> dict[tuple[str, str], list[dict]]:
    """Rows by ``(policy, target)`` in first-seen order, each sorted by iterations."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["policy"], row["target"]), []).append(row)
    return {key: sorted(g, key=lambda r: r["iterations"]) for key, g in groups.items()}


def _best(group: Sequence[dict], column: str) -> tuple[float, int]:
    """Largest ``column`` of a group and the iterations of its first occurrence."""
    values = np.nan_to_num(np.array([r[column] for r in group], dtype=float), nan=-np.inf)
    i = int(np.argmax(values))
    return float(group[i][column]), int(group[i]["iterations"])


def transfer_table(rows: Sequence[dict]) -> str:
    """Markdown table: per policy and target, the best zero-shot speedups and the final ones."""
    lines = [
        "| policy | target | role | nodes | best greedy (at iteration) | "
        "best sampled (at iteration) | final greedy | final sampled | final valid fraction |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (policy, target), group in _groups(rows).items():
        greedy, g_it = _best(group, "greedy_speedup")
        sampled, s_it = _best(group, "best_sampled_speedup")
        last = group[-1]
        lines.append(
            f"| {policy} | {target} | {last['role']} | {last['units']} | "
            f"{greedy:.4f} ({g_it}) | {sampled:.4f} ({s_it}) | {last['greedy_speedup']:.4f} | "
            f"{last['best_sampled_speedup']:.4f} | {last['valid_fraction']:.3f} |"
        )
    return "\n".join(lines)


def plot_transfer(rows: Sequence[dict], path: str | Path, title: str = "") -> Path:
    """Figure-4-style plot: zero-shot speedup against training iterations.

    One panel per policy kind, one colour per target: solid lines are the greedy map,
    dotted lines the best sampled map; training workloads are drawn with square markers.
    The native compiler is the dashed line at 1.0.
    """
    import matplotlib  # start-up time

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time

    groups = _groups(rows)
    kinds = [k for k in POLICY_KINDS if any(p == k for p, _ in groups)]
    targets = list(dict.fromkeys(t for _, t in groups))
    colors = {t: plt.cm.tab10(i % 10) for i, t in enumerate(targets)}
    fig, axes = plt.subplots(
        1, len(kinds), figsize=(6 * len(kinds), 4), dpi=110, squeeze=False, sharey=True
    )
    for ax, kind in zip(axes[0], kinds):
        for (policy, target), group in groups.items():
            if policy != kind:
                continue
            its = [r["iterations"] for r in group]
            marker = "s" if group[-1]["role"] == "train" else "o"
            label = f"{target} ({group[-1]['role']})"
            greedy = [r["greedy_speedup"] for r in group]
            sampled = [r["best_sampled_speedup"] for r in group]
            ax.plot(its, greedy, marker=marker, ms=3, color=colors[target], label=label)
            ax.plot(its, sampled, linestyle=":", color=colors[target], alpha=0.7)
        ax.axhline(1.0, color="grey", linestyle="--", label="native compiler")
        ax.set_title(f"{kind} policy (solid: greedy, dotted: best sampled)", fontsize=9)
        ax.set_xlabel("training iterations of the policy")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("zero-shot speedup over the compiler")
    axes[0][-1].legend(loc="best", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_outputs(rows: Sequence[dict], out_dir: str | Path, title: str = "") -> dict[str, Path]:
    """``transfer.csv``, ``transfer.png`` and ``transfer.md`` in ``out_dir``."""
    if not rows:
        raise ValueError("no zero-shot results to write")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    heading = f"# Zero-shot transfer{': ' + title if title else ''}\n\n"
    note = (
        "Speedups are over each target's native compiler (1.0 = compiler, 0 = invalid map); "
        "'sampled' is the best of the sampled maps of each snapshot; iterations are the "
        "policy's training iterations when the snapshot was taken.\n\n"
    )
    md = out_dir / "transfer.md"
    md.write_text(heading + note + transfer_table(rows) + "\n", encoding="utf-8")
    return {
        "csv": write_csv(rows, out_dir / TRANSFER_CSV),
        "png": plot_transfer(rows, out_dir / "transfer.png", title),
        "md": md,
    }


# ------------------------------------------------------------- run directories
#: a run's config and the folder of its transfer outputs (as :mod:`egrl.rundir` names them)
RUN_CONFIG = CONFIG_FILE
OUTPUT_DIR = TRANSFER_DIR


@dataclass(frozen=True)
class RunInfo:
    """What a run directory's ``config.yaml`` says about the environments it trained on.

    Attributes:
        train: workloads the policies were trained on (one for ``egrl-train`` runs,
            several for ``egrl-transfer pretrain``).
        hwmodel: hardware model name.
        hw_params: its parameters.
        invalid_reward_scale: the env's scale of invalid-map rewards.
        reward: how the env scores repaired maps (:data:`egrl.env.REWARDS`).
    """

    train: tuple[str, ...]
    hwmodel: str
    hw_params: dict
    invalid_reward_scale: float = 1.0
    reward: str = "egrl"

    def make_env(self, workload: str) -> Env:
        """``workload`` (zoo name or path) on this run's hardware model."""
        return make_env(
            hwmodel=self.hwmodel,
            workload=workload,
            invalid_reward_scale=self.invalid_reward_scale,
            reward=self.reward,
            **self.hw_params,
        )


def read_run_info(run_dir: str | Path) -> RunInfo:
    """Parse ``run_dir/config.yaml`` (an ``egrl-train`` run or a pretraining directory)."""
    files = RunDir(run_dir)
    path = files.config
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a run directory?")
    cfg = files.resolved_config()
    try:
        train = cfg.get("train") or [cfg["workload"]["name"]]
        hw = cfg["hwmodel"]
        return RunInfo(
            train=tuple(str(t) for t in train),
            hwmodel=str(hw["name"]),
            hw_params=dict(hw.get("params") or {}),
            invalid_reward_scale=float(cfg.get("invalid_reward_scale", 1.0)),
            reward=reward_of(cfg),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path} lacks the workload or hwmodel section: {exc}") from exc


def evaluate_run(
    run_dir: str | Path,
    targets: Sequence[str],
    which: str = "both",
    samples: int = 16,
    seed: int = 0,
    out_dir: str | Path | None = None,
) -> dict[str, Path]:
    """Zero-shot evaluation of every snapshot of a run on ``targets`` and its own workloads.

    The training workloads are evaluated too (role ``train``), as the reference curve.
    Outputs go to ``out_dir`` (default ``run_dir/transfer``); returns their paths.
    """
    info = read_run_info(run_dir)
    snapshots = list_snapshots(run_dir)
    names = list(dict.fromkeys([*info.train, *targets]))
    envs = {name: info.make_env(name) for name in names}
    roles = {name: "train" if name in info.train else "holdout" for name in names}
    rows = evaluate_snapshots(snapshots, envs, roles, which=which, samples=samples, seed=seed)
    title = f"policies trained on {'+'.join(info.train)}"
    return write_outputs(rows, out_dir or RunDir(run_dir).transfer_dir, title)
