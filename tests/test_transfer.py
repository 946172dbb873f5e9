"""Zero-shot transfer of GNN snapshots, and multi-workload pretraining (small and fast)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from egrl import make_env
from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig, PolicyConfig, PopulationConfig
from egrl.agents.egrl.init_from import list_snapshots
from egrl.agents.egrl.pretrain import MultiWorkloadPretrainer, PretrainConfig, pretrain
from egrl.agents.egrl.transfer import CSV_COLUMNS, evaluate_snapshots, read_csv
from egrl.cli.transfer import main as transfer_main
from egrl.config import TrainConfig
from policies import GraphUNetActor
from policies.snapshot import PolicyError, load_actor, read_snapshot, write_snapshot
from tests.interrupt import kill_after_checkpoints
from tests.nnpi_workloads import random_dag, residual
from tests.support.egrl_runs import TINY_POLICY
from tests.support.units import KIB

HW = {"sram_mib": 1.0, "llc_mib": 2.0}


def source_workload():
    return residual(4, act_bytes=96 * KIB, weight_bytes=700 * KIB, macs=2_000_000)


def target_workloads():
    """Two workloads of other sizes and shapes with the same 19 features."""
    return {
        "residual7": residual(7, act_bytes=128 * KIB, weight_bytes=500 * KIB, macs=3_000_000),
        "dag30": random_dag(30, np.random.default_rng(1), max_bytes=600 * KIB, name="dag30"),
    }


def env_of(workload):
    return make_env("nnpi", workload, **HW)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def egrl_run(tmp_path_factory):
    """A tiny EGRL run with a policy snapshot after every generation, plus its config.yaml."""
    run_dir = tmp_path_factory.mktemp("run")
    cfg = TrainConfig(
        seed=3,
        budget=50,
        progress=False,
        checkpoint_every=100,
        snapshot_every=1,
        agent=EGRLConfig(
            policy=PolicyConfig(**TINY_POLICY),
            population=PopulationConfig(size=8, boltzmann_fraction=0.25),
            learner=LearnerConfig(batch_size=8, burn_in=16, gradient_ratio=1.0),
        ),
    )
    torch.set_num_threads(1)
    trainer = EGRLAgent(env_of(source_workload()), cfg, run_dir)
    trainer.run()
    # What egrl-train writes, with the workload given as a file.
    workload_file = run_dir / "residual4.json"
    source_workload().save(workload_file)
    config = {
        "workload": {"name": str(workload_file)},
        "hwmodel": {"name": "nnpi", "params": HW},
        "invalid_reward_scale": 1.0,
    }
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(config), encoding="utf-8")
    return run_dir, trainer


def independent_greedy(path: Path, kind: str, env) -> np.ndarray:
    """The greedy map of a snapshot's policy, rebuilt from the file by hand: int64 [N, H]."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    sizes = json.loads(meta["policy"])
    actor = GraphUNetActor(int(meta["in_dim"]), json.loads(meta["num_choices"]), **sizes)
    prefix = kind + "."
    weights = {k[len(prefix) :]: v for k, v in load_file(str(path)).items() if k.startswith(prefix)}
    actor.load_state_dict(weights)
    actor.eval()
    with torch.no_grad():
        logits = actor(env.graph.x, env.graph.edge_index)
    return logits.argmax(dim=-1).numpy().astype(np.int64)


# ----------------------------------------------------------------- snapshots
def test_snapshots_of_a_run_are_listed_with_their_metadata(egrl_run):
    run_dir, trainer = egrl_run
    snaps = list_snapshots(run_dir)
    assert [s.generation for s in snaps] == list(range(1, trainer.generation + 1))
    assert snaps[-1].iterations == trainer.ledger.iterations == 50
    assert all(s.kinds == ("learner", "champion") for s in snaps)
    assert snaps[0].policy == {"hidden": 16, "out": 16, "depth": 2, "heads": 2}
    assert snaps[0].in_dim == 19 and snaps[0].num_choices == (3, 3)


def test_loaded_learner_equals_the_trainers_final_actor(egrl_run):
    run_dir, trainer = egrl_run
    actor = load_actor(list_snapshots(run_dir)[-1], "learner")
    live = trainer.portfolio.learners[trainer._lead_learner()].actor
    env = env_of(target_workloads()["dag30"])
    live.eval()
    with torch.no_grad():
        expected = live(env.graph.x, env.graph.edge_index)
        got = actor(env.graph.x, env.graph.edge_index)
    torch.testing.assert_close(got, expected)


# ---------------------------------------------------------------- zero-shot
def test_greedy_speedup_is_the_envs_speedup_of_the_greedy_map(egrl_run):
    run_dir, _ = egrl_run
    snaps = list_snapshots(run_dir)
    envs = {name: env_of(w) for name, w in target_workloads().items()}
    rows = evaluate_snapshots(snaps, envs, which="both", samples=6, seed=11)
    assert len(rows) == len(snaps) * 2 * len(envs)
    by_iter = {s.iterations: s for s in snaps}
    speedups = []
    for row in rows:
        env = envs[row["target"]]
        greedy = independent_greedy(by_iter[row["iterations"]].path, row["policy"], env)
        ev = env.evaluate(greedy)
        assert row["greedy_speedup"] == pytest.approx(float(ev.speedup[0]), rel=1e-12)
        assert row["role"] == "holdout" and row["units"] == env.num_units
        speedups.append(row["greedy_speedup"])
    # Valid fractions are counts over the 1 + 6 evaluated maps.
    fractions = np.array([r["valid_fraction"] for r in rows]) * 7
    np.testing.assert_allclose(fractions, np.round(fractions), atol=1e-9)
    assert np.isfinite(speedups).all()


def test_sampled_maps_come_from_the_seeded_generator(egrl_run):
    run_dir, _ = egrl_run
    snap = list_snapshots(run_dir)[-1]
    env = env_of(target_workloads()["residual7"])
    row = evaluate_snapshots([snap], {"r7": env}, which="champion", samples=8, seed=5)[0]
    actor = load_actor(snap, "champion")
    maps = actor.act(env.graph, 8, torch.Generator().manual_seed(5))
    ev = env.evaluate(maps.numpy())
    greedy_valid = row["greedy_speedup"] > 0
    assert row["best_sampled_speedup"] == pytest.approx(float(ev.speedup.max()), rel=1e-12)
    assert row["valid_fraction"] == pytest.approx((ev.valid.sum() + greedy_valid) / 9)
    again = evaluate_snapshots([snap], {"r7": env}, which="champion", samples=8, seed=5)[0]
    assert again == row


def test_policy_sizes_that_do_not_match_the_weights_are_an_error(egrl_run, tmp_path):
    run_dir, _ = egrl_run
    snap = list_snapshots(run_dir)[0]
    actor = load_actor(snap, "learner")
    sizes = {"hidden": 32, "out": 16, "depth": 2, "heads": 2}
    bad = write_snapshot(
        tmp_path / "iter_000001.safetensors",
        {"learner": actor},
        iterations=1,
        sizes=sizes,
        in_dim=19,
        num_choices=[3, 3],
    )
    with pytest.raises(PolicyError, match=r"iter_000001.*do not fit.*'hidden': 32"):
        load_actor(read_snapshot(bad), "learner")
    with pytest.raises(PolicyError, match="holds no 'champion'"):
        load_actor(read_snapshot(bad), "champion")


def test_feature_width_mismatch_is_a_clear_error(tmp_path):
    actor = GraphUNetActor(7, [3, 3], hidden=8, out=8, depth=1, heads=2)
    write_snapshot(
        tmp_path / "policies" / "iter_000004.safetensors",
        {"learner": actor},
        iterations=4,
        sizes={"hidden": 8, "out": 8, "depth": 1, "heads": 2},
        in_dim=7,
        num_choices=[3, 3],
    )
    env = env_of(target_workloads()["dag30"])
    with pytest.raises(PolicyError, match=r"'dag30'.*width 19.*trained on width 7"):
        evaluate_snapshots(list_snapshots(tmp_path), {"dag30": env})


# ---------------------------------------------------------------------- CLI
def test_cli_writes_transfer_outputs(egrl_run, tmp_path, capsys):
    run_dir, trainer = egrl_run
    target = tmp_path / "dag30.json"
    target_workloads()["dag30"].save(target)
    out = tmp_path / "out"
    argv = [str(run_dir), "--targets", str(target), "--samples", "3", "--which", "learner"]
    assert transfer_main([*argv, "--out", str(out)]) == 0
    assert f"zero-shot transfer results in {out}" in capsys.readouterr().out
    rows = read_csv(out / "transfer.csv")
    with open(out / "transfer.csv", encoding="utf-8") as f:
        assert tuple(csv.DictReader(f).fieldnames) == CSV_COLUMNS
    assert {r["policy"] for r in rows} == {"learner"}
    roles = {r["target"]: r["role"] for r in rows}
    assert roles == {str(run_dir / "residual4.json"): "train", str(target): "holdout"}
    assert len(rows) == 2 * trainer.generation
    assert (out / "transfer.png").stat().st_size > 0
    table = (out / "transfer.md").read_text(encoding="utf-8")
    final = [r for r in rows if r["target"] == str(target)][-1]
    assert f"| learner | {target} | holdout | 30 |" in table
    assert f"{final['greedy_speedup']:.4f}" in table


# ---------------------------------------------------------------- pretraining
def small_pretrain_config(budget: int, **kw) -> PretrainConfig:
    return PretrainConfig(
        train=["a", "b"],
        holdout=[],
        budget=budget,
        seed=kw.pop("seed", 0),
        hw_params=dict(HW),
        snapshot_every=2,
        samples=2,
        progress=False,
        policy=PolicyConfig(**TINY_POLICY),
        learner=LearnerConfig(
            rollouts=2, clean_rollouts=1, batch_size=4, burn_in=8, gradient_ratio=1.0
        ),
        **kw,
    )


def two_envs():
    return {"a": env_of(source_workload()), "b": env_of(target_workloads()["residual7"])}


def test_pretraining_respects_the_budget_over_all_workloads():
    envs = two_envs()
    trainer = MultiWorkloadPretrainer(envs, small_pretrain_config(budget=29))
    trainer.run()
    rows = trainer.rows
    assert trainer.ledger.iterations == 29
    assert sum(env.num_evaluations for env in envs.values()) == 29
    # Repeats answered from each workload's cache are replay transitions, not paid.
    assert sum(len(b) for b in trainer.buffers.values()) == trainer.ledger.proposals >= 29
    # Each workload paid once for each distinct map of its own buffer.
    for name, env in envs.items():
        held = trainer.buffers[name].actions[: len(trainer.buffers[name])]
        assert len(np.unique(held.reshape(len(held), -1), axis=0)) == env.num_evaluations
    assert rows[-1]["gradient_steps"] > 0 and trainer.learner.num_updates > 0
    assert set(trainer.buffers["a"].counts_by_source()) == {"learner"}
    # Each workload's best is the best speedup of its own evaluated maps.
    for name, env in trainer.envs.items():
        buffer = trainer.buffers[name]
        ev = env.evaluate(buffer.actions[: len(buffer)].astype(np.int64))
        assert trainer.ledgers[name].best.speedup == pytest.approx(ev.speedup.max())
        assert rows[-1][f"best_speedup[{name}]"] == trainer.ledgers[name].best.speedup
    again = MultiWorkloadPretrainer(two_envs(), small_pretrain_config(budget=29))
    again.run()
    # Same seed, same run (metrics equal up to wall-clock time; NaN before the burn-in).
    np.testing.assert_equal(without_timing(again.rows), without_timing(rows))


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def test_pretraining_resumed_from_a_checkpoint_matches_an_uninterrupted_run(tmp_path):
    cfg = small_pretrain_config(budget=40, checkpoint_every=2, keep_checkpoints=10)
    reference = MultiWorkloadPretrainer(two_envs(), cfg, tmp_path / "reference")
    reference.run()
    assert reference.learner.num_updates > 0

    # A run that crashes after its third generation (checkpoints at even generations) ...
    class Crash(Exception):
        pass

    def crash_after_three(row: dict) -> None:
        if row["generation"] == 3:
            raise Crash

    stopped = MultiWorkloadPretrainer(two_envs(), cfg, tmp_path / "stopped")
    with pytest.raises(Crash):
        stopped.run(on_generation=crash_after_three)
    assert 0 < stopped.ledger.iterations < cfg.budget
    # ... continued by a fresh pretrainer built from its last checkpoint.
    resumed = MultiWorkloadPretrainer(two_envs(), cfg, tmp_path / "stopped")
    assert resumed.resume() and resumed.generation == 2
    resumed.run()
    np.testing.assert_equal(without_timing(resumed.rows), without_timing(reference.rows))
    for name in ("a", "b"):
        state, ref = resumed.buffers[name].state_dict(), reference.buffers[name].state_dict()
        assert state.keys() == ref.keys()
        for key in state:
            np.testing.assert_equal(state[key], ref[key])
        assert resumed.ledgers[name].best.speedup == reference.ledgers[name].best.speedup
    for a, b in zip(resumed.learner.actor.parameters(), reference.learner.actor.parameters()):
        assert torch.equal(a, b)
    snaps = {s.path.name: s.path for s in list_snapshots(tmp_path / "reference")}
    again = {s.path.name: s.path for s in list_snapshots(tmp_path / "stopped")}
    assert snaps.keys() == again.keys()
    for name, path in snaps.items():
        ours, theirs = load_file(str(again[name])), load_file(str(path))
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)
        assert read_snapshot(again[name]).generation == read_snapshot(path).generation
    with open(tmp_path / "stopped" / "metrics.csv", encoding="utf-8") as f:
        written = list(csv.DictReader(f))
    assert [int(r["iterations"]) for r in written] == [r["iterations"] for r in reference.rows]


def test_pretraining_rejects_graphs_one_policy_cannot_read():
    envs = two_envs()
    envs["b"].target.graph.x = torch.zeros(envs["b"].num_units, 5)
    with pytest.raises(ValueError, match=r"'b' has feature width 5.*'a' has 19"):
        MultiWorkloadPretrainer(envs, small_pretrain_config(budget=10))


def test_pretrain_cli_trains_and_writes_the_transfer_outputs(tmp_path, capsys):
    files = {}
    workloads = {"a": source_workload(), "b": target_workloads()["residual7"]}
    workloads["held"] = target_workloads()["dag30"]
    for name, w in workloads.items():
        files[name] = tmp_path / f"{name}.json"
        w.save(files[name])
    out = tmp_path / "pre"
    argv = ["pretrain", "--train", str(files["a"]), str(files["b"]), "--budget", "20"]
    argv += ["--seed", "1", "--out", str(out), "--holdout", str(files["held"])]
    argv += ["policy.hidden=16", "policy.out=16", "policy.depth=2", "policy.heads=2"]
    argv += ["learner.batch_size=4", "learner.burn_in=4", "snapshot_every=2", "samples=2"]
    argv += ["progress=false", "+hwmodel.params.sram_mib=1.0", "+hwmodel.params.llc_mib=2.0"]
    assert transfer_main(argv) == 0
    assert f"zero-shot transfer results in {out / 'transfer'}" in capsys.readouterr().out
    metrics = list(csv.DictReader(open(out / "metrics.csv", encoding="utf-8")))
    # One row per generation; how many generations 20 measurements take depends on how
    # often a proposal repeats a measured map (answered free from the cache).
    assert int(metrics[-1]["iterations"]) == 20
    assert [int(r["generation"]) for r in metrics] == list(range(1, len(metrics) + 1))
    snaps = list_snapshots(out)
    # A snapshot every second generation, and one at the end.
    iterations = [int(r["iterations"]) for r in metrics]
    expected = iterations[1::2] + ([] if len(metrics) % 2 == 0 else [20])
    assert [s.iterations for s in snaps] == expected
    assert snaps[0].workload == f"{files['a']}+{files['b']}"
    rows = read_csv(out / "transfer" / "transfer.csv")
    assert len(rows) == 3 * 3
    roles = {r["target"]: r["role"] for r in rows}
    assert roles == {
        str(files["a"]): "train",
        str(files["b"]): "train",
        str(files["held"]): "holdout",
    }
    for name in ("transfer.png", "transfer.md"):
        assert (out / "transfer" / name).is_file()
    # The directory is a run directory: egrl-transfer evaluates it on more targets.
    more = tmp_path / "more"
    argv = [str(out), "--targets", str(files["held"]), "--samples", "2", "--seed", "1"]
    assert transfer_main([*argv, "--out", str(more)]) == 0
    assert read_csv(more / "transfer.csv") == rows


def test_pretrain_writes_nothing_over_existing_snapshots(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "iter_000001.safetensors").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="already holds snapshots"):
        pretrain(small_pretrain_config(budget=4), tmp_path)


_PRETRAIN_CHILD = """
import sys, torch
torch.set_num_threads(1)
from egrl.cli.transfer import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_killed_pretraining_resumes_from_the_cli_like_an_uninterrupted_run(tmp_path):
    files = {}
    for name, w in {"a": source_workload(), "b": target_workloads()["residual7"]}.items():
        files[name] = tmp_path / f"{name}.json"
        w.save(files[name])
    argv = ["pretrain", "--train", str(files["a"]), str(files["b"]), "--holdout"]
    argv += ["--budget", "150", "--seed", "2", "policy.hidden=16", "policy.out=16"]
    argv += ["policy.depth=2", "policy.heads=2", "learner.batch_size=4", "learner.burn_in=4"]
    argv += ["checkpoint_every=2", "snapshot_every=3", "samples=2", "progress=false"]
    argv += ["+hwmodel.params.sram_mib=1.0", "+hwmodel.params.llc_mib=2.0"]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert transfer_main([*argv, "--out", str(reference)]) == 0

    kill_after_checkpoints(_PRETRAIN_CHILD, [*argv, "--out", str(killed)], killed)
    assert not (killed / "transfer").exists()
    with pytest.raises(SystemExit):  # a resumed run keeps its own config
        transfer_main(["pretrain", "--resume", str(killed), "--budget", "10"])

    assert transfer_main(["pretrain", "--resume", str(killed)]) == 0

    def metrics(run):
        with open(run / "metrics.csv", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        return [{k: v for k, v in r.items() if k != "wall_s" and k[:2] != "t_"} for r in rows]

    assert metrics(killed) == metrics(reference)
    assert int(metrics(killed)[-1]["iterations"]) == 150
    assert read_csv(killed / "transfer" / "transfer.csv") == read_csv(
        reference / "transfer" / "transfer.csv"
    )
