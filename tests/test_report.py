"""egrl-report and egrl.report on real (small) run directories written by an agent."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from egrl import make_env
from egrl.agents import SearchAgent, train_config
from egrl.cli.report import main as egrl_report
from egrl.replay import ReplayBuffer
from egrl.report import (
    active_decisions,
    embed,
    load_artifacts,
    map_set,
    one_hot,
    row_fractions,
    run_transitions,
    subsample,
    transition_counts,
    umap_panel,
)
from egrl.report.runs import buffer_in_order, env_from_config
from egrl.report.selection import best_mask, competitive_mask
from tests.nnpi_workloads import random_dag

BUDGET = 300
HW_PARAMS = {"sram_mib": 0.5, "llc_mib": 1.0}  # small enough that capacities bind
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class MutationAgent(SearchAgent):
    """Hill climbing from the compiler's map: mutants of the best map plus random maps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.proposed: list[np.ndarray] = []

    def step(self) -> dict:
        parent = (
            self.ledger.best.mapping
            if self.ledger.best.mapping is not None
            else self.env.baseline_mapping
        )
        n = min(16, self.ledger.remaining)
        kids = np.repeat(parent[None], n, axis=0)
        flip = self.rng.random(kids.shape) < 0.15
        kids = np.where(flip, self.env.random_mappings(n, self.rng), kids)
        kids[: n // 4] = self.env.random_mappings(n // 4, self.rng)
        self.proposed.append(kids)
        self.ledger.evaluate(kids, "mutation" if self.generation % 2 else "other")
        return {}


def make_run(root: Path, seed: int) -> tuple[Path, MutationAgent]:
    """A run directory as egrl-train writes it, from :class:`MutationAgent`."""
    workload = random_dag(14, np.random.default_rng(0), max_bytes=300_000)
    wl_path = root / "dag.json"
    workload.save(wl_path)
    cfg = {
        "agent": {"name": "mutation"},
        "hwmodel": {"name": "nnpi", "params": dict(HW_PARAMS)},
        "workload": {"name": str(wl_path)},
        "seed": seed,
        "budget": BUDGET,
        "checkpoint_every": 4,
        "invalid_reward_scale": 1.0,
        "progress": False,
    }
    run_dir = root / f"run{seed}"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)), "utf-8")
    env = make_env("nnpi", workload, **HW_PARAMS)
    train_cfg = train_config({k: v for k, v in cfg.items() if k not in ("hwmodel", "workload")})
    agent = MutationAgent(env, train_cfg, run_dir)
    agent.run()
    return run_dir, agent


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[tuple[Path, MutationAgent]]:
    root = tmp_path_factory.mktemp("runs")
    return [make_run(root, seed) for seed in (0, 1)]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 5000, (path, len(data))


# ---------------------------------------------------------------- loading a run
def test_load_run_reevaluates_every_map_in_order(runs):
    run_dir, agent = runs[0]
    run = load_artifacts(run_dir)
    proposed = np.concatenate(agent.proposed)
    np.testing.assert_array_equal(run.maps, proposed)
    # Each map's paid iteration: repeats were answered from the cache, not paid again, and
    # so was the compiler's map (measured when the target was bound).
    native = agent.env.baseline_mapping
    firsts = [
        not any(np.array_equal(m, p) for p in proposed[:i]) and not np.array_equal(m, native)
        for i, m in enumerate(proposed)
    ]
    np.testing.assert_array_equal(run.iteration, np.cumsum(firsts))
    assert run.iteration[-1] == BUDGET == agent.ledger.iterations
    ev = agent.env.evaluate(proposed)
    np.testing.assert_allclose(run.speedup, ev.speedup)
    np.testing.assert_array_equal(run.valid, ev.valid)
    assert 0 < run.valid.sum() < BUDGET  # capacities bind: some maps are repaired
    assert run.num_reward_mismatches == 0
    np.testing.assert_array_equal(run.best_mapping, agent.ledger.best.mapping)
    assert run.best_speedup == pytest.approx(agent.ledger.best.speedup)
    assert sorted(run.source_names) == ["mutation", "other"]
    assert run.label == "dag / mutation / seed 0"
    assert len(run.rows) == agent.generation


def test_load_run_trusts_the_hardware_model_not_stored_rewards(runs, tmp_path, caplog):
    run_dir = tmp_path / "changed"
    shutil.copytree(runs[0][0], run_dir)
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.hwmodel.params.sram_mib = 0.125  # a different chip than the run's
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg), "utf-8")
    with caplog.at_level(logging.WARNING, logger="egrl.report.runs"):
        run = load_artifacts(run_dir)
    assert run.num_reward_mismatches > 0
    assert "stored rewards differ" in caplog.text
    fresh = make_env("nnpi", run.env.workload, sram_mib=0.125, llc_mib=1.0).evaluate(run.maps)
    np.testing.assert_array_equal(run.valid, fresh.valid)


def test_a_run_on_a_rewritten_workload_is_reported_on_it():
    """A run with ``workload.eliminate_data_movement=true`` searched BERT without its copies:
    its report binds the same rewritten graph (137 units, not 185)."""
    config = {"hwmodel": {"name": "nnpi"}, "workload": {"name": "bert-base"}}
    assert env_from_config(config).num_units == 185
    config["workload"]["eliminate_data_movement"] = True
    assert env_from_config(config).num_units == 137


def test_buffer_in_order_after_the_buffer_wrapped():
    buf = ReplayBuffer(capacity=5, num_units=2, num_heads=1, max_choices=16)
    maps = np.arange(8).reshape(8, 1, 1).repeat(2, axis=1)
    buf.add(maps[:3], np.zeros(3), "a")
    buf.add(maps[3:], np.arange(3, 8, dtype=float), "b")
    arrays, names, first = buffer_in_order(buf.state_dict())
    assert first == 3 and names == ["a", "b"]
    np.testing.assert_array_equal(arrays["actions"][:, 0, 0], [3, 4, 5, 6, 7])
    np.testing.assert_array_equal(arrays["rewards"], [3, 4, 5, 6, 7])


def test_missing_files_are_named(runs, tmp_path, capsys):
    no_ckpt = tmp_path / "no_ckpt"
    shutil.copytree(runs[0][0], no_ckpt)
    shutil.rmtree(no_ckpt / "checkpoints")
    with pytest.raises(FileNotFoundError, match=r"no_ckpt.*no checkpoint.*state\.json"):
        load_artifacts(no_ckpt)
    assert egrl_report([str(no_ckpt)]) == 1
    err = capsys.readouterr().err
    assert str(no_ckpt) in err and "state.json" in err

    assert egrl_report([str(runs[0][0]), "--max-maps", "0"]) == 1
    assert "max_maps must be >= 1" in capsys.readouterr().err

    no_cfg = tmp_path / "no_cfg"
    shutil.copytree(runs[0][0], no_cfg)
    (no_cfg / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match=r"no_cfg.*config\.yaml is missing"):
        load_artifacts(no_cfg)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_artifacts(tmp_path / "nowhere")


def test_best_mapping_json_missing_falls_back_to_the_checkpoint(runs, tmp_path):
    run_dir = tmp_path / "no_best"
    shutil.copytree(runs[0][0], run_dir)
    (run_dir / "best_mapping.json").unlink()
    run = load_artifacts(run_dir)
    np.testing.assert_array_equal(run.best_mapping, runs[0][1].ledger.best.mapping)


def test_checkpoint_of_another_workload_is_an_error(runs, tmp_path):
    run_dir = tmp_path / "other"
    shutil.copytree(runs[0][0], run_dir)
    other = random_dag(9, np.random.default_rng(5), max_bytes=300_000)
    other.save(tmp_path / "other.json")
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.workload.name = str(tmp_path / "other.json")
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg), "utf-8")
    with pytest.raises(ValueError, match=r"maps have 14 units x 2 heads .* has 9 x 2"):
        load_artifacts(run_dir)


def test_best_mapping_json_with_unknown_unit_is_an_error(runs, tmp_path):
    run_dir = tmp_path / "bad_best"
    shutil.copytree(runs[0][0], run_dir)
    best = json.loads((run_dir / "best_mapping.json").read_text("utf-8"))
    best["mapping"].pop("n3")
    (run_dir / "best_mapping.json").write_text(json.dumps(best), "utf-8")
    with pytest.raises(ValueError, match=r"best_mapping\.json: no entry for unit 'n3'"):
        load_artifacts(run_dir)


# ------------------------------------------------------------ selecting maps
def test_groups_best_and_competitive():
    speedup = np.array([0.0, 0.97, 1.0, 1.04, 1.20, 1.19, 1.10, 0.5])
    valid = np.array([False, True, True, True, True, True, True, True])
    np.testing.assert_array_equal(np.flatnonzero(best_mask(speedup, valid)), [4, 5])
    np.testing.assert_array_equal(np.flatnonzero(best_mask(speedup, valid, top=3)), [4, 5, 6])
    np.testing.assert_array_equal(np.flatnonzero(competitive_mask(speedup, valid)), [1, 2, 3])
    np.testing.assert_array_equal(np.flatnonzero(competitive_mask(speedup, valid, tol=0.01)), [2])
    maps = np.arange(8).reshape(8, 1, 1)
    ms = map_set(maps, np.arange(1, 9), speedup, valid, competitive_tol=0.25)
    assert not (ms.competitive & ms.best).any()  # best wins
    np.testing.assert_array_equal(np.flatnonzero(ms.competitive), [1, 2, 3, 6])


def test_map_set_deduplicates_in_order_of_first_evaluation():
    maps = np.array([[[2]], [[0]], [[2]], [[1]], [[0]]])
    speedup = np.array([1.0, 0.0, 1.0, 0.9, 0.0])
    valid = speedup > 0
    ms = map_set(maps, np.arange(1, 6), speedup, valid)
    np.testing.assert_array_equal(ms.maps[:, 0, 0], [2, 0, 1])
    np.testing.assert_array_equal(ms.count, [2, 2, 1])
    np.testing.assert_array_equal(ms.first_iteration, [1, 2, 4])
    assert ms.index_of(np.array([[1]])) == 2 and ms.index_of(np.array([[3]])) is None


def test_subsample_keeps_the_best_and_is_seeded(runs):
    run = load_artifacts(runs[0][0])
    ms = map_set(run.maps, run.iteration, run.speedup, run.valid)
    keep = subsample(ms, 40, np.random.default_rng(3))
    assert len(keep) == 40 and len(ms) > 40
    best = np.flatnonzero(ms.best)
    kept, dropped = best[np.isin(best, keep)], best[~np.isin(best, keep)]
    assert len(kept) == min(len(best), 20) and len(best) > 1
    if len(dropped):  # more best maps than half the sample: the fastest are kept
        assert ms.speedup[kept].min() >= ms.speedup[dropped].max()
    np.testing.assert_array_equal(keep, subsample(ms, 40, np.random.default_rng(3)))
    assert not np.array_equal(keep, subsample(ms, 40, np.random.default_rng(4)))


def test_one_hot_distance_is_the_hamming_distance():
    rng = np.random.default_rng(0)
    num_choices = np.array([3, 5])
    maps = np.stack([rng.integers(0, num_choices, size=(7, 2)) for _ in range(6)])
    x = one_hot(maps, num_choices)
    assert x.shape == (6, 7 * 8) and np.all(x.sum(axis=1) == 14)
    hamming = (maps[:, None] != maps[None]).sum(axis=(2, 3))
    sq = ((x[:, None] - x[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(sq, 2 * hamming)


def test_active_decisions_leave_out_layers_without_weights(runs):
    env = runs[0][1].env
    active = active_decisions(env)
    np.testing.assert_array_equal(active[:, 0], env.workload.weight_bytes > 0)
    assert active[:, 1].all() and not active[:, 0].all()


# ------------------------------------------------------------- transitions
def test_transition_counts_by_hand():
    compiler = np.array([[0, 2], [1, 2], [1, 1], [2, 2], [1, 0], [2, 2]])
    best = np.array([[1, 2], [1, 0], [2, 2], [2, 2], [1, 0], [0, 2]])
    active = np.ones_like(compiler, dtype=bool)
    active[5, 0] = False
    weight, act = transition_counts(compiler, best, np.array([3, 3]), active)
    np.testing.assert_array_equal(weight, [[0, 1, 0], [0, 2, 1], [0, 0, 1]])
    np.testing.assert_array_equal(act, [[1, 0, 0], [0, 0, 1], [1, 0, 3]])
    frac = row_fractions(weight)
    np.testing.assert_allclose(frac[1], [0, 2 / 3, 1 / 3])
    np.testing.assert_allclose(frac.sum(axis=1), 1.0)
    empty = row_fractions(np.array([[0, 0], [1, 3]]))
    assert np.isnan(empty[0]).all() and empty[1].tolist() == [0.25, 0.75]


def test_run_transitions_match_a_hand_count(runs):
    run = load_artifacts(runs[0][0])
    counts = run_transitions(run)
    active = active_decisions(run.env)
    for h, cnt in enumerate(counts):
        hand = np.zeros((3, 3), dtype=int)
        for u in range(run.env.num_units):
            if active[u, h]:
                hand[run.compiler_mapping[u, h], run.best_mapping[u, h]] += 1
        np.testing.assert_array_equal(cnt, hand)
        used = cnt.sum(axis=1) > 0
        np.testing.assert_allclose(row_fractions(cnt)[used].sum(axis=1), 1.0)
    assert sum(c.sum() for c in counts) == active.sum()


# ----------------------------------------------------------------- figures
def test_embed_few_points_without_umap():
    coords = embed(np.eye(3, dtype=np.float32))
    assert coords.shape == (3, 2) and np.isfinite(coords).all()


def test_umap_panel_subsamples_and_marks_the_compiler(runs):
    pytest.importorskip("umap")
    run = load_artifacts(runs[0][0])
    panel = umap_panel(run, max_maps=60, seed=0)
    k = len(panel.coords)
    assert k in (60, 61) and panel.coords.shape == (k, 2) and np.isfinite(panel.coords).all()
    np.testing.assert_array_equal(panel.maps[panel.compiler], run.compiler_mapping)
    assert len(np.unique(panel.maps.reshape(k, -1), axis=0)) == k
    assert panel.compiler_evaluated  # the agent starts from the compiler's map
    assert panel.best.sum() >= 1 and panel.num_distinct > 60


def test_egrl_report_cli_writes_figures(runs, tmp_path, capsys):
    pytest.importorskip("umap")
    (a, _), (b, _) = runs
    out = tmp_path / "figs"
    assert egrl_report([str(a), str(b), "--out", str(out), "--max-maps", "150"]) == 0
    printed = capsys.readouterr().out
    for name in ("run0", "run1"):
        for fig in ("umap", "transitions", "maps"):
            path = out / name / f"{fig}.png"
            assert_png(path)
            assert str(path) in printed
    assert_png(out / "umap_runs.png")
    assert "UMAP of all runs" in printed


def test_egrl_report_cli_default_directory(runs, capsys):
    run_dir = runs[1][0]
    assert egrl_report([str(run_dir), "--no-umap", "--top", "5"]) == 0
    assert_png(run_dir / "report" / "transitions.png")
    assert_png(run_dir / "report" / "maps.png")
    assert not (run_dir / "report" / "umap.png").exists()
    assert f"maps: {run_dir / 'report' / 'maps.png'}" in capsys.readouterr().out
