"""The cost models a screen ranks candidates with, behind one small protocol.

A model is fitted on the features of the run's paid maps ``X`` float32 ``[M, F]`` and their
measured rewards ``y`` float64 ``[M]``, and predicts the reward of new maps. A screen
builds a fresh model for every fit (:func:`build_model`) with a seed derived from the
run's seed and the number of measurements so far, so a fit is a function of the data
alone and a resumed run refits the same model.

``forest``: scikit-learn's :class:`~sklearn.ensemble.ExtraTreesRegressor` (randomised
trees on the one-hot choices and the target's description). scikit-learn is imported
when a forest is first built, not with this module.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

#: ``screen.name`` values: ``none`` (measure what the agent proposes) and the models
NAMES = ("none", "forest")


class CostModel(Protocol):
    """What a screen needs of a model."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> None:
        """Learn from features float32 ``[M, F]`` and rewards float64 ``[M]``."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted rewards float64 ``[B]`` of features float32 ``[B, F]``."""


class ForestModel:
    """Extremely randomised trees (scikit-learn's ``ExtraTreesRegressor``).

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

    def fit(self, X: np.ndarray, y: np.ndarray) -> None:
        self.model.fit(X, y)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict(X), dtype=np.float64)


#: model name -> class; a class takes ``seed`` and its own options as keywords
MODELS: dict[str, type] = {"forest": ForestModel}


def option_rules(name: str) -> dict:
    """The options of model ``name`` (``screen.<option>`` in the config) and what each
    accepts: option -> :class:`egrl.validation.Rule`."""
    from egrl.validation import Rule, at_least

    rules = {
        "forest": {
            "trees": at_least(1),
            "max_features": Rule(float, low=0, high=1, low_open=True),
            "min_samples_leaf": at_least(1),
        }
    }
    return rules.get(name, {})


def build_model(name: str, seed: int, options: dict[str, Any] | None = None) -> CostModel:
    """A new, unfitted model ``name`` seeded with ``seed`` (options: :func:`option_rules`)."""
    if name not in MODELS:
        raise ValueError(f"unknown screen model {name!r}; expected one of {sorted(MODELS)}")
    return MODELS[name](seed=seed, **dict(options or {}))
