"""Intel NNP-I memory placement (the EGRL paper's chip).

Each layer's weight and activation tensor goes to DRAM, LLC or SRAM. The model has an
integer roofline cost model (:mod:`~hwmodels.nnpi.cost`), a capacity rule with tensor
lifetimes (:mod:`~hwmodels.nnpi.occupancy`), a compiler that rectifies invalid maps
and builds its own map (:mod:`~hwmodels.nnpi.compiler`) and an exact CP-SAT solver of
the same model (:mod:`~hwmodels.nnpi.optimum`). See ``docs/nnpi.md``.
"""

from hwmodels import register
from hwmodels.nnpi.params import LEVELS, NNPIParams
from hwmodels.nnpi.target import NNPI, NNPITarget

register("nnpi")(NNPI)

__all__ = ["LEVELS", "NNPI", "NNPIParams", "NNPITarget"]
