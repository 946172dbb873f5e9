"""The target contract (hwmodels/base.py), checked the same way on every hardware model.

Every registered model, and the toy chip of ``docs/hwmodels.md`` loaded from its file,
is bound to one small workload and must: give a raw, finite decision graph; measure a
batch with arrays of the documented shapes; repair maps into maps it accepts unchanged;
declare initial, fallback and native maps of shape ``[N, H]`` within the choices (the
fallback and native maps valid); and receive the policy's probabilities exactly when it
says it wants them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hwmodels
from egrl import make_env
from egrl.env import Env
from egrl.features import signed_log1p
from tests.support.chips import MODELS, TOY, contract_workload

#: the external model runs a process per measurement
SLOW = {"external"}


@pytest.fixture(
    scope="module",
    params=[pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(MODELS)],
)
def env(request) -> Env:
    return make_env(MODELS[request.param](), contract_workload())


def maps_of(env: Env) -> np.ndarray:
    """int64 ``[B, N, H]``: random maps and the target's own three."""
    own = [env.initial_mapping, env.fallback_mapping, env.baseline_mapping]
    return np.concatenate([env.random_mappings(12, np.random.default_rng(0)), np.stack(own)])


def probs_of(env: Env, batch: int) -> np.ndarray:
    """float64 ``[B, N, H, C]``: random probabilities, 0 past each head's choices."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(batch, env.num_units, env.num_heads, env.max_choices))
    logits[..., np.arange(env.max_choices) >= env.num_choices[:, None]] = -np.inf
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def test_every_registered_model_is_checked():
    hwmodels.import_module(TOY)
    registered = set(hwmodels.names())  # a key is a name ("tpu-cmem") or a variant ("mcm-sample")
    assert registered == {n if n in registered else n.rsplit("-", 1)[0] for n in MODELS}


def test_graph_is_raw_finite_and_featurised_once_by_the_env(env):
    raw = env.target.graph
    x = raw.x.numpy()
    assert x.ndim == 2 and x.shape[0] == env.num_units and np.isfinite(x).all()
    assert raw.x.is_floating_point()
    if x.shape == env.workload.features.shape:  # units are the nodes: the Table 1 features
        np.testing.assert_array_equal(x, env.workload.features)
    e = raw.edge_index
    assert e.dtype == torch.long and e.shape[0] == 2
    assert e.numel() == 0 or (0 <= int(e.min()) and int(e.max()) < env.num_units)
    np.testing.assert_array_equal(env.graph.x.numpy(), signed_log1p(x).astype(np.float32))


def test_measure_gives_the_documented_shapes(env):
    maps = maps_of(env)
    b, n, h = maps.shape
    kw = {"probs": probs_of(env, b)} if env.target.wants_probabilities else {}
    m = env.target.measure(maps, **kw)
    assert m.rectified.shape == (b, n, h) and m.rectified.dtype == np.int64
    assert ((m.rectified >= 0) & (m.rectified < env.num_choices)).all()
    assert m.valid.shape == (b,) and m.valid.dtype == bool
    assert m.reassigned_ratio.shape == (b,) and m.latency_s.shape == (b,)
    assert (m.reassigned_ratio[m.valid] == 0).all() and (m.reassigned_ratio >= 0).all()
    assert (np.isfinite(m.latency_s[m.valid]) & (m.latency_s[m.valid] > 0)).all()
    np.testing.assert_array_equal(m.rectified[m.valid], maps[m.valid])
    assert not m.valid.all()  # the instances are small enough to reject some maps


#: the built-in targets whose compiler can be asked alone (``Target.check``)
CHECKING = {"nnpi", "mcm", "mcm-sample", "banked", "external"}


def test_the_built_in_compilers_can_be_asked_alone(env, request):
    name = request.node.callspec.params["env"]
    assert env.target.checks == (name in CHECKING)
    if not env.target.checks:
        with pytest.raises(NotImplementedError, match="has no compiler to check maps with"):
            env.target.check(maps_of(env))


def test_check_says_what_measure_would_run_without_a_latency(env):
    if not env.target.checks:
        pytest.skip("the target has no compiler to ask alone")
    maps = maps_of(env)
    kw = {"probs": probs_of(env, len(maps))} if env.target.wants_probabilities else {}
    c = env.target.check(maps, **kw)
    m = env.target.measure(maps, **kw)
    assert not hasattr(c, "latency_s")
    assert c.rectified.shape == maps.shape and c.rectified.dtype == np.int64
    np.testing.assert_array_equal(c.rectified, m.rectified)
    np.testing.assert_array_equal(c.valid, m.valid)
    np.testing.assert_array_equal(c.reassigned_ratio, m.reassigned_ratio)
    assert c.valid.any() and not c.valid.all()  # it accepts some maps and repairs others
    np.testing.assert_array_equal(c.rectified[c.valid], maps[c.valid])
    assert env.target.check(c.rectified, **kw).valid.all()  # a repair is accepted as it is


def test_rectified_maps_are_accepted_unchanged(env):
    rectified = env.evaluate(maps_of(env)).rectified
    again = env.target.measure(rectified)
    assert again.valid.all()
    np.testing.assert_array_equal(again.rectified, rectified)


def test_initial_fallback_and_native_maps(env):
    target = env.target
    own = {
        "initial": target.initial_mapping(),
        "fallback": target.fallback_mapping(),
        "native": target.native_mapping(),
    }
    for name, mapping in own.items():
        mapping = np.asarray(mapping)
        assert mapping.shape == (env.num_units, env.num_heads), name
        assert np.issubdtype(mapping.dtype, np.integer), name
        assert ((mapping >= 0) & (mapping < env.num_choices)).all(), name
    ev = env.evaluate(np.stack([own["fallback"], own["native"]]))
    assert ev.valid.all()
    np.testing.assert_array_equal(env.initial_mapping, own["initial"])


def test_probabilities_are_passed_exactly_when_wanted(env, monkeypatch):
    seen: list[dict] = []
    measure = env.target.measure

    def spy(maps, **kw):
        seen.append(kw)
        return measure(maps, **kw)

    monkeypatch.setattr(env.target, "measure", spy)
    maps = maps_of(env)
    probs = probs_of(env, len(maps))
    env.evaluate(maps, probs=probs)
    env.evaluate(maps)
    if env.wants_probabilities:
        np.testing.assert_array_equal(seen[0]["probs"], probs)
        assert seen[1] == {"probs": None}
    else:
        assert seen == [{}, {}]


def test_no_probabilities_mean_uniform_ones(env, request):
    if not env.wants_probabilities:
        pytest.skip(f"{type(env.target).__name__} does not use probabilities")
    maps = maps_of(env)
    # A fresh target for each call: a sampling compiler draws from its own seeded generator.
    model = MODELS[request.node.callspec.params["env"]]
    none = make_env(model(), contract_workload()).target.measure(maps)
    target = make_env(model(), contract_workload()).target
    uniform = target.measure(maps, probs=target.uniform_probabilities(len(maps)))
    for field in ("rectified", "valid", "reassigned_ratio", "latency_s"):
        np.testing.assert_array_equal(getattr(none, field), getattr(uniform, field))
