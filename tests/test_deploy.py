"""The deployed map (egrl.deploy): never slower than a map the run has read, the
compiler's included; the search's own best keeps its keys in best_mapping.json."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from egrl import deploy, make_env
from egrl.agents import make_agent
from egrl.config import AgentConfig, TrainConfig
from egrl.confirm import Candidate, Confirmation
from egrl.ledger import Best
from tests.support.command_line import egrl_train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env():
    return make_env("nnpi", "resnet18")


def other_map(env) -> np.ndarray:
    """int64 ``[N, H]``: a valid map that is not the compiler's (all-DRAM, the initial)."""
    mapping = np.asarray(env.initial_mapping, dtype=np.int64)
    assert not np.array_equal(mapping, env.baseline_mapping)
    return mapping


def test_a_search_best_below_the_compiler_deploys_the_compilers_map(env):
    found = deploy.choose(env, other_map(env), 0.97, 2e-3)
    assert found.source == deploy.COMPILER
    np.testing.assert_array_equal(found.mapping, env.baseline_mapping)
    assert (found.speedup, found.latency_s) == (1.0, env.baseline_latency_s)
    assert found.search_speedup == 0.97
    assert "the compiler's map" in found.summary() and "0.9700" in found.summary()


def test_a_search_best_above_the_compiler_is_deployed(env):
    mapping = other_map(env)
    found = deploy.choose(env, mapping, 1.25, 1e-4)
    assert (found.source, found.speedup, found.latency_s) == (deploy.SEARCH, 1.25, 1e-4)
    np.testing.assert_array_equal(found.mapping, mapping)
    assert found.summary() == "deployed: the search's best (1.2500)"


def test_no_map_found_deploys_the_compilers_and_the_prior_is_named(env):
    assert deploy.choose(env, None, 0.0, float("nan")).source == deploy.COMPILER
    mapping = other_map(env)
    found = deploy.choose(env, mapping, 1.1, 1e-4, prior=mapping)
    assert found.source == deploy.PRIOR
    assert found.summary() == "deployed: the prior's map (1.1000, paid first; no later map beat it)"
    # the prior's map below the compiler's: the compiler's is deployed
    assert deploy.choose(env, mapping, 0.9, 1e-4, prior=mapping).source == deploy.COMPILER
    # the compiler's own map found again (speedup 1): named as the compiler's
    base = env.baseline_mapping
    assert deploy.choose(env, base, 1.0, env.baseline_latency_s).source == deploy.COMPILER


def test_the_record_is_plain_json_with_the_map_keyed_by_unit(env):
    record = deploy.choose(env, other_map(env), 0.5, 1e-3).record(env.mapping_to_dict)
    assert json.loads(json.dumps(record)) == record
    assert record["source"] == "compiler" and record["speedup"] == 1.0
    assert record["mapping"] == env.mapping_to_dict(env.baseline_mapping)


def test_a_confirmed_best_below_the_compiler_deploys_the_compilers_map(env):
    """On a noisy target the confirmed best is what is weighed against the compiler's
    map, with the compiler's mean reading of the confirmation as its latency."""
    mapping = other_map(env)
    readings = np.array([1.0e-3, 1.2e-3])
    best = Candidate(mapping, 1.02, np.array([1.1e-3]), 0, 0.98, 0.9, 1.05)
    confirmation = Confirmation(best, [best], readings, 0.1, 6)
    cfg = TrainConfig(agent=AgentConfig(name="sa"))
    run = SimpleNamespace(
        env=env, cfg=cfg, ledger=SimpleNamespace(best=Best()), confirmation=confirmation
    )
    found = deploy.of_run(run)
    assert found.source == deploy.COMPILER and found.search_speedup == 0.98
    assert found.latency_s == pytest.approx(1.1e-3)
    confirmation.best = Candidate(mapping, 1.02, np.array([1.0e-3]), 0, 1.1, 1.0, 1.2)
    found = deploy.of_run(run)
    assert (found.source, found.speedup) == (deploy.SEARCH, 1.1)
    assert found.latency_s == pytest.approx(1.1e-3 / 1.1)


def test_best_mapping_json_deploys_the_compilers_map_where_the_search_ends_below_it(env, tmp_path):
    """Random maps on ResNet-18 end below the compiler's: the file keeps the search's best
    under its own keys and deploys the compiler's map."""
    cfg = TrainConfig(seed=0, budget=16, progress=False, agent=AgentConfig("random", {"batch": 8}))
    agent = make_agent(env, cfg, tmp_path)
    best = agent.run()
    assert 0 < best.speedup < 1
    saved = json.loads((tmp_path / "best_mapping.json").read_text())
    assert saved["speedup"] == best.speedup
    assert saved["mapping"] == env.mapping_to_dict(best.mapping)
    assert saved["deployed"] == {
        "source": "compiler",
        "speedup": 1.0,
        "latency_s": env.baseline_latency_s,
        "mapping": env.mapping_to_dict(env.baseline_mapping),
    }


def test_the_summary_line_names_the_deployed_map(tmp_path):
    out = egrl_train(
        "agent=random",
        "agent.batch=8",
        "workload=resnet18",
        "budget=8",
        "progress=false",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("best speedup over the compiler: 0.")
    assert "; deployed: the compiler's map (1.0000; no map the search found beat it" in line
    saved = json.loads((tmp_path / "run" / "best_mapping.json").read_text())
    assert saved["deployed"]["source"] == "compiler"
