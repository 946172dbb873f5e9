"""The ``external`` hardware model: a real chip (or its compiler) behind a command.

>>> import hwmodels
>>> hw = hwmodels.make("external", command=["python", "examples/external_chip.py"])
>>> target = hw.bind(workload)
>>> m = target.measure(maps)  # maps: int [B, N, H]

The command speaks the ``egrl-external/1`` protocol (``docs/external.md``): it is run
once per chunk of maps, reads one JSON request on stdin and prints one JSON answer on
stdout. Three requests exist: ``evaluate`` (compile and run a batch of maps),
``baseline`` (the chip compiler's own map) and, optionally, ``check`` (the compiler
alone: which maps it accepts and its repair of the others, no board run). The workload is written once, at bind
time, to a JSON file whose path every request carries (or, with
``inline_workload=True``, it rides inside every request).

Robustness: every call has a timeout (the command's whole process group is killed),
failed calls are retried, and when a chunk still fails an
:class:`ExternalEvaluatorError` carries the chunks already measured.
"""

from hwmodels.base import CheckRefused
from hwmodels.external.errors import ExternalEvaluatorError
from hwmodels.external.model import NNPI_HEADS, ExternalModel
from hwmodels.external.protocol import PROTOCOL
from hwmodels.external.target import ExternalTarget
from hwmodels.nnpi.prior import NNPIPrior, nnpi_prior

__all__ = [
    "NNPI_HEADS",
    "PROTOCOL",
    "CheckRefused",
    "ExternalEvaluatorError",
    "ExternalModel",
    "ExternalTarget",
    "NNPIPrior",
    "nnpi_prior",
]
