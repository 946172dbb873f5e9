"""Target.describe: cheap descriptions of maps, read without measuring them.

Exact properties only (shapes, names, sums against the workload, brute-force loops, a
batch against its rows, agreement with the measurement where the map needs no repair);
how well the features rank maps is measured by ``benchmarks/describe_usefulness.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.external import ExternalModel, nnpi_prior
from hwmodels.mcm import MCM
from hwmodels.mcm.constraints import check
from hwmodels.nnpi import LEVELS, NNPI
from hwmodels.nnpi.params import DRAM, FS_PER_S
from tests.mcm_workloads import figure2
from tests.nnpi_workloads import random_dag
from tests.support.chips import MODELS, contract_workload


def random_maps(target, batch: int, seed: int = 0) -> np.ndarray:
    """int64 ``[batch, N, H]``: uniform random choices of every head."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, target.num_choices, size=(batch, target.num_units, len(target.heads)))


# ------------------------------------------------------------------ the contract
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_describes_a_batch(name):
    target = MODELS[name]().bind(contract_workload())
    names = target.description_names
    assert all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
    maps = random_maps(target, 6)
    d = target.describe(maps)
    assert d.dtype == np.float64 and d.shape == (6, len(names)) and np.isfinite(d).all()
    assert target.describe(maps[:0]).shape == (0, len(names))


# ------------------------------------------------------------------------ NNP-I
def nnpi_target():
    """A random DAG on a chip whose LLC and SRAM hold a few of its tensors."""
    wl = random_dag(12, np.random.default_rng(3), max_bytes=4096)
    return NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20).bind(wl)


def column(target, d: np.ndarray, name: str) -> np.ndarray:
    return d[:, target.description_names.index(name)]


def test_nnpi_names_and_bytes_per_level_sum_to_the_workload():
    t = nnpi_target()
    assert t.description_names[:3] == [f"weight_bytes_{lv}" for lv in LEVELS]
    assert t.description_names[-1] == "latency_s"
    maps = random_maps(t, 40)
    d = t.describe(maps)
    weights = d[:, :3].sum(axis=1)
    acts = d[:, 3:6].sum(axis=1)
    assert (weights == t.workload.weight_bytes.sum()).all()
    assert (acts == t.workload.output_bytes.sum()).all()
    assert (weights + acts == t.tensors.total_bytes).all()
    for lv, name in enumerate(LEVELS):  # the bytes of the tensors placed there
        w = (maps[:, :, 0] == lv) * t.workload.weight_bytes
        assert (column(t, d, f"weight_bytes_{name}") == w.sum(axis=1)).all()


def test_nnpi_overflow_by_brute_force_and_zero_for_all_dram():
    t = nnpi_target()
    maps = np.concatenate([random_maps(t, 30, seed=1), t.initial_mapping()[None]])
    d = t.describe(maps)
    tensors = t.tensors
    for b, levels in enumerate(maps.reshape(len(maps), -1)):
        at_risk = []
        for lv, name in ((1, "LLC"), (2, "SRAM")):
            occ = [
                sum(
                    int(tensors.nbytes[k])
                    for k in range(len(levels))
                    if levels[k] == lv and tensors.start[k] <= s <= tensors.end[k]
                )
                for s in range(tensors.num_steps)
            ]
            over = [s for s in range(tensors.num_steps) if occ[s] > t.capacity[lv]]
            assert column(t, d, f"overflow_bytes_{name}")[b] == max(max(occ) - t.capacity[lv], 0)
            assert column(t, d, f"overflow_steps_{name}")[b] == len(over)
            at_risk += [
                k
                for k in range(len(levels))
                if levels[k] == lv
                and tensors.nbytes[k] > 0
                and any(tensors.start[k] <= s <= tensors.end[k] for s in over)
            ]
        assert column(t, d, "decisions_in_overflow")[b] == len(at_risk)
        assert column(t, d, "bytes_in_overflow")[b] == tensors.nbytes[at_risk].sum()
    dram = d[-1]
    assert (maps[-1] == DRAM).all()
    overflow = [n for n in t.description_names if "overflow" in n]
    assert all(column(t, dram[None], n)[0] == 0 for n in overflow)


def test_nnpi_no_overflow_exactly_when_the_compiler_keeps_the_map():
    t = nnpi_target()
    maps = np.concatenate(
        [random_maps(t, 60, seed=2), t.initial_mapping()[None], t.native_mapping()[None]]
    )
    d = t.describe(maps)
    m = t.measure(maps)
    overflow = column(t, d, "overflow_bytes_LLC") + column(t, d, "overflow_bytes_SRAM")
    assert m.valid.any() and not m.valid.all()
    assert ((overflow == 0) == m.valid).all()
    assert ((column(t, d, "decisions_in_overflow") == 0) == m.valid).all()
    # latency of the map as given: the measured latency where nothing is repaired
    assert np.array_equal(column(t, d, "latency_s")[m.valid], m.latency_s[m.valid])
    assert np.array_equal(column(t, d, "latency_s"), t.latency_fs(maps) / FS_PER_S)


def test_nnpi_batch_equals_rows_one_by_one():
    t = nnpi_target()
    maps = random_maps(t, 15, seed=4)
    d = t.describe(maps)
    assert np.array_equal(d, np.concatenate([t.describe(m[None]) for m in maps]))


# -------------------------------------------------------------------- multi-chip
def mcm_target(num_chips: int = 4, description: str = "proposed"):
    """A random DAG on chips whose SRAM holds 70% of it (some random maps overflow)."""
    wl = random_dag(10, np.random.default_rng(5), max_bytes=4096)
    total = int((wl.weight_bytes + wl.output_bytes + wl.graph_input_bytes).sum())
    return MCM(num_chips=num_chips, sram_mib=0.7 * total / 2**20, description=description).bind(wl)


def per_chip(target, d: np.ndarray, name: str) -> np.ndarray:
    """float64 ``[B, C]``: the columns ``<name>_chip<d>``."""
    idx = [target.description_names.index(f"{name}_chip{c}") for c in range(target.flow.num_chips)]
    return d[:, idx]


def brute_loads(flow, parts: np.ndarray) -> dict[str, np.ndarray]:
    """Per-chip loads of one partition ``[N]`` by loops over nodes and edges."""
    c = flow.num_chips
    compute, memory, link = np.zeros(c), np.zeros(c), np.zeros(c)
    for u in range(flow.num_nodes):
        compute[parts[u]] += flow.compute_ps[u]
        memory[parts[u]] += flow.resident_bytes[u]
        readers = {int(parts[v]) for s, v in zip(flow.src, flow.dst) if s == u}
        for chip in readers - {int(parts[u])}:
            memory[chip] += flow.out_bytes[u]  # one buffer per receiving chip
        far = max([int(parts[u]), *readers])
        link[parts[u] : far] += flow.out_bytes[u]  # links parts[u] .. far-1
    traffic = link + np.concatenate([[0], link[:-1]])
    return {
        "compute_ps": compute,
        "memory_bytes": memory,
        "overflow_bytes": np.maximum(memory - flow.capacity, 0),
        "link_bytes": traffic,
        "time_ps": compute + traffic * flow.ps_per_byte,
        "ring": link.sum(),
    }


def test_mcm_names():
    t = mcm_target()
    names = t.description_names
    assert len(names) == 5 * 4 + 12
    assert names[:4] == [f"compute_ps_chip{c}" for c in range(4)]
    assert "slowest_chip_ps" in names and "cut_edges" in names


def test_mcm_loads_by_brute_force_and_sums_to_the_workload():
    t = mcm_target()
    flow = t.flow
    maps = np.concatenate([random_maps(t, 25, seed=6), t.native_mapping()[None]])
    d = t.describe(maps)
    compute = per_chip(t, d, "compute_ps")
    assert (compute.sum(axis=1) == flow.compute_ps.sum()).all()
    memory = per_chip(t, d, "memory_bytes")
    assert (memory.sum(axis=1) >= flow.resident_bytes.sum()).all()
    for b, parts in enumerate(maps[:, :, 0]):
        loads = brute_loads(flow, parts)
        for name in ("compute_ps", "memory_bytes", "overflow_bytes", "link_bytes", "time_ps"):
            assert np.array_equal(per_chip(t, d, name)[b], loads[name]), name
        assert column(t, d, "ring_bytes")[b] == loads["ring"]
        cut = sum(parts[s] != parts[v] for s, v in zip(flow.src, flow.dst))
        assert column(t, d, "cut_edges")[b] == cut
        assert column(t, d, "chips_used")[b] == len(set(parts.tolist()))
    # everything on one chip holds exactly the workload's resident bytes, moves nothing
    one = t.describe(np.zeros((1, t.num_units, 1), dtype=np.int64))
    assert per_chip(t, one, "memory_bytes")[0, 0] == flow.resident_bytes.sum()
    assert per_chip(t, one, "link_bytes").sum() == 0 and column(t, one, "cut_edges")[0] == 0


def test_mcm_slowest_chip_is_the_max_of_the_chips_and_the_latency_as_given():
    t = mcm_target()
    maps = np.concatenate([random_maps(t, 30, seed=7), t.native_mapping()[None]])
    d = t.describe(maps)
    for name, chips in (
        ("slowest_chip_ps", "time_ps"),
        ("max_compute_ps", "compute_ps"),
        ("max_memory_bytes", "memory_bytes"),
        ("max_link_bytes", "link_bytes"),
    ):
        assert np.array_equal(column(t, d, name), per_chip(t, d, chips).max(axis=1)), name
    assert np.array_equal(column(t, d, "slowest_chip_ps"), t.latency_ps(maps))
    m = t.measure(maps)
    assert m.valid[-1]  # the native partition: measured as described
    assert np.array_equal(column(t, d, "slowest_chip_ps")[m.valid] / 1e12, m.latency_s[m.valid])


def test_mcm_violations_agree_with_the_constraint_check():
    t = mcm_target()
    flow = t.flow
    maps = np.concatenate(
        [random_maps(t, 40, seed=8), t.native_mapping()[None], t.initial_mapping()[None]]
    )
    d = t.describe(maps)
    v = check(flow, maps[:, :, 0])
    backward = column(t, d, "backward_edges")
    skipped = column(t, d, "skipped_chips")
    triangle = column(t, d, "triangle_edges")
    assert ((backward > 0) == (v.acyclic_edge >= 0)).all()
    assert ((skipped > 0) == (v.skipped_chip >= 0)).all()
    assert ((triangle > 0) == (v.triangle_edge >= 0)).all()
    assert ((column(t, d, "overflow_chips") > 0) == (v.memory_chip >= 0)).all()
    assert (backward + skipped + triangle == 0).any() and not v.static_ok.all()
    for b, parts in enumerate(maps[:, :, 0]):
        assert backward[b] == sum(parts[s] > parts[e] for s, e in zip(flow.src, flow.dst))
        top = parts.max()
        assert skipped[b] == sum(c not in parts for c in range(top))
    assert (
        column(t, d, "overflow_bytes").tolist()
        == per_chip(t, d, "overflow_bytes").sum(axis=1).tolist()
    )


def test_mcm_triangle_edges_on_figure2():
    t = MCM(num_chips=3, description="proposed").bind(figure2())
    # chips of n0..n4: 0, 1, 0, 1, 2; edge n2 -> n4 links chip 0 to chip 2 directly beside
    # the chip path 0 -> 1 -> 2 (n0 -> n1, n3 -> n4); cut edges n0->n1, n2->n4, n3->n4
    d = t.describe(np.array([[[0], [1], [0], [1], [2]]]))
    assert column(t, d, "triangle_edges")[0] == 1
    assert column(t, d, "cut_edges")[0] == 3


def test_mcm_batch_equals_rows_one_by_one():
    t = mcm_target()
    maps = random_maps(t, 12, seed=9)
    d = t.describe(maps)
    assert np.array_equal(d, np.concatenate([t.describe(m[None]) for m in maps]))


def test_mcm_repaired_describes_the_partition_that_is_measured():
    proposed, repaired = mcm_target(), mcm_target(description="repaired")
    assert MCM().description == "repaired"  # the default
    assert repaired.description_names == [*proposed.description_names, "repaired_share"]
    maps = np.concatenate([random_maps(repaired, 30, seed=11), repaired.native_mapping()[None]])
    d = repaired.describe(maps)
    m = repaired.measure(maps)
    assert not m.valid.all() and m.valid[-1]
    # the description of the repair, which is what the package runs ...
    assert np.array_equal(d[:, :-1], proposed.describe(m.rectified))
    assert np.array_equal(column(repaired, d, "repaired_share"), m.reassigned_ratio)
    # ... so its slowest chip is the measured latency of every map, valid or not
    assert np.allclose(column(repaired, d, "slowest_chip_ps") / 1e12, m.latency_s, rtol=1e-12)
    assert (column(repaired, d, "backward_edges") == 0).all()
    # describing first does not change what a later measurement repairs
    again = mcm_target(description="repaired").measure(maps)
    assert np.array_equal(again.rectified, m.rectified)


def test_mcm_unknown_description_is_refused():
    with pytest.raises(ValueError, match="description 'bogus'"):
        MCM(description="bogus")


# -------------------------------------------------------- NNP-I prior of a chip
def test_nnpi_prior_reads_an_external_chips_maps_without_calling_it():
    wl = random_dag(9, np.random.default_rng(6), max_bytes=4096)
    heads = {"activation": ["sram", "DRAM", "LLC"], "other": ["a", "b"], "weight": list(LEVELS)}
    never = ExternalModel(["false"], heads=heads)  # a command that would fail if called
    ext = never.bind(wl)
    prior = nnpi_prior(ext, llc_mib=8000 / 2**20, sram_mib=3000 / 2**20)
    nnpi = NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20).bind(wl)
    maps = random_maps(ext, 20, seed=10)
    as_nnpi = np.stack([maps[:, :, 2], np.array([2, 0, 1])[maps[:, :, 0]]], axis=-1)
    assert np.array_equal(prior.nnpi_maps(maps), as_nnpi)
    assert prior.description_names == nnpi.description_names
    assert np.array_equal(prior.describe(maps), nnpi.describe(as_nnpi))
    assert np.array_equal(prior.latency_s(maps), nnpi.latency_fs(as_nnpi) / FS_PER_S)


def test_nnpi_prior_needs_nnpi_heads():
    wl = random_dag(5, np.random.default_rng(7))
    with pytest.raises(ValueError, match="'weight' and 'activation'"):
        nnpi_prior(ExternalModel(["false"], heads={"weight": list(LEVELS)}).bind(wl))
    odd = {"weight": ["DRAM", "HBM"], "activation": list(LEVELS)}
    with pytest.raises(ValueError, match="HBM"):
        nnpi_prior(ExternalModel(["false"], heads=odd).bind(wl))
