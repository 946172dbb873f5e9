"""The exact CP-SAT optimum of the multi-chip model against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.mcm import MCM
from hwmodels.mcm.constraints import check
from hwmodels.mcm.cost import latency_ps
from tests.mcm_workloads import all_partitions, contiguous_partitions, figure2
from tests.nnpi_workloads import random_dag


def bind(workload, sram_bytes: int, num_chips: int = 3):
    hw = MCM(num_chips=num_chips, sram_mib=sram_bytes / 2**20, link_gbps=1000, peak_tops=1)
    return hw.bind(workload)


@pytest.mark.parametrize("seed", range(5))
def test_optimum_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    w = random_dag(7, rng)
    # the least SRAM with which some contiguous split with neighbour-only transfers fits
    flow = bind(w, sram_bytes=2**30).flow
    splits = contiguous_partitions(7, 3)
    span = splits[:, flow.dst] - splits[:, flow.src]
    fits = check(flow, splits).memory.max(axis=1)[(span <= 1).all(axis=1)].min()
    target = bind(w, sram_bytes=int(fits))
    parts = all_partitions(7, 3)
    ok = check(target.flow, parts).ok
    best = latency_ps(target.flow, parts)[ok].min()
    result = target.optimum(time_limit_s=20, workers=1)
    assert result.proven and result.gap == 0.0
    assert result.info["latency_ps"] == best
    assert result.latency_s == pytest.approx(best / 1e12)
    assert result.mapping.shape == (7, 1) and target.violations(result.mapping[None]).ok[0]
    native = target.latency_ps(target.native_mapping()[None])[0]
    assert best <= native
    assert (~ok & check(target.flow, parts).static_ok).any()  # memory cuts some off


def test_optimum_on_figure2_beats_or_ties_every_contiguous_split():
    target = bind(figure2(), sram_bytes=1000)
    result = target.optimum(time_limit_s=20, workers=1)
    parts = all_partitions(5, 3)
    ok = check(target.flow, parts).ok
    assert result.info["latency_ps"] == latency_ps(target.flow, parts)[ok].min()
