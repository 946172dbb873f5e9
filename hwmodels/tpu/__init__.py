"""TPU memory mapping as a game (Wang et al., "Optimizing Memory Mapping Using Deep
Reinforcement Learning", DeepMind 2023, arXiv:2305.07440): every buffer of a program
to HBM (Drop) or the fast CMEM (Copy, NoCopy), under CMEM size, copy bandwidth and
aliasing constraints.

The program and its buffers (:mod:`~hwmodels.tpu.program`), the roofline cost model
(:mod:`~hwmodels.tpu.cost`), the game with Drop-backup (:mod:`~hwmodels.tpu.game`), a
planner's observation (:mod:`~hwmodels.tpu.observe`), layouts and their latency
(:mod:`~hwmodels.tpu.layout`), the layout figure (:mod:`~hwmodels.tpu.plot`), the native
heuristic and the -prod hybrid (:mod:`~hwmodels.tpu.heuristic`), random, ES and
brute-force search (:mod:`~hwmodels.tpu.search`), and the hardware-model adapter
(:mod:`~hwmodels.tpu.target`). See ``docs/tpu.md``.
"""

from hwmodels import register
from hwmodels.tpu.game import ACTIONS, COPY, DROP, NOCOPY, Game, IllegalActionError
from hwmodels.tpu.layout import Layout
from hwmodels.tpu.params import TPUParams
from hwmodels.tpu.program import Op, Program
from hwmodels.tpu.target import TPU, TPUTarget

register("tpu-cmem")(TPU)

__all__ = [
    "ACTIONS",
    "COPY",
    "DROP",
    "NOCOPY",
    "TPU",
    "Game",
    "IllegalActionError",
    "Layout",
    "Op",
    "Program",
    "TPUParams",
    "TPUTarget",
]
