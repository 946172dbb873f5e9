"""Global memory-bank mapping (Zheng et al., 2020): the bank layout of every tensor.

An accelerator's on-chip memory is split into banks with disjoint address spaces, each
wired to one row of the systolic array; convolutions, matrix products and pooling need
given dimensions of their tensors spread across the banks, and a tensor whose
producer and reader disagree is copied between banks. The decision is, per tensor,
which dimension goes across the banks (:mod:`~hwmodels.banked.layouts`); the
operators' requirements are in :mod:`~hwmodels.banked.requirements`, the copies and
their cost in :mod:`~hwmodels.banked.cost`, the local and global compilers and the
rectifier in :mod:`~hwmodels.banked.compilers`, the exact CP-SAT optimum in
:mod:`~hwmodels.banked.optimum`. See ``docs/banked.md``.
"""

from hwmodels import register
from hwmodels.banked.layouts import LAYOUTS
from hwmodels.banked.params import BankedParams
from hwmodels.banked.target import Banked, BankedTarget

register("banked")(Banked)

__all__ = ["LAYOUTS", "Banked", "BankedParams", "BankedTarget"]
