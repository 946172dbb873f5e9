"""The prior: a chip's datasheet as the NNP-I model, solved (hwmodels/nnpi/prior.py,
``Env.has_prior`` and ``Env.prior_solution``), with its options checked against brute force."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import egrl
import hwmodels
from egrl.screening.earlier import make_prior
from hwmodels.external import ExternalModel
from hwmodels.nnpi import NNPI
from hwmodels.nnpi.params import FS_PER_S
from hwmodels.nnpi.prior import own_prior
from tests.nnpi_workloads import random_dag
from tests.support.chips import CHIP, CHIP_ARGS, tiny_workload
from tests.support.command_line import egrl_train_in_process
from tests.support.paths import PY, ROOT

#: a datasheet of the example chip with the capacities of CHIP_ARGS
SHEET = {"name": "nnpi", "sram_mib": 1 / 1024, "llc_mib": 8 / 1024}


def small_nnpi():
    """NNP-I on a 5-node DAG whose capacities bind: 3^10 maps, few enough to enumerate."""
    workload = random_dag(5, np.random.default_rng(3), max_bytes=4096)
    return NNPI(llc_mib=6000 / 2**20, sram_mib=2500 / 2**20).bind(workload)


def every_map(target) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every map ``[M, N, 2]`` of ``target``, whether the compiler accepts it, its latency (s)."""
    n = target.num_units
    maps = np.array(list(itertools.product(range(3), repeat=2 * n))).reshape(-1, n, 2)
    m = target.measure(maps)
    return maps, m.valid, target.latency_fs(maps) / FS_PER_S


def units_apart(maps: np.ndarray, center: np.ndarray) -> np.ndarray:
    """int ``[M]``: units (rows) where ``maps`` ``[M, N, H]`` differ from ``center`` ``[N, H]``."""
    return (maps != center[None]).any(axis=2).sum(axis=1)


@pytest.fixture(scope="module")
def brute():
    target = small_nnpi()
    return target, *every_map(target)


def test_the_plain_solve_is_the_brute_force_optimum(brute):
    target, maps, valid, latency = brute
    best = target.prior_solution(time_limit_s=30)
    assert best.status == "optimal" and best.proven and not best.fell_back
    assert best.latency_s == pytest.approx(latency[valid].min(), rel=1e-12)
    assert target.measure(best.mapping[None]).valid[0]


def test_a_solve_in_a_trust_region_stays_in_it_and_is_its_best(brute):
    target, maps, valid, latency = brute
    centre = target.initial_mapping()  # all DRAM: the optimum is far from it
    unrestricted = target.prior_solution(time_limit_s=30)
    assert units_apart(unrestricted.mapping[None], centre)[0] > 1
    best = target.prior_solution(time_limit_s=30, trust_maps=centre[None], trust_radius=1)
    assert units_apart(best.mapping[None], centre)[0] <= 1
    inside = valid & (units_apart(maps, centre) <= 1)
    assert best.proven and best.latency_s == pytest.approx(latency[inside].min(), rel=1e-12)
    assert best.latency_s > unrestricted.latency_s


def test_an_excluded_map_is_not_returned(brute):
    target, maps, valid, latency = brute
    first = target.prior_solution(time_limit_s=30)
    second = target.prior_solution(time_limit_s=30, exclude=first.mapping[None])
    assert not np.array_equal(second.mapping, first.mapping)
    others = valid & (units_apart(maps, first.mapping) > 0)
    assert second.proven and second.latency_s == pytest.approx(latency[others].min(), rel=1e-12)


def test_extra_costs_flip_a_choice(brute):
    target = brute[0]
    first = target.prior_solution(time_limit_s=30)
    unit = int(np.flatnonzero(first.mapping[:, 0] > 0)[0])  # a weight on chip
    extra = np.zeros((target.num_units, 2, 3))
    extra[unit, 0, first.mapping[unit, 0]] = 1.0  # one second: never worth it
    flipped = target.prior_solution(time_limit_s=30, extra_cost_s=extra)
    assert flipped.mapping[unit, 0] != first.mapping[unit, 0]
    assert flipped.latency_s >= first.latency_s  # latency alone, without the extra cost


def test_an_impossible_trust_region_falls_back_to_the_compilers_map(brute, caplog):
    target = brute[0]
    native = target.native_mapping()
    with caplog.at_level("WARNING", logger="hwmodels.nnpi.prior"):
        got = target.prior_solution(
            time_limit_s=10, trust_maps=native[None], trust_radius=0, exclude=native[None]
        )
    assert got.fell_back and got.status == "infeasible" and not got.proven
    assert np.array_equal(got.mapping, native)
    assert "the chip compiler's map stands in" in caplog.text


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"extra_cost_s": np.zeros((2, 2, 3))}, "extra_cost_s must have shape"),
        ({"extra_cost_s": np.full((5, 2, 3), np.inf)}, "extra_cost_s must be finite"),
        ({"extra_cost_s": np.full((5, 2, 3), 1e6)}, "whole femtoseconds"),
        ({"trust_maps": np.zeros((1, 5, 2), np.int64)}, "go together"),
        ({"trust_maps": np.zeros((1, 5, 2), np.int64), "trust_radius": -1}, ">= 0"),
        ({"exclude": np.full((1, 5, 2), 3)}, "out of range"),
    ],
)
def test_bad_options_are_named(brute, options, problem):
    with pytest.raises(ValueError, match=problem):
        own_prior(brute[0]).solve(brute[0].native_mapping(), 5, **options)


# ------------------------------------------------------------------ an external chip
def chip(heads=None, prior=SHEET) -> ExternalModel:
    return ExternalModel([PY, CHIP, *CHIP_ARGS], heads=heads, prior=prior)


def test_an_external_chips_datasheet_is_solved_in_its_own_choices():
    heads = {"activation": ["SRAM", "DRAM"], "weight": ["DRAM", "LLC", "SRAM"]}
    baseline = {"protocol": "egrl-external/1", "mapping": [[1, 0]] * 4}  # all DRAM
    answer = "import os, sys; sys.stdin.read(); print(os.environ['ANSWER'])"
    model = ExternalModel(
        [PY, "-c", answer], heads=heads, prior=SHEET, env={"ANSWER": json.dumps(baseline)}
    )
    target = model.bind(tiny_workload())
    got = target.prior_solution(time_limit_s=20)
    assert got.status == "optimal" and got.proven and got.mapping.shape == (4, 2)
    # the NNP-I model with the same figures, restricted to the levels the heads offer
    nnpi = NNPI(sram_mib=SHEET["sram_mib"], llc_mib=SHEET["llc_mib"]).bind(tiny_workload())
    maps, valid, latency = every_map(nnpi)
    offered = valid & (maps[:, :, 1] != 1).all(axis=1)  # activations never on LLC
    as_nnpi = target.prior.nnpi_maps(got.mapping[None])[0]
    assert got.latency_s == pytest.approx(latency[offered].min(), rel=1e-12)
    assert got.latency_s == pytest.approx(nnpi.latency_fs(as_nnpi[None])[0] / FS_PER_S)
    assert nnpi.measure(as_nnpi[None]).valid[0]
    levels = {"SRAM": 2, "DRAM": 0, "LLC": 1}
    for unit in range(4):  # the answer is in the chip's own choices
        assert levels[heads["activation"][got.mapping[unit, 0]]] == as_nnpi[unit, 1]
        assert levels[heads["weight"][got.mapping[unit, 1]]] == as_nnpi[unit, 0]


@pytest.mark.parametrize("target", ["external", "nnpi"])
def test_a_targets_prior_is_solved_to_a_deterministic_limit_unless_told_otherwise(
    target, monkeypatch
):
    """A quarter of the wall limit in CP-SAT's deterministic seconds, the workers
    interleaved (hwmodels.nnpi.optimum), so that a study's read of the prior and a run's
    start are one map; an explicit ``deterministic_s`` is kept."""
    from hwmodels.nnpi.prior import NNPIPrior

    asked = []
    original = NNPIPrior.solve

    def spy(self, base, *args, **kwargs):
        asked.append(kwargs.get("deterministic_s"))
        return original(self, base, *args, **kwargs)

    monkeypatch.setattr(NNPIPrior, "solve", spy)
    bound = chip().bind(tiny_workload()) if target == "external" else NNPI().bind(tiny_workload())
    first = bound.prior_solution(time_limit_s=20)
    again = bound.prior_solution(time_limit_s=20, deterministic_s=2.0)
    assert asked == [5.0, 2.0]
    np.testing.assert_array_equal(first.mapping, again.mapping)


def test_the_example_chip_accepts_its_solved_datasheet_and_env_caches_it():
    env = egrl.make_env(chip(), tiny_workload())
    assert env.has_prior
    got = env.prior_solution(time_limit_s=20)
    assert got is env.prior_solution(time_limit_s=20)
    assert env.evaluate(got.mapping).valid[0]
    assert got.latency_s <= env.target.prior.latency_s(env.baseline_mapping[None])[0]


def test_no_prior_on_a_chip_without_a_datasheet_or_on_tpu_cmem():
    env = egrl.make_env(chip(prior=None), tiny_workload())
    assert not env.has_prior
    with pytest.raises(ValueError, match=r"hwmodel\.params\.prior"):
        env.prior_solution()
    tpu = hwmodels.make("tpu-cmem", cmem_mib=8 / 1024).bind(
        random_dag(8, np.random.default_rng(11))
    )
    assert not tpu.has_prior


@pytest.mark.parametrize(
    "prior, heads, problem",
    [
        ({"name": "roofline"}, None, r"prior\.name='roofline' is unknown"),
        ({"name": "nnpi", "sram_kib": 2}, None, r"prior\.sram_kib is no NNP-I parameter"),
        ({"name": "nnpi", "sram_mib": 0}, None, r"prior\.sram_mib=0 must be a positive number"),
        ({"name": "nnpi", "peak_tops": "fast"}, None, r"prior\.peak_tops='fast' must be"),
        ({"name": "nnpi"}, {"weight": ["DRAM", "HBM"], "activation": ["DRAM"]}, "none of them"),
        ({"name": "nnpi"}, {"layout": ["a", "b"]}, "needs the heads 'weight' and 'activation'"),
        ({"name": "nnpi"}, {"weight": ["SRAM"], "activation": ["DRAM"]}, "must both offer DRAM"),
        ("nnpi", None, "must be a mapping"),
    ],
)
def test_a_bad_datasheet_is_refused_when_the_model_is_built(prior, heads, problem):
    with pytest.raises(ValueError, match=problem):
        chip(heads, prior)


def test_a_workload_that_does_not_fit_the_datasheet_is_refused_at_bind():
    with pytest.raises(ValueError, match=r"hwmodel\.params\.prior does not fit 'tiny'"):
        chip(prior={"name": "nnpi", "dram_gib": 1e-9}).bind(tiny_workload())


def test_screen_prior_nnpi_reads_the_datasheets_figures():
    target = chip().bind(tiny_workload())
    assert make_prior("nnpi", target).target.params.sram_mib == SHEET["sram_mib"]
    plain = chip(prior=None).bind(tiny_workload())
    assert make_prior("nnpi", plain).target.params.sram_mib == 4.0  # NNP-I's defaults


def test_the_command_line_refuses_a_bad_datasheet_in_one_line(tmp_path):
    out = egrl_train_in_process(
        "hwmodel=external",
        f"hwmodel.params.command='{PY} {CHIP}'",
        "hwmodel.params.prior={name: nnpi, sram_mib: -2}",
        "workload=resnet18",
        "agent=ea",
        "budget=4",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=ROOT,
    )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if "prior" in line]
    assert len(lines) == 1 and "hwmodel.params.prior.sram_mib=-2 must be a positive" in lines[0]
    assert not (tmp_path / "run").exists()
