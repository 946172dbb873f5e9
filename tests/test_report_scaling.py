"""Report figures that scale: 36 chips of mcm, thousands of units, titles that fit."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from omegaconf import OmegaConf

from egrl import make_env
from egrl.agents import SearchAgent, train_config
from egrl.cli.report import main as egrl_report
from egrl.report import load_artifacts, run_transitions
from egrl.report.layout import (
    CELL_TEXT_MAX,
    MAX_TICKS,
    choice_colours,
    fit_title,
    legend_columns,
    matrix_layout,
    strip_layout,
)
from egrl.report.runs import RunArtifacts
from egrl.report.transitions import plot_maps, plot_transitions
from tests.nnpi_workloads import random_dag


# ---------------------------------------------------------------- layouts
def test_few_choices_keep_the_papers_layout():
    counts = np.array([[5, 1, 0], [0, 3, 2], [0, 0, 0]])
    lay = matrix_layout(counts)
    assert lay.cell_text and not lay.scaled and lay.tick_step == 1
    assert lay.shown.tolist() == [0, 1, 2] and lay.hidden == 0  # unused rows stay


def test_many_choices_get_the_scaled_layout():
    counts = np.zeros((36, 36), dtype=np.int64)
    counts[np.arange(20), np.arange(20)] = 3
    counts[4, 25] = 1  # the best map moved a decision to chip 25
    lay = matrix_layout(counts)
    assert lay.scaled and not lay.cell_text
    assert lay.shown.tolist() == [*range(20), 25] and lay.hidden == 15
    pos, labels = lay.ticks([f"chip{i}" for i in range(36)])
    assert len(labels) <= MAX_TICKS and labels[0] == "chip0" and lay.tick_step == 2
    assert lay.side_in <= 10.0
    assert matrix_layout(np.ones((CELL_TEXT_MAX, CELL_TEXT_MAX))).cell_text


def test_colours_separate_neighbouring_choices():
    rgb = choice_colours(36)(np.arange(36))[:, :3]
    neighbours = np.linalg.norm(np.diff(rgb, axis=0), axis=1)
    assert neighbours.min() > 0.3
    assert len({tuple(np.round(c, 3)) for c in rgb}) == 36
    levels = choice_colours(3)(np.arange(3))[:, :3]  # NNP-I: slow dark .. fast light
    luminance = levels @ np.array([0.2126, 0.7152, 0.0722])
    assert np.all(np.diff(luminance) > 0)


def test_long_maps_are_paged_into_rows():
    assert strip_layout(56).pages == [(0, 56)] and not strip_layout(56).paged
    five = strip_layout(5000)
    assert five.pages == [(0, 1000), (1000, 2000), (2000, 3000), (3000, 4000), (4000, 5000)]
    assert five.width_in <= 22.0
    many = strip_layout(20000)
    assert len(many.pages) == 8 and many.pages[-1] == (17500, 20000)


def test_titles_and_legends_fit():
    title = "a/very/long/path/to/my_workload_with_a_long_name / egrl / seed 0: " * 3
    lines = fit_title(title, 4.2, 11).splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= int(4.2 * 72 / (0.65 * 11))
    assert legend_columns(3, 1.25) == 1 and legend_columns(21, 1.25) == 3


# ---------------------------------------------------------------- a small mcm run
class BoundaryAgent(SearchAgent):
    """Moves units across the chip boundaries of the compiler's map (valid on mcm)."""

    def step(self) -> dict:
        n = min(16, self.ledger.remaining)
        base = self.env.baseline_mapping
        kids = np.repeat(base[None], n, axis=0)
        boundaries = np.flatnonzero(base[:-1, 0] != base[1:, 0])  # unit i + 1 starts a chip
        for kid in kids:
            for i in self.rng.choice(boundaries, size=2, replace=False):
                kid[i + 1, 0] = kid[i, 0]  # it joins the chip before
        self.ledger.evaluate(kids, "boundary")
        return {}


@pytest.fixture(scope="module")
def mcm_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("mcm") / "run"
    run_dir.mkdir()
    cfg = {
        "agent": {"name": "boundary"},
        "hwmodel": {"name": "mcm", "params": {}},
        "workload": {"name": "resnet18"},
        "seed": 0,
        "budget": 64,
        "invalid_reward_scale": 1.0,
        "progress": False,
    }
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)), "utf-8")
    env = make_env("mcm", "resnet18")
    train_cfg = train_config({k: v for k, v in cfg.items() if k not in ("hwmodel", "workload")})
    BoundaryAgent(env, train_cfg, run_dir).run()
    return run_dir


def test_report_of_an_mcm_run_chooses_the_scaled_layout(mcm_run, tmp_path, capsys):
    run = load_artifacts(mcm_run)
    assert len(run.env.heads["chip"]) == 36 and run.best_mapping is not None
    assert (run.best_mapping != run.compiler_mapping).any()
    (counts,) = run_transitions(run)
    lay = matrix_layout(counts)
    assert lay.scaled and len(lay.shown) < 36 and lay.tick_step >= 1

    out = tmp_path / "report"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "constrained_layout not applied"
        assert egrl_report([str(mcm_run), "--no-umap", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("transitions", "maps"):
        image = mpimg.imread(out / f"{name}.png")
        assert f"{name}: {out / name}.png" in printed
        assert image.shape[0] < 1200 and image.shape[1] < 2500, (name, image.shape)


def test_maps_of_thousands_of_units_are_paged(tmp_path):
    workload = random_dag(2500, np.random.default_rng(0), max_bytes=300_000)
    env = make_env("nnpi", workload)
    best = env.baseline_mapping.copy()
    best[::7, 1] = 0  # some activations to DRAM
    m = np.stack([env.baseline_mapping, best])
    run = RunArtifacts(
        run_dir=tmp_path,
        config={"agent": {"name": "hand"}, "seed": 0},
        env=env,
        checkpoint=tmp_path,
        maps=m,
        iteration=np.arange(2),
        source=np.zeros(2, dtype=np.int64),
        source_names=["hand"],
        stored_reward=np.zeros(2, dtype=np.float32),
        reward=np.zeros(2),
        speedup=np.ones(2),
        valid=np.ones(2, dtype=bool),
        best_mapping=best,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        maps = plot_maps(run, tmp_path / "maps.png")
        transitions = plot_transitions(run, tmp_path / "transitions.png")
    height, width = mpimg.imread(maps).shape[:2]
    rows = 2 * len(strip_layout(2500).pages)  # two heads x three rows of units
    assert rows == 6 and width <= 22 * 110 and height >= 1.25 * rows * 110
    assert mpimg.imread(transitions).shape[0] < 1000
