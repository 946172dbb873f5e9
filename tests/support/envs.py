"""The small problems the agent tests run on: a 13-node NNP-I network (exact or with
noisy readings) and the TPU game on an 8-node random network."""

from __future__ import annotations

import numpy as np

from egrl import make_env
from egrl.env import Env
from hwmodels.tpu import TPU
from tests.nnpi_workloads import random_dag, residual
from tests.support.units import KIB


def small_env(**params) -> Env:
    """A 13-node residual network whose weights do not all fit in SRAM + LLC (``params``:
    more keyword arguments of :func:`egrl.make_env`)."""
    w = residual(4, act_bytes=96 * KIB, weight_bytes=700 * KIB, macs=2_000_000)
    return make_env("nnpi", w, sram_mib=1.0, llc_mib=2.0, **params)


def noisy_env(cv: float = 0.05, seed: int = 0) -> Env:
    """The agents' 13-node NNP-I problem, each reading times lognormal noise of mean 1
    (repaired maps scored: every map earns a speedup)."""
    env = small_env(reward="repaired")
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log(1 + cv**2))
    measure = env.target.measure

    def noisy(maps, probs=None):
        m = measure(maps)
        m.latency_s = m.latency_s * rng.lognormal(-(sigma**2) / 2, sigma, size=len(maps))
        return m

    env.target.measure = noisy
    env.target.deterministic = False
    return env


def small_tpu_env(seed: int = 2) -> Env:
    """The TPU game on an 8-node random network with 8 KiB of CMEM."""
    return make_env(
        TPU(cmem_mib=8 / 1024), random_dag(8, np.random.default_rng(seed), max_bytes=4096)
    )
