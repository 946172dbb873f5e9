"""The cost models a screen ranks candidates with, behind one small protocol.

A model is fitted on paid measurements (:class:`Measured`: maps of one workload on one
target and their measured rewards) and predicts the reward of new maps of a workload
(:class:`Domain`). ``data[0]`` is always the run's own; with ``screen.init_from`` the
earlier runs of the same target on other workloads follow, so a model that reads what
carries across workloads (the target's description, the workload graph) starts from them.
A screen builds a fresh model for every fit (:func:`build_model`) with a seed derived from
the run's seed and the number of measurements so far, so a fit is a function of the data
alone and a resumed run refits the same model.

``forest``: scikit-learn's :class:`~sklearn.ensemble.ExtraTreesRegressor`, on the one-hot
choices and the target's description (:meth:`Featurizer.__call__`); fitted on several
workloads, on what they share (:meth:`Featurizer.shared`: choice shares and the
description). scikit-learn is imported when a forest is first built, not with this module.

``critic``: the agent's learner's twin-Q critic (:mod:`egrl.screening.critic`); it is
built with the critic the agent attached to its screen (:data:`CRITIC_MODELS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from egrl.screening.features import Featurizer

#: ``screen.name`` values: ``none`` (measure what the agent proposes) and the models
NAMES = ("none", "forest", "critic", "gnn")


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
        featurize = Featurizer(env.target, env.num_choices, prior)
        return cls(
            env.workload.name, featurize, env.graph, np.asarray(env.num_choices), env.num_units
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
    """What a screen needs of a model."""

    def fit(self, data: Sequence[Measured]) -> None:
        """Learn from paid measurements: ``data[0]`` the run's own, then earlier runs'."""

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        """Predicted rewards float64 ``[B]`` of maps int ``[B, N, H]`` of ``domain``."""


class ForestModel:
    """Extremely randomised trees (scikit-learn's ``ExtraTreesRegressor``).

    Fitted on one workload, it reads the one-hot map and the description; fitted on
    several (``screen.init_from``), the columns every workload shares.

    Args:
        seed: the trees' ``random_state``.
        trees: number of trees.
        max_features: share of the features tried at each split (the one-hot block is
            wide and mostly uninformative, so a large share keeps the description's few
            columns in reach).
        min_samples_leaf: fewest training maps in a leaf.
    """

    def __init__(
        self, seed: int, trees: int = 64, max_features: float = 0.5, min_samples_leaf: int = 2
    ) -> None:
        from sklearn.ensemble import ExtraTreesRegressor

        self.model = ExtraTreesRegressor(
            n_estimators=int(trees),
            max_features=float(max_features),
            min_samples_leaf=int(min_samples_leaf),
            random_state=int(seed),
            n_jobs=1,
        )
        self.shared = False

    def _features(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        return domain.featurize.shared(maps) if self.shared else domain.featurize(maps)

    def fit(self, data: Sequence[Measured]) -> None:
        self.shared = len(data) > 1
        X = np.concatenate([self._features(d.domain, d.maps) for d in data])
        y = np.concatenate([d.rewards for d in data])
        self.model.fit(X, y)

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict(self._features(domain, maps)), dtype=np.float64)


def _critic_model(**kwargs):
    from egrl.screening.critic import CriticModel

    return CriticModel(**kwargs)


def _gnn_model(**kwargs):
    from egrl.screening.gnn import GNNModel

    return GNNModel(**kwargs)


#: model name -> factory; a factory takes ``seed`` and the model's own options as keywords
MODELS: dict[str, Any] = {"forest": ForestModel, "critic": _critic_model, "gnn": _gnn_model}
#: models that rank with the agent's learned critic: their factory also takes ``critic``
#: (:class:`egrl.screening.critic.LearnerCritic`), and only agents with one accept them
CRITIC_MODELS = ("critic",)


def option_rules(name: str) -> dict:
    """The options of model ``name`` (``screen.<option>`` in the config) and what each
    accepts: option -> :class:`egrl.validation.Rule`."""
    from egrl.validation import Rule, at_least, positive

    rules = {
        "forest": {
            "trees": at_least(1),
            "max_features": Rule(float, low=0, high=1, low_open=True),
            "min_samples_leaf": at_least(1),
        },
        "critic": {},
        "gnn": {
            "hidden": at_least(1),
            "layers": at_least(0),
            "steps": at_least(1),
            "lr": positive(),
            "batch": at_least(1),
            "weight_decay": at_least(0, float),
        },
    }
    return rules.get(name, {})


def build_model(
    name: str, seed: int, options: dict[str, Any] | None = None, critic: Any = None
) -> CostModel:
    """A new, unfitted model ``name`` seeded with ``seed`` (options: :func:`option_rules`);
    a model of :data:`CRITIC_MODELS` is given ``critic``, the others ignore it."""
    if name not in MODELS:
        raise ValueError(f"unknown screen model {name!r}; expected one of {sorted(MODELS)}")
    extra = {"critic": critic} if name in CRITIC_MODELS else {}
    return MODELS[name](seed=seed, **dict(options or {}), **extra)
