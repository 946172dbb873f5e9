"""Screening: a learned cost model decides which proposed maps are measured.

On real hardware a measurement costs seconds to minutes. A screening agent proposes
``screen.pool`` times its usual batch; maps the measure cache knows are free, a model
trained on the run's paid measurements ranks the rest, and only the top ones (and a share
``screen.explore`` drawn at random) are paid. ``docs/screening.md`` describes it.

* :mod:`egrl.screening.base`: the model names, what a model reads (``Domain``,
  ``Measured``) and the model protocol (``CostModel``).
* :mod:`egrl.screening.features`: maps -> one-hot choices + the target's description.
* :mod:`egrl.screening.models`: the models by name and the ``forest`` model.
* :mod:`egrl.screening.rules`: the allowed values of the ``screen`` section.
* :mod:`egrl.screening.screen`: :class:`Screen`, what the agents use.

The package imports light (``egrl.config`` reads :mod:`egrl.screening.rules`); the screen
and scikit-learn load on first use.
"""

from egrl.screening.base import NAMES

__all__ = ["NAMES", "SCREEN_COLUMNS", "Screen", "make_screen"]


def __getattr__(name: str):
    if name in ("SCREEN_COLUMNS", "Screen", "make_screen"):
        from egrl.screening import screen  # start-up time

        return getattr(screen, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
