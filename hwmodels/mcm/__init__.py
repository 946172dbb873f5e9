"""Multi-chip partitioning (Xie et al., MLSys 2022): every node to one chip of a ring.

A package of chiplets on a uni-directional ring runs a workload as a pipeline. The
model has the static constraints of the paper's Equation 5 and a memory rule
(:mod:`~hwmodels.mcm.constraints`), the analytical cost model
(:mod:`~hwmodels.mcm.cost`), native compilers that split the execution order
(:mod:`~hwmodels.mcm.native`), the paper's constraint solver as the compiler
(:mod:`~hwmodels.mcm.solver`) and an exact CP-SAT optimum
(:mod:`~hwmodels.mcm.optimum`). See ``docs/mcm.md``.
"""

from hwmodels import register
from hwmodels.mcm.params import MCMParams
from hwmodels.mcm.target import MCM, MCMTarget

register("mcm")(MCM)

__all__ = ["MCM", "MCMParams", "MCMTarget"]
