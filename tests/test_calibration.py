"""Calibrating a chip's NNP-I prior to its readings (hwmodels/nnpi/calibrate.py): on a
chip whose physics is the NNP-I model with other figures, the fit recovers them; one
reading leaves it near the datasheet; a saved calibration loads back, solves, and starts
a later prior (``hwmodel.params.prior={name: nnpi, calibration: PATH}``)."""

from __future__ import annotations

import numpy as np
import pytest

import workloads
from hwmodels.nnpi import NNPI, NNPIParams
from hwmodels.nnpi.calibrate import SLOW_STARTS, Calibration, _Fit, _Traffic, calibrate
from hwmodels.nnpi.figures import ChipFigures
from hwmodels.nnpi.prior import check_prior, nnpi_prior, own_prior

HEADS = {"weight": ["DRAM", "LLC", "SRAM"], "activation": ["DRAM", "LLC", "SRAM"]}
#: the datasheet (the study chips' figures) and the chip it misdescribes
SHEET = {"sram_mib": 2.0, "peak_tops": 100.0}
TRUE = {"sram_mib": 2.0, "dram_gbps": 40.0, "llc_gbps": 900.0, "peak_tops": 70.0}


@pytest.fixture(scope="module")
def workload():
    return workloads.load("resnet18")


@pytest.fixture(scope="module")
def sheet(workload):
    return NNPI(**SHEET).bind(workload)


def readings(chip, count: int, seed: int = 0):
    """``count`` random maps as ``chip``'s compiler places them, and their latencies."""
    rng = np.random.default_rng(seed)
    maps = rng.integers(0, 3, size=(count, chip.num_units, 2))
    placed, _ = chip.rectify(maps)
    return placed, chip.latency_fs(placed) / 1e15


def conv_rate(figures: ChipFigures) -> float:
    """Tera-operations per second a conv node runs at."""
    return figures.params.peak_tops * figures.efficiency.get("conv", 1.0)


def test_recovers_the_figures_of_a_roofline_chip(workload, sheet):
    chip = NNPI(**TRUE).bind(workload)
    maps, latency = readings(chip, 160)
    cal = calibrate(own_prior(sheet), maps, latency)
    got = cal.figures.params
    assert got.dram_gbps == pytest.approx(40.0, rel=0.05)
    assert got.llc_gbps == pytest.approx(900.0, rel=0.05)
    assert conv_rate(cal.figures) == pytest.approx(70.0, rel=0.05)
    assert cal.start_spread > 0.2 and cal.spread < 0.01
    assert cal.readings == 160


def test_recovers_a_set_up_time_and_an_efficiency(workload, sheet):
    truth = ChipFigures(NNPIParams(**TRUE), (0.2e-6, 0.0, 0.0), {"conv": 0.6})
    chip = truth.bind(workload)
    maps, latency = readings(chip, 160, seed=1)
    cal = calibrate(own_prior(sheet), maps, latency)
    assert cal.figures.params.dram_gbps == pytest.approx(40.0, rel=0.05)
    assert cal.figures.setup_s[0] == pytest.approx(0.2e-6, rel=0.2)
    assert conv_rate(cal.figures) == pytest.approx(42.0, rel=0.05)
    assert cal.spread < 0.01


def test_one_reading_stays_near_the_datasheet(workload, sheet):
    chip = NNPI(**TRUE).bind(workload)
    maps, latency = readings(chip, 1)
    got = calibrate(own_prior(sheet), maps, latency).figures.params
    wrong = abs(np.log(67.2 / 40.0))
    assert abs(np.log(got.dram_gbps / 67.2)) < 0.5 * wrong
    for name in ("llc_gbps", "sram_gbps", "peak_tops"):
        start = getattr(NNPIParams(**SHEET), name)
        assert abs(np.log(getattr(got, name) / start)) < 0.3, name


def test_the_fit_model_is_the_target_cost_model(workload):
    """The least squares' latency is the calibrated target's (set-up, efficiency and bank
    conflicts in)."""
    figures = ChipFigures(
        NNPIParams(**TRUE), (0.1e-6, 0.02e-6, 0.01e-6), {"conv": 0.5}, (0.0, 0.3, 0.8)
    )
    target = figures.bind(workload)
    maps = np.random.default_rng(2).integers(0, 3, size=(8, target.num_units, 2))
    fit = _Fit(_Traffic.of(workload, maps), figures, 1e-7)
    model, _ = fit.latency(fit.vector(figures))
    np.testing.assert_allclose(model, target.latency_fs(maps), rtol=1e-6)
    back = fit.figures(fit.vector(figures))
    assert back.params == figures.params and back.efficiency["conv"] == pytest.approx(0.5)
    assert back.conflict == pytest.approx(figures.conflict)
    # any figures (a warm start) are a vector of this fit, and back
    other = ChipFigures(NNPIParams(**SHEET), (0.2e-6, 0.0, 0.05e-6), {"conv": 0.8}, (0.0, 1.5, 0.1))
    again = fit.figures(fit.vector(other))
    for name in ("dram_gbps", "llc_gbps", "sram_gbps", "peak_tops"):
        assert getattr(again.params, name) == pytest.approx(getattr(other.params, name))
    assert again.setup_s == pytest.approx(other.setup_s)
    assert again.conflict == pytest.approx(other.conflict)
    assert again.efficiency["conv"] == pytest.approx(0.8)


def test_fits_a_bank_conflict_and_its_solve_finds_the_chips_optimum(workload):
    """An SRAM whose banks a node's transfers share, under a datasheet that knows its
    bandwidth but not the conflicts: the fit gives SRAM a conflict factor (pulled
    towards the datasheet's 0 it stays below the truth's 0.6), and the calibrated prior's
    optimum is the chip's, where the datasheet's own optimum is 8% slower."""
    sheet = NNPI(**SHEET, sram_gbps=680.0).bind(workload)
    params = NNPIParams(**{**TRUE, "sram_gbps": 680.0})
    chip = ChipFigures(params, conflict=(0.0, 0.0, 0.6)).bind(workload)
    maps, latency = readings(chip, 160, seed=3)
    cal = calibrate(own_prior(sheet), maps, latency)
    assert 0.15 < cal.figures.conflict[2] <= 0.6 and cal.figures.conflict[1] < 0.01
    assert cal.spread < 0.1 * cal.start_spread
    best = chip.optimum(time_limit_s=30).info["latency_fs"]
    native = sheet.native_mapping()
    calibrated = cal.prior(sheet).solve(native, time_limit_s=30).mapping
    datasheet = own_prior(sheet).solve(native, time_limit_s=30).mapping
    assert chip.latency_fs(calibrated[None])[0] <= 1.001 * best
    assert chip.latency_fs(datasheet[None])[0] > 1.03 * best


def test_a_poor_fit_starts_again_and_a_warm_start_keeps_a_good_one(workload):
    """A fit that ends above ``restart_spread`` also starts from the slow-level points and
    keeps the least cost, so it is never worse than the single start; a later fit that
    also starts from its figures (``warm``) keeps them."""
    sheet = NNPI(**SHEET, sram_gbps=680.0).bind(workload)
    params = NNPIParams(**{**TRUE, "sram_gbps": 680.0})
    chip = ChipFigures(params, conflict=(0.0, 0.0, 0.6)).bind(workload)
    maps, latency = readings(chip, 60, seed=5)
    once = calibrate(own_prior(sheet), maps, latency, restart_spread=np.inf)
    again = calibrate(own_prior(sheet), maps, latency, restart_spread=0.0)
    assert once.starts == 1 and again.starts == 1 + 2 * len(SLOW_STARTS)
    assert again.spread <= once.spread * (1 + 1e-6)
    warm = calibrate(own_prior(sheet), maps, latency, warm=again.figures, restart_spread=np.inf)
    assert warm.starts == 2 and warm.spread <= again.spread * (1 + 1e-6)
    assert warm.figures.conflict[2] == pytest.approx(again.figures.conflict[2], rel=0.05)
    with pytest.raises(ValueError, match="restart_spread"):
        calibrate(own_prior(sheet), maps, latency, restart_spread=-1.0)
    with pytest.raises(ValueError, match="slow_starts"):
        calibrate(own_prior(sheet), maps, latency, slow_starts=(0.0,))


def test_saved_calibration_loads_back_solves_and_starts_a_prior(workload, sheet, tmp_path):
    truth = ChipFigures(NNPIParams(**TRUE), (0.1e-6, 0.0, 0.0), {"conv": 0.8})
    chip = truth.bind(workload)
    maps, latency = readings(chip, 60)
    cal = calibrate(own_prior(sheet), maps, latency)
    path = cal.save(tmp_path / "calibration.json")
    loaded = Calibration.load(path)
    assert loaded == cal
    prior = loaded.prior(sheet)
    assert prior.latency_s(maps[:4]) == pytest.approx(cal.prior(sheet).latency_s(maps[:4]))
    native = sheet.native_mapping()
    best = prior.solve(native, time_limit_s=30)
    assert best.status in ("optimal", "feasible") and not best.fell_back
    assert best.latency_s <= prior.latency_s(native[None])[0] + 1e-12
    # a later run's datasheet: {name: nnpi, calibration: PATH}
    config = loaded.prior_config(path)
    checked = check_prior(config, HEADS)
    again = nnpi_prior(sheet, **checked)
    np.testing.assert_allclose(again.latency_s(maps[:4]), prior.latency_s(maps[:4]))
    started = calibrate(again, maps[:1], latency[:1])
    assert started.start == cal.figures


def test_bad_input_is_refused_naming_the_problem(sheet, tmp_path):
    prior = own_prior(sheet)
    maps = np.zeros((2, sheet.num_units, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="one latency per map"):
        calibrate(prior, maps, [1e-4])
    with pytest.raises(ValueError, match="positive and finite"):
        calibrate(prior, maps, [1e-4, float("nan")])
    with pytest.raises(ValueError, match="prior_weight"):
        calibrate(prior, maps, [1e-4, 1e-4], prior_weight=-1)
    with pytest.raises(ValueError, match="calibration is invalid: cannot read"):
        check_prior({"name": "nnpi", "calibration": str(tmp_path / "none.json")}, HEADS)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="is no calibration"):
        check_prior({"name": "nnpi", "calibration": str(bad)}, HEADS)
    with pytest.raises(ValueError, match="sram_mib cannot go with"):
        check_prior({"name": "nnpi", "calibration": str(bad), "sram_mib": 2}, HEADS)


@pytest.mark.slow
def test_a_chip_calibrated_on_one_workload_starts_another(tmp_path):
    """The example chip (no effects, its study figures) read on ResNet-18, calibrated,
    saved; ResNet-34's run on the same chip starts from the file and solves it."""
    from egrl import make_env
    from tests.support.chips import CHIP
    from tests.support.paths import PY

    command = [PY, CHIP, "--sram-kib", "2048", "--tmacs", "35", "--dram-gbps", "40"]
    env = make_env("external", "resnet18", command=command, prior={"name": "nnpi", **SHEET})
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 3, size=(40, env.target.num_units, 2))
    m = env.measure(env.target.check(maps).rectified)  # as the chip's compiler places them
    ran = np.isfinite(m.latency_s)
    assert ran.all()
    cal = calibrate(env.target.prior, m.rectified[ran], m.latency_s[ran])
    assert cal.figures.params.dram_gbps == pytest.approx(40.0, rel=0.05)
    assert conv_rate(cal.figures) == pytest.approx(70.0, rel=0.05)
    path = cal.save(tmp_path / "chip.json")
    other = make_env("external", "resnet34", command=command, prior=cal.prior_config(path))
    assert other.target.prior.figures == cal.figures
    best = other.prior_solution(30.0)
    assert not best.fell_back and bool(other.evaluate(best.mapping).valid[0])
