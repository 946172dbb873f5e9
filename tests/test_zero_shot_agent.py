"""``agent=zero-shot``: a frozen policy snapshot's greedy map, then sampled maps, as an
``egrl-train`` run (on the multi-chip study's target: hwmodel=mcm, reward=repaired)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from egrl.cli.train import run as train_run
from egrl.env import make_env
from policies import seeded_init
from policies.categorical import sample_maps
from policies.graph_unet import GraphUNetActor
from policies.snapshot import write_snapshot
from tests.support.command_line import compose, egrl_train_in_process
from tests.support.egrl_runs import TINY_POLICY
from tests.support.metrics import read_metrics

WORKLOAD = "resnet18"

pytestmark = pytest.mark.usefixtures("one_thread")


def study_env(seed: int = 0):
    """The study's target on the test workload (the run's seed is the solver's)."""
    return make_env(hwmodel="mcm", workload=WORKLOAD, reward="repaired", seed=seed)


def make_snapshot(path: Path, sharpen: float = 1.0, iterations: int = 10) -> Path:
    """A policy snapshot of an untrained Graph U-Net that fits the study's target; with
    ``sharpen`` its logits are multiplied (a collapsed softmax for a large value)."""
    env = study_env()
    in_dim, choices = int(env.graph.x.shape[1]), [int(c) for c in env.num_choices]
    actor = seeded_init(7, lambda: GraphUNetActor(in_dim, choices, **TINY_POLICY))
    with torch.no_grad():
        for name, p in actor.named_parameters():
            if name.startswith("heads."):
                p.mul_(sharpen)
    return write_snapshot(
        path,
        {"learner": actor},
        iterations=iterations,
        generation=1,
        workload=WORKLOAD,
        sizes=TINY_POLICY,
        in_dim=in_dim,
        num_choices=choices,
    )


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return make_snapshot(tmp_path_factory.mktemp("pre") / "policies" / "iter_000010.safetensors")


def zero_shot_args(policy: Path, *extra: str) -> list[str]:
    return [
        "agent=zero-shot",
        f"agent.policy={policy}",
        "hwmodel=mcm",
        "reward=repaired",
        f"workload={WORKLOAD}",
        "progress=false",
        *extra,
    ]


def curve(rows: list[dict]) -> list[tuple[int, float]]:
    """``(iterations, best_speedup)`` of each row, a repeated last row left out."""
    out = [(int(r["iterations"]), float(r["best_speedup"])) for r in rows]
    return [p for i, p in enumerate(out) if i == 0 or p[0] != out[i - 1][0]]


@pytest.fixture(scope="module")
def sampled(snapshot, tmp_path_factory):
    """A zero-shot run of ``snapshot``: seed 2, budget 30, batches of 8."""
    run_dir = tmp_path_factory.mktemp("sampled") / "run"
    cfg = compose(*zero_shot_args(snapshot, "seed=2", "budget=30", "agent.batch=8"))
    return train_run(cfg, run_dir), run_dir


@pytest.fixture(scope="module")
def exhausted(tmp_path_factory):
    """A zero-shot run of a collapsed policy that runs out of new maps (seed 0)."""
    root = tmp_path_factory.mktemp("exhausted")
    snap = make_snapshot(root / "sharp.safetensors", sharpen=200.0)
    args = zero_shot_args(snap, "budget=20", "agent.batch=5", "agent.max_draw_factor=2")
    return train_run(compose(*args), root / "run"), root / "run", snap


def test_first_map_is_greedy_then_the_first_distinct_sampled_maps(snapshot, sampled):
    agent, run_dir = sampled
    assert agent.ledger.iterations == 30 and agent.stop_reason is None
    rows = read_metrics(run_dir, drop=())
    assert [int(r["iterations"]) for r in rows[:2]] == [1, 9]
    assert [int(r["draws"]) for r in rows[:2]] == [1, 9]

    # the first map measured is the policy's greedy map, its speedup the greedy_speedup
    env = study_env(seed=2)
    actor = GraphUNetActor(int(env.graph.x.shape[1]), list(env.num_choices), **TINY_POLICY)
    actor.load_state_dict(agent.actor.state_dict())
    with torch.no_grad():
        greedy = actor.eval()(env.graph.x, env.graph.edge_index).argmax(dim=-1).numpy()
    assert np.array_equal(agent.ledger.archive.actions[0], greedy)
    greedy_speedup = float(env.evaluate(greedy[None]).speedup[0])
    assert {float(r["greedy_speedup"]) for r in rows} == {greedy_speedup}
    best = json.loads((run_dir / "best_mapping.json").read_text(encoding="utf-8"))
    assert best["stopped_early"] is None and best["policy"]["snapshot"] == str(snapshot)

    # the maps paid for are the first 30 distinct ones of: greedy, then batches of 8 drawn
    # with a generator seeded by the run's seed
    with torch.no_grad():
        logits = actor(env.graph.x, env.graph.edge_index)
    gen = torch.Generator(device="cpu").manual_seed(2)
    draws = [greedy] + [m for _ in range(5) for m in sample_maps(logits, 8, gen).numpy()]
    first = list(dict.fromkeys(np.asarray(m, np.int64).tobytes() for m in draws))[:30]
    answered = agent.ledger.archive.actions[: len(agent.ledger.archive)].astype(np.int64)
    assert set(first) == {m.tobytes() for m in answered}


def test_a_run_directory_gives_its_newest_snapshot_and_resumes_like_an_unbroken_run(
    snapshot, tmp_path
):
    pre = tmp_path / "pre"
    shutil.copytree(snapshot.parent.parent, pre)
    make_snapshot(pre / "policies" / "iter_000020.safetensors", sharpen=3.0, iterations=2)
    args = zero_shot_args(
        pre, "budget=25", "agent.batch=4", "checkpoint_every=1", "keep_checkpoints=20"
    )
    ref_dir = tmp_path / "ref"
    ref = train_run(compose(*args), ref_dir)  # the newest by iterations, not by name
    assert ref.snapshot.path == pre / "policies" / "iter_000010.safetensors"
    reference = read_metrics(ref_dir, drop=())
    assert len(reference) > 4

    # a kill after the third generation: later checkpoints and outputs missing
    run_dir = tmp_path / "run"
    shutil.copytree(ref_dir, run_dir)
    for late in sorted((run_dir / "checkpoints").glob("gen_??????"))[3:]:
        shutil.rmtree(late)
    (run_dir / "best_mapping.json").unlink()
    again = train_run(compose(*args, f"resume={run_dir}"), run_dir)
    assert again.ledger.iterations == 25
    strip = ("wall_s", "t_inference", "t_evaluation", "t_learner", "t_evolution")
    assert [
        {k: v for k, v in r.items() if k not in strip} for r in read_metrics(run_dir, drop=())
    ] == [{k: v for k, v in r.items() if k not in strip} for r in reference]


def test_a_policy_out_of_new_maps_stops_early(exhausted):
    agent, run_dir, _ = exhausted
    assert agent.ledger.iterations < 20 and agent.draws == 40
    # every distinct map of the 40 draws (greedy, then batches of 5) was paid, once
    env = study_env()
    with torch.no_grad():
        logits = agent.actor(env.graph.x, env.graph.edge_index)
    gen = torch.Generator(device="cpu").manual_seed(0)
    draws = [logits.argmax(dim=-1).numpy()]
    draws += [m for n in [5] * 7 + [4] for m in sample_maps(logits, n, gen).numpy()]
    assert len({np.asarray(m, np.int64).tobytes() for m in draws}) == agent.ledger.iterations
    assert curve(read_metrics(run_dir, drop=()))[-1][0] == agent.ledger.iterations
    assert agent.stop_reason.startswith("out of new maps")
    best = json.loads((run_dir / "best_mapping.json").read_text(encoding="utf-8"))
    assert (
        best["stopped_early"] == agent.stop_reason and best["iterations"] == agent.ledger.iterations
    )


def test_a_missing_policy_is_refused_before_the_run_directory():
    from egrl.cli.checks import run_problems

    cfg = compose("agent=zero-shot", hydra=True)
    assert run_problems(cfg) == ["agent.policy is required: add agent.policy=VALUE"]


def test_an_unreadable_policy_is_one_line_naming_the_option(tmp_path):
    from egrl.agents import make_agent, train_config
    from egrl.validation import ConfigError

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a snapshot")
    for path, why in ((bad, "cannot read policy snapshot"), (tmp_path, "no policy snapshots")):
        cfg = train_config({"agent": {"name": "zero-shot", "policy": str(path)}})
        with pytest.raises(
            ConfigError, match=f"'zero-shot': option policy={path} is invalid: {why}"
        ):
            make_agent(study_env(), cfg)

    missing = tmp_path / "nope.safetensors"
    run_dir = tmp_path / "run"
    out = egrl_train_in_process(
        *zero_shot_args(missing, "budget=5"), f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        f"egrl-train: agent 'zero-shot': option policy={missing} is invalid: "
        "no such file or directory"
    ]
    assert not (run_dir / "metrics.csv").exists()
