"""Screening with knowledge from elsewhere: a free prior (``screen.prior``) and earlier runs
of the same target on other workloads (``screen.init_from``)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import workloads
from egrl import make_env
from egrl.agents import make_agent, train_config
from egrl.rundir import RunDir
from egrl.screening.earlier import foreign_problem, load_measured
from egrl.screening.features import Featurizer, choice_shares
from egrl.screening.models import Domain, ForestModel, Measured
from egrl.screening.screen import spearman
from hwmodels.external import NNPI_HEADS
from tests.support.chips import CHIP
from tests.support.command_line import assert_refused, egrl_train, egrl_train_in_process
from tests.support.screening import earlier_run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_choice_shares_are_the_same_columns_on_every_workload():
    small, large = make_env("nnpi", "resnet18"), make_env("nnpi", "resnet50")
    rng = np.random.default_rng(0)
    a = Featurizer(small.target, small.num_choices).shared(small.random_mappings(4, rng))
    b = Featurizer(large.target, large.num_choices).shared(large.random_mappings(4, rng))
    assert a.shape == b.shape
    shares = choice_shares(np.array([[[0, 1], [2, 1]]]), np.array([3, 2]))
    np.testing.assert_allclose(shares, [[0.5, 0, 0.5, 0, 1]])


def test_a_prior_describes_an_external_chips_maps_for_free():
    w = workloads.load("resnet18")
    chip = SimpleNamespace(heads=dict(NNPI_HEADS), workload=w)  # no describe of its own
    from hwmodels.external import nnpi_prior

    prior = nnpi_prior(chip)
    featurize = Featurizer(chip, np.array([3, 3]), prior)
    assert featurize.description_names == [f"prior_{n}" for n in prior.description_names]
    nnpi = make_env("nnpi", "resnet18")
    maps = nnpi.random_mappings(6, np.random.default_rng(1))
    described = featurize.describe(maps)
    assert described.shape == (6, len(prior.description_names))
    np.testing.assert_allclose(
        described, Featurizer(nnpi.target, nnpi.num_choices).describe(maps), rtol=1e-6
    )


def test_earlier_runs_teach_a_forest_on_another_workload(tmp_path):
    runs = [earlier_run(tmp_path / w, w) for w in ("resnet18", "resnet34")]
    measured = [load_measured(path) for path in runs]
    assert [m.domain.name for m in measured] == ["resnet18", "resnet34"]
    assert all(len(m) > 0 and m.maps.shape[1:] == (m.domain.graph.num_nodes, 2) for m in measured)
    target = make_env("nnpi", "resnet50")
    maps = target.random_mappings(200, np.random.default_rng(2))
    reward = target.evaluate(maps).reward
    model = ForestModel(seed=0, trees=32)
    own = Measured(Domain.of(target), maps[:8], reward[:8])
    model.fit([own, *measured])
    rho = spearman(model.predict(Domain.of(target), maps[8:]), reward[8:])
    assert rho > 0.3  # the description carries across workloads of one chip


@pytest.mark.slow
def test_a_screen_fits_on_earlier_runs_and_refuses_bad_ones(tmp_path):
    earlier = earlier_run(tmp_path / "resnet18", "resnet18")
    screen = {"name": "forest", "pool": 2, "warmup": 0, "trees": 8, "init_from": [str(earlier)]}
    agent = {"name": "random", "batch": 10}
    cfg = train_config({"budget": 30, "progress": False, "agent": agent, "screen": screen})
    agent = make_agent(make_env("nnpi", "resnet34"), cfg)
    assert [m.domain.name for m in agent.ledger.screen.earlier] == ["resnet18"]
    assert (
        agent.ledger.screen.refit() and agent.ledger.screen.active
    )  # warmup 0: ranked from the start
    agent.run()
    assert agent.ledger.iterations == 30
    assert np.isfinite(float(agent.rows[0]["screen_spearman"]))

    args = ["workload=resnet34", "budget=20", "agent=random", "screen=forest"]
    missing = tmp_path / "nowhere"
    assert_refused(
        egrl_train(*args, f"screen.init_from={missing}", cwd=tmp_path),
        f"screen.init_from={missing} is invalid: no such directory",
    )
    other = earlier_run(tmp_path / "mcm", "resnet18", hwmodel="mcm", budget=10)
    out = egrl_train_in_process(*args, f"screen.init_from={other}", cwd=tmp_path)
    assert out.returncode == 2 and "that run's hwmodel is" in out.stderr
    swept = egrl_train_in_process(
        "-m", *args, f"screen.init_from={other}", "seed=0,1", cwd=tmp_path
    )
    assert swept.returncode == 2 and "that run's hwmodel is" in swept.stderr
    assert not (tmp_path / "multirun").exists()
    assert_refused(
        egrl_train_in_process(*args, "screen.prior=bogus", cwd=tmp_path),
        "screen.prior=bogus is invalid: expected one of nnpi or null",
    )


def test_an_earlier_chip_run_is_read_without_its_chip(tmp_path):
    """The earlier run's chip is not asked anything: its command may be gone."""
    chip = [sys.executable, CHIP]
    env = make_env("external", "resnet18", command=chip, deterministic=True)
    cfg = {"seed": 0, "budget": 12, "progress": False, "agent": {"name": "random"}}
    agent = make_agent(env, train_config(cfg), run_dir=tmp_path / "run")
    agent.run()
    agent.save_checkpoint()
    gone = [sys.executable, str(tmp_path / "removed-checkout" / "external_chip.py")]
    params = {"command": gone, "deterministic": True}
    config = {**cfg, "hwmodel": {"name": "external", "params": params}}
    RunDir(tmp_path / "run").write_config({**config, "workload": {"name": "resnet18"}})
    measured = load_measured(tmp_path / "run")
    assert len(measured) == 12 and measured.domain.num_units == env.num_units
    assert measured.domain.graph.x.shape == env.graph.x.shape


def test_runs_read_differently_measured_the_same_chip():
    """How a chip is read (timeout, retries, repeats, deterministic) does not make it
    another chip; its command does."""
    mine = {"hwmodel": {"name": "external", "params": {"command": "chip", "timeout_s": 60}}}
    read_otherwise = {"timeout_s": 5, "retries": 0, "deterministic": "auto", "repeats": 3}
    theirs = {"hwmodel": {"name": "external", "params": {"command": "chip", **read_otherwise}}}
    assert foreign_problem(Path("run"), theirs, mine) is None
    other = {"hwmodel": {"name": "external", "params": {"command": "other-chip"}}}
    assert "that run's hwmodel is" in foreign_problem(Path("run"), other, mine)


@pytest.mark.slow
def test_an_external_chip_screens_with_the_nnpi_prior(tmp_path):
    chip = f"[{sys.executable},{CHIP},--shared-bandwidth]"
    out = egrl_train(
        "hwmodel=external",
        f"hwmodel.params.command={chip}",
        "workload=resnet18",
        "agent=random",
        "agent.batch=8",
        "budget=32",
        "screen=forest",
        "screen.warmup=8",
        "screen.prior=nnpi",
        "progress=false",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = RunDir(tmp_path / "run").read_metrics_rows()
    assert int(rows[-1]["iterations"]) == 32
    assert any(np.isfinite(float(r["screen_spearman"])) for r in rows)


def test_a_chip_data_file_teaches_a_screen_as_its_runs_do(tmp_path):
    """egrl-chip-data writes the runs' measurements to one file; a run that names it in
    screen.init_from makes the same choices as one that names the runs."""
    from egrl.cli.chip_data import main as chip_data

    runs = [earlier_run(tmp_path / w, w, budget=30) for w in ("resnet18", "resnet34")]
    out = tmp_path / "chip.npz"
    assert chip_data(["--out", str(out), *map(str, runs)]) == 0
    rows = {}
    for name, init_from in (("runs", [str(r) for r in runs]), ("file", [str(out)])):
        screen = {"name": "forest", "warmup": 0, "trees": 8, "init_from": init_from}
        agent = {"name": "random", "batch": 10}
        cfg = train_config({"budget": 30, "progress": False, "agent": agent, "screen": screen})
        run = make_agent(make_env("nnpi", "resnet50"), cfg)
        assert [m.domain.name for m in run.ledger.screen.earlier] == ["resnet18", "resnet34"]
        run.run()
        rows[name] = [(r["iterations"], r["best_reward"], r["screen_spearman"]) for r in run.rows]
    assert rows["file"] == rows["runs"]


def test_bad_chip_data_is_named_in_one_line(tmp_path, capsys):
    from egrl.cli.checks import earlier_run_problems
    from egrl.cli.chip_data import main as chip_data

    nnpi = earlier_run(tmp_path / "nnpi", "resnet18", budget=10)
    mcm = earlier_run(tmp_path / "mcm", "resnet18", hwmodel="mcm", budget=10)
    assert chip_data(["--out", str(tmp_path / "mixed.npz"), str(nnpi), str(mcm)]) == 2
    assert "that run's hwmodel is" in capsys.readouterr().err
    assert not (tmp_path / "mixed.npz").exists()
    assert chip_data(["--out", str(tmp_path / "chip.txt"), str(nnpi)]) == 2
    assert "expected a .npz file" in capsys.readouterr().err
    bogus = tmp_path / "bogus.npz"
    bogus.write_text("not a file of maps")
    task = {"hwmodel": {"name": "nnpi", "params": {}}, "screen": {"init_from": [str(bogus)]}}
    (line,) = earlier_run_problems(task)
    assert line.startswith(f"screen.init_from={bogus} is invalid: not a chip data file")
    assert chip_data(["--out", str(tmp_path / "chip.npz"), str(mcm)]) == 0
    (line,) = earlier_run_problems({**task, "screen": {"init_from": [str(tmp_path / "chip.npz")]}})
    assert "that run's hwmodel is {'name': 'mcm'" in line
