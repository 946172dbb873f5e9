"""The cost models a screen ranks candidates with, by name.

Every model follows :class:`egrl.screening.base.CostModel`: fitted on paid measurements
(:class:`~egrl.screening.base.Measured`), it predicts the reward of new maps of a workload
(:class:`~egrl.screening.base.Domain`). A screen builds a fresh model for every fit
(:func:`build_model`) with a seed derived from the run's seed and the number of
measurements so far, so a fit is a function of the data alone and a resumed run refits
the same model.

``forest``: scikit-learn's :class:`~sklearn.ensemble.ExtraTreesRegressor`, on the one-hot
choices and the target's description (:meth:`Featurizer.__call__`); fitted on several
workloads, on what they share (:meth:`Featurizer.shared`: choice shares and the
description). scikit-learn is imported when a forest is first built, not with this module.

``boost``: gradient-boosted trees (scikit-learn's
:class:`~sklearn.ensemble.HistGradientBoostingRegressor`), on the same features as the
forest; with ``members: K`` (> 1) ``K`` of them with their own seeds and feature
subsamples, whose spread is the uncertainty. A boosted model is a *sum* of trees: with
shallow trees (``max_leaf_nodes: 2``, an additive model of the choices) it predicts a map
better than any it was fitted on where two improvements were seen apart, which the
forest's average of trees, never above its best training reward, cannot.

``critic``: the agent's learner's twin-Q critic (:mod:`egrl.screening.critic`); it is
built with the critic the agent attached to its screen (:data:`CRITIC_MODELS`).

``gnn``: a graph network over the workload graph and the map (:mod:`egrl.screening.gnn`);
with ``ensemble: K`` (> 1) ``K`` of them, each with its own seed (its own weights and
minibatches), whose mean is the prediction and whose standard deviation is the spread
that ``screen.kappa`` and ``screen.acquisition=ei`` read (:class:`Ensemble`), as the
forest's trees are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from egrl.screening.base import CRITIC_MODELS, CostModel, Domain, Measured
from egrl.screening.critic import CriticModel


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
        from sklearn.ensemble import ExtraTreesRegressor  # start-up time

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

    def _training_set(self, data: Sequence[Measured]) -> tuple[np.ndarray, np.ndarray]:
        """The features ``[M, F]`` and rewards ``[M]`` of every workload's readings (the
        shared columns when there are several workloads)."""
        self.shared = len(data) > 1
        X = np.concatenate([self._features(d.domain, d.maps) for d in data])
        return X, np.concatenate([d.rewards for d in data])

    def fit(self, data: Sequence[Measured]) -> None:
        self.model.fit(*self._training_set(data))

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict(self._features(domain, maps)), dtype=np.float64)

    def predict_with_spread(
        self, domain: Domain, maps: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The trees' mean and standard deviation for maps int ``[B, N, H]``: float64
        ``[B]`` each (the spread across trees is the forest's uncertainty)."""
        X = self._features(domain, maps)
        per_tree = np.stack([tree.predict(X) for tree in self.model.estimators_])
        return per_tree.mean(axis=0), per_tree.std(axis=0)


class BoostModel(ForestModel):
    """Gradient-boosted trees (see the module docstring): ``members`` boosters of
    ``iterations`` trees of at most ``max_leaf_nodes`` leaves, each split drawn from a share
    ``max_features`` of the features; their mean predicts, their standard deviation is
    the spread.

    Args:
        seed: the first booster's ``random_state`` (the others follow from it).
    """

    def __init__(
        self,
        seed: int,
        members: int = 4,
        iterations: int = 200,
        learning_rate: float = 0.1,
        max_leaf_nodes: int = 15,
        min_samples_leaf: int = 4,
        max_features: float = 0.5,
    ) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor  # start-up time

        seeds = np.random.SeedSequence([int(seed), int(members)]).generate_state(int(members))
        self.members = [
            HistGradientBoostingRegressor(
                max_iter=int(iterations),
                learning_rate=float(learning_rate),
                max_leaf_nodes=int(max_leaf_nodes),
                min_samples_leaf=int(min_samples_leaf),
                max_features=float(max_features),
                early_stopping=False,
                random_state=int(s),
            )
            for s in seeds
        ]
        self.shared = False

    def fit(self, data: Sequence[Measured]) -> None:
        X, y = self._training_set(data)
        for member in self.members:
            member.fit(X, y)

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        return self.predict_with_spread(domain, maps)[0]

    def predict_with_spread(
        self, domain: Domain, maps: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The boosters' mean and standard deviation for maps int ``[B, N, H]``: float64
        ``[B]`` each."""
        X = self._features(domain, maps)
        each = np.stack([m.predict(X) for m in self.members]).astype(np.float64)
        return each.mean(axis=0), each.std(axis=0)


class Ensemble:
    """``K`` models of one kind fitted on the same data, each with its own seed: their
    mean predicts and their standard deviation is the spread (deep ensembles,
    Lakshminarayanan et al., 2017).

    Args:
        members: the unfitted models.
    """

    def __init__(self, members: Sequence[CostModel]) -> None:
        self.members = list(members)

    def fit(self, data: Sequence[Measured]) -> None:
        for member in self.members:
            member.fit(data)

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        return self.predict_with_spread(domain, maps)[0]

    def predict_with_spread(
        self, domain: Domain, maps: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The members' mean and standard deviation for maps int ``[B, N, H]``: float64
        ``[B]`` each."""
        each = np.stack([m.predict(domain, maps) for m in self.members])
        return each.mean(axis=0), each.std(axis=0)


def _gnn_model(seed: int, ensemble: int = 1, **kwargs) -> CostModel:
    # torch_geometric takes seconds to import: loaded when a gnn is first built
    from egrl.screening.gnn import GNNModel  # start-up time

    if int(ensemble) == 1:
        return GNNModel(seed=seed, **kwargs)
    seeds = np.random.SeedSequence([int(seed), int(ensemble)]).generate_state(int(ensemble))
    return Ensemble([GNNModel(seed=int(s), **kwargs) for s in seeds])


#: model name -> factory; a factory takes ``seed`` and the model's own options as keywords
#: (:data:`egrl.screening.rules.OPTIONS`), and a model of :data:`CRITIC_MODELS` ``critic``
MODELS: dict[str, Any] = {
    "forest": ForestModel,
    "boost": BoostModel,
    "critic": CriticModel,
    "gnn": _gnn_model,
}


def build_model(
    name: str, seed: int, options: dict[str, Any] | None = None, critic: Any = None
) -> CostModel:
    """A new, unfitted model ``name`` seeded with ``seed`` (options:
    :func:`egrl.screening.rules.option_rules`);
    a model of :data:`CRITIC_MODELS` is given ``critic``, the others ignore it."""
    if name not in MODELS:
        raise ValueError(f"unknown screen model {name!r}; expected one of {sorted(MODELS)}")
    extra = {"critic": critic} if name in CRITIC_MODELS else {}
    return MODELS[name](seed=seed, **dict(options or {}), **extra)
