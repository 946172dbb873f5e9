"""The ``tpu-cmem`` hardware model: programs from workloads, the adapter's compiler
(repairs, re-assigned bytes, latency), the native heuristic, the optimum, the layout
figure, and the toolkit's agents running on it unchanged."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

import hwmodels
import workloads
from egrl import make_env
from hwmodels.tpu import COPY, DROP, NOCOPY, TPU, Game, Program, TPUParams
from hwmodels.tpu.plot import plot_layout
from tests.nnpi_workloads import layer, random_dag
from tests.support.agent_configs import agent_config
from tests.support.command_line import TINY
from tests.support.metrics import read_metrics
from tests.support.paths import ROOT
from workloads.ir import TensorInfo, Workload

TINY_CMEM = dict(cmem_mib=8 / 1024)


def chain() -> Workload:
    """x -> l0 (weights) -> l1 (weights) -> add (in place on l1's output, also reads l0)."""
    nodes = [
        layer("l0", ["x"], [512], 512, 1024, 10**5),
        layer("l1", ["l0"], [512], 512, 1024, 10**5),
        layer("add", ["l1", "l0"], [512, 512], 512),
    ]
    return Workload("chain", nodes, [TensorInfo("x", (1, 512), 512)])


def test_registered_with_its_config():
    cfg = yaml.safe_load((ROOT / "configs" / "hwmodel" / "tpu-cmem.yaml").read_text())
    assert cfg["name"] == "tpu-cmem" and "tpu-cmem" in hwmodels.names()
    hw = hwmodels.make("tpu-cmem", **cfg["params"])
    assert isinstance(hw, TPU) and hw.params == TPUParams()
    assert hw.params.cmem_bytes == 128 * 2**20
    with pytest.raises(TypeError, match="unknown tpu-cmem parameter"):
        hwmodels.make("tpu-cmem", sram_mib=4)
    with pytest.raises(ValueError, match="cmem_mib must be a positive number"):
        hwmodels.make("tpu-cmem", cmem_mib=0)


def test_program_of_a_workload_has_the_table1_buffers():
    p = Program.from_workload(chain())
    # l0: x, w0, out; l1: l0, w1, out; add: l1, l0, out
    assert p.num_buffers == 9 and p.num_instructions == 3
    assert p.is_output.tolist() == [False, False, True] * 3
    assert p.time.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    l0 = p.tensor_names.index("l0")
    reads = np.flatnonzero(p.tensor == l0)
    assert p.live_start[reads].tolist() == [0, 0, 0] and p.live_end[reads].tolist() == [2, 2, 2]
    assert p.ready[reads[0]] == 1  # no copy of l0 before it exists
    add_in, add_out = p.buffer_names.index("l1@2r"), p.buffer_names.index("add@2w")
    assert p.alias[add_in] == p.alias[add_out] and p.num_groups == 8  # in place
    assert (p.benefit_s >= 0).all() and (p.demand_ps > 0).all() and (p.supply_ps > 0).all()
    assert p.features.shape == (9, 10) and np.isfinite(p.features).all()


def test_repeats_unroll_the_workload_and_share_its_weights():
    one = Program.from_workload(chain())
    three = Program.from_workload(chain(), repeats=3)
    assert three.num_buffers == 3 * one.num_buffers
    assert three.num_instructions == 3 * one.num_instructions
    w0 = three.tensor_names.index("l0.weight")
    assert (three.tensor == w0).sum() == 3  # one weight tensor read in every repetition


def test_measure_repairs_charges_reassigned_bytes_and_keeps_valid_maps():
    target = TPU(**TINY_CMEM).bind(random_dag(8, np.random.default_rng(11), max_bytes=4096))
    n = target.num_units
    nocopy_first = np.full((1, n, 1), DROP)
    nocopy_first[0, 0, 0] = NOCOPY  # the first buffer has nothing to extend
    m = target.measure(nocopy_first)
    assert not m.valid[0] and m.rectified[0, 0, 0] == DROP
    size = target.program.size
    assert m.reassigned_ratio[0] == pytest.approx(size[0] / size.sum())
    own = np.stack([target.native_mapping(), target.initial_mapping()])
    ok = target.measure(own)
    assert ok.valid.all() and (ok.rectified == own).all() and (ok.reassigned_ratio == 0).all()
    assert ok.latency_s[1] == pytest.approx(target.program.baseline_latency_s)


def test_native_heuristic_uses_cmem_and_beats_all_drop_on_a_zoo_workload():
    env = make_env("tpu-cmem", "resnet18")
    native = env.baseline_mapping[:, 0]
    assert (native != DROP).sum() > 0.3 * env.num_units
    drop = env.evaluate(env.initial_mapping)
    assert env.baseline_latency_s < drop.latency_s[0]


def test_optimum_is_the_best_legal_game_and_bounds_the_native_map():
    env = make_env(TPU(**TINY_CMEM), random_dag(4, np.random.default_rng(1), max_bytes=4096))
    opt = env.optimum()
    assert opt.proven and opt.gap == 0 and opt.info["games"] > 1
    ev = env.evaluate(opt.mapping)
    assert ev.valid[0] and ev.latency_s[0] == pytest.approx(opt.latency_s)
    assert opt.latency_s <= env.baseline_latency_s
    rng = np.random.default_rng(0)
    some = env.evaluate(rng.integers(0, 3, size=(200, env.num_units, 1)))
    assert (some.latency_s >= opt.latency_s * (1 - 1e-12)).all()
    with pytest.raises(NotImplementedError, match="exhaustive search stops"):
        TPU(repeats=2).bind(chain()).optimum()  # 18 buffers


def test_decision_graph_links_order_tensor_and_alias():
    target = TPU().bind(chain())
    g = target.graph
    edges = set(map(tuple, g.edge_index.T.tolist()))
    p = target.program
    assert all((i, i + 1) in edges for i in range(p.num_buffers - 1))
    l0_reads = np.flatnonzero(p.tensor == p.tensor_names.index("l0"))
    assert (int(l0_reads[0]), int(l0_reads[1])) in edges
    assert g.x.shape == (9, 10) and g.node_names == p.buffer_names


def test_layout_figure_is_written(tmp_path):
    p = Program.from_workload(workloads.load("resnet18"))
    game = Game(p)
    game.play(np.full(p.num_buffers, COPY))
    fig = plot_layout(game.layout(), tmp_path / "layout.png")
    assert (tmp_path / "layout.png").stat().st_size > 10_000
    assert len(fig.axes[0].collections[0].get_paths()) == int(game.layout().allocated.sum())


@pytest.mark.slow
def test_egrl_train_runs_on_the_game(tmp_path):
    tiny = [a for a in TINY if not a.startswith(("workload=", "budget="))]
    out = subprocess.run(
        [sys.executable, "-m", "egrl.cli.train", "hwmodel=tpu-cmem", "workload=resnet18"]
        + ["budget=24", *tiny, f"hydra.run.dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(read_metrics(tmp_path)[-1]["iterations"]) == 24
    best = json.loads((tmp_path / "best_mapping.json").read_text())
    assert {c["action"] for c in best["mapping"].values()} <= {"Drop", "Copy", "NoCopy"}


@pytest.mark.parametrize("name", ["random", "sa", "ga", "greedy-dp"])
def test_search_agents_run_on_the_game_unchanged(name, tmp_path):
    from egrl.agents import make_agent

    env = make_env(TPU(**TINY_CMEM), random_dag(6, np.random.default_rng(2), max_bytes=4096))
    best = make_agent(env, agent_config(name, budget=40), tmp_path).run()
    assert env.num_evaluations <= 40 and (tmp_path / "metrics.csv").is_file()
    if name in ("sa", "greedy-dp"):  # local searches from a valid start keep a valid map
        assert best.mapping is not None
    if best.mapping is not None:  # random maps are mostly repaired (invalid) on this game
        ev = env.evaluate(best.mapping)
        assert ev.valid[0] and ev.speedup[0] == pytest.approx(best.speedup)
