"""What every screening model shares: the names, the data a model reads and its protocol.

A model is fitted on paid measurements (:class:`Measured`: maps of one workload on one
target and their measured rewards) and predicts the reward of new maps of a workload
(:class:`Domain`). ``data[0]`` is always the run's own; with ``screen.init_from`` the
earlier runs of the same target on other workloads follow, so a model that reads what
carries across workloads (the target's description, the workload graph) starts from them.
The models themselves (:mod:`egrl.screening.models`) and the option table
(:mod:`egrl.validation`) are not imported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from egrl.features import featurise
from egrl.screening.features import Featurizer

#: ``screen.name`` values: ``none`` (measure what the agent proposes) and the models
NAMES = ("none", "forest", "boost", "critic", "gnn")
#: models that rank with the agent's learned critic: their factory also takes ``critic``
#: (:class:`egrl.screening.critic.LearnerCritic`), and only agents with one accept them
CRITIC_MODELS = ("critic",)
#: ``screen.search=auto``: the agent's own default number of model-search generations
AUTO = "auto"


def resolve_search(search: int | str, default: int = 0) -> int:
    """Generations of model search ``screen.search`` asks for: the number, or with
    :data:`AUTO` the agent's ``default``."""
    return int(default) if search == AUTO else int(search)


@dataclass(frozen=True)
class Domain:
    """One workload bound to one target, as a cost model may read it.

    Attributes:
        name: the workload's name.
        featurize: maps int ``[B, N, H]`` -> float32 features (:class:`Featurizer`).
        graph: the decision graph the policies read (PyG ``Data``: ``x`` float32
            ``[N, F]``, ``edge_index`` int64 ``[2, E]``), one node per decision unit.
        num_choices: int64 ``[H]``.
        num_units: ``N``, the decision units of a map.
    """

    name: str
    featurize: Featurizer
    graph: Any
    num_choices: np.ndarray
    num_units: int = 0

    @classmethod
    def of(cls, env, prior=None) -> Domain:
        """The domain of an environment (``prior``: see :class:`Featurizer`)."""
        return cls.of_target(env.target, env.workload.name, prior)

    @classmethod
    def of_target(cls, target, name: str, prior=None) -> Domain:
        """The domain of a bound target that is not an environment: nothing is measured
        (an :class:`egrl.env.Env` reads the compiler's map when it is made, a board run)."""
        num_choices = np.array([len(c) for c in target.heads.values()], dtype=np.int64)
        graph = featurise(target.graph, f"{type(target).__name__} graph of {name!r}")
        return cls(
            name, Featurizer(target, num_choices, prior), graph, num_choices, target.num_units
        )


@dataclass(frozen=True)
class Measured:
    """Paid measurements of one domain: maps int ``[M, N, H]``, rewards float64 ``[M]``."""

    domain: Domain
    maps: np.ndarray
    rewards: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)


class CostModel(Protocol):
    """What a screen needs of a model (``forest``, ``gnn``, ``critic``).

    A model is built unfitted by its factory (``seed`` and its own options as keywords,
    :data:`egrl.screening.models.MODELS`), fitted once, then asked for predictions.
    """

    def fit(self, data: Sequence[Measured]) -> None:
        """Learn from paid measurements: ``data[0]`` the run's own, then earlier runs'."""

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        """Predicted rewards float64 ``[B]`` of maps int ``[B, N, H]`` of ``domain``."""
