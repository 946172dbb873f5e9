"""The allowed values of the ``screen`` section: its common keys and each model's options.

:data:`RULES` holds the section's keys (``screen.name``, ``screen.pool``, ...) in the
form of :data:`egrl.validation.RULES`; :data:`egrl.config.RULES` joins the two into the
table of a training run. :data:`OPTIONS` holds what each model adds (``screen.trees``,
...), which :func:`option_problems` checks once the model is known.
"""

from __future__ import annotations

from egrl.screening.base import AUTO, NAMES
from egrl.validation import Rule, at_least, positive, show

#: dotted key -> rule, for every key of the ``screen`` section (``egrl.config.ScreenConfig``)
#: apart from a model's own options
RULES: dict[str, Rule] = {
    "screen.name": Rule(str, choices=NAMES),
    "screen.pool": at_least(1),
    "screen.explore": Rule(float, low=0, high=1, high_open=True),
    "screen.warmup": at_least(0),
    "screen.max_train": at_least(1),
    "screen.prior": Rule(str, choices=("nnpi",), optional=True),
    "screen.init_from": Rule(
        str, pattern=r".+", describe="a run directory or a list of them", optional=True, many=True
    ),
    "screen.search": Rule(int, low=0, words=(AUTO,)),
    "screen.kappa": at_least(0, float),
    "screen.acquisition": Rule(str, choices=("ucb", "ei")),
}

#: model name -> its options (``screen.<option>`` in the config) -> what each accepts
OPTIONS: dict[str, dict[str, Rule]] = {
    "forest": {
        "trees": at_least(1),
        "max_features": Rule(float, low=0, high=1, low_open=True),
        "min_samples_leaf": at_least(1),
    },
    "boost": {
        "members": at_least(1),
        "iterations": at_least(1),
        "learning_rate": positive(),
        "max_leaf_nodes": at_least(2),
        "min_samples_leaf": at_least(1),
        "max_features": Rule(float, low=0, high=1, low_open=True),
    },
    "critic": {},
    "gnn": {
        "hidden": at_least(1),
        "layers": at_least(0),
        "steps": at_least(1),
        "lr": positive(),
        "batch": at_least(1),
        "weight_decay": at_least(0, float),
        "ensemble": at_least(1),
    },
}


def option_rules(name: str) -> dict[str, Rule]:
    """The options of model ``name`` and what each accepts (none for an unknown name)."""
    return OPTIONS.get(name, {})


def option_problems(name: str, options: dict) -> list[str]:
    """One line per option of model ``name`` that it does not have or whose value it does
    not accept (:func:`option_rules`)."""
    rules = option_rules(name)
    problems = []
    for key, value in options.items():
        if key not in rules:
            problems.append(
                f"screen.{key}={show(value)} is invalid: screen {name!r} has no option "
                f"{key!r} (its options: {', '.join(rules) or 'none'})"
            )
        elif not rules[key].accepts(value):
            problems.append(
                f"screen.{key}={show(value)} is invalid: expected {rules[key].expected()}"
            )
    return problems
