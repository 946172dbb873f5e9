"""The allowed values of the training options, as tables of key -> rule.

A table maps a dotted key of a training configuration (``budget``, ``learner.gamma``,
...) to a :class:`Rule`: the value's kind and its range. :data:`RULES` is the table of
every option outside the ``screen`` section (whose table, :data:`egrl.screening.rules.RULES`,
names the screening models); :data:`egrl.config.RULES` joins the two.
:func:`config_problems` lists every value of a nested mapping that breaks its rule in a
table, one line each (``budget=-5 is invalid: expected an integer >= 1``);
:func:`check_config` raises :class:`ConfigError` with them. ``egrl.config.from_mapping``
and ``egrl-train`` both use them, so Python users and the command line get the same
checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import Any


class ConfigError(ValueError):
    """One or more configuration values out of their allowed range; ``problems`` lists them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Rule:
    """What one option accepts.

    Attributes:
        kind: ``int``, ``float``, ``bool`` or ``str`` (an ``int`` is a valid ``float``;
            a ``bool`` is never a number).
        low, high: bounds of a number, ``None`` for none.
        low_open, high_open: exclude the bound itself (``> low`` rather than ``>= low``).
        optional: ``None`` (``null``) is allowed too.
        choices: the allowed strings of a ``str`` option.
        pattern: a regular expression a ``str`` option must match in full.
        describe: the allowed values in words, for a ``pattern``.
        words: strings a number option also accepts (e.g. ``auto``).
        many: a non-empty list of such values is accepted too.
    """

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    describe: str = ""
    words: tuple[str, ...] = ()
    many: bool = False

    def accepts(self, value: Any) -> bool:
        """True if ``value`` is of the rule's kind and within its bounds."""
        if self.many and isinstance(value, (list, tuple)):
            one = replace(self, many=False, optional=False)
            return bool(value) and all(one.accepts(v) for v in value)
        if value is None:
            return self.optional
        if isinstance(value, str) and value in self.words:
            return True
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is str:
            if not isinstance(value, str):
                return False
            if self.choices:
                return value in self.choices
            return self.pattern is None or re.fullmatch(self.pattern, value) is not None
        number = Integral if self.kind is int else Real
        if isinstance(value, bool) or not isinstance(value, number):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def expected(self) -> str:
        """The allowed values in words: ``an integer >= 1``, ``a number in (0, 1]``, ..."""
        if self.kind is bool:
            text = "true or false"
        elif self.kind is str:
            text = "one of " + ", ".join(self.choices) if self.choices else self.describe
        else:
            text = ("an integer" if self.kind is int else "a number") + self._range()
        text += "".join(f" or {word}" for word in self.words)
        return text + (" or null" if self.optional else "")

    def _range(self) -> str:
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f" in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if self.low is not None:
            return f" {'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f" {'<' if self.high_open else '<='} {_number(self.high)}"
        return ""


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def at_least(low: float, kind: type = int) -> Rule:
    """``kind`` >= ``low``."""
    return Rule(kind, low=low)


def positive(kind: type = float) -> Rule:
    """``kind`` > 0."""
    return Rule(kind, low=0, low_open=True)


FRACTION = Rule(float, low=0, high=1)  # [0, 1]
FLAG = Rule(bool)

#: dotted key -> rule, for every option of a training run (``egrl.config.TrainConfig``)
#: outside its ``screen`` section and its agent's own (an agent's config class has them:
#: ``egrl.agents.egrl.config.EGRLConfig.RULES``)
RULES: dict[str, Rule] = {
    "seed": at_least(0),
    "budget": at_least(1),
    "threads": at_least(1),
    "checkpoint_every": at_least(1),
    "keep_checkpoints": at_least(1),
    "snapshot_every": at_least(1),
    "record_evaluations": FLAG,
    "invalid_reward_scale": at_least(0, float),
    "reward": Rule(str, pattern=r"egrl|repaired", describe="egrl or repaired", optional=True),
    "progress": FLAG,
    "cache_size": at_least(0),
    "record_size": at_least(1),
    "max_stale_generations": at_least(1),
    "time_limit_s": Rule(float, low=0, low_open=True, optional=True),
    "prior_time_limit_s": Rule(float, low=0, low_open=True),
    "init_from": Rule(
        str, pattern=r".+", describe="a run directory, snapshot or checkpoint path", optional=True
    ),
    "device": Rule(str, pattern=r"cpu|cuda(:\d+)?", describe="cpu, cuda or cuda:N"),
    "agent.name": Rule(str, pattern=r"\S+", describe="an agent name (egrl.agents.names())"),
    "confirm.top": at_least(0),
    "confirm.repeats": at_least(2),  # an interval needs two readings of each side
    "confirm.reread": at_least(0),
}


def show(value: Any) -> str:
    """A value as it is written on the command line (``true``, ``null``, ``abc``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def problem(key: str, value: Any, rules: Mapping[str, Rule]) -> str | None:
    """The line that says why ``value`` is not allowed for ``key`` in the table ``rules``;
    None if it is (or no rule)."""
    rule = rules.get(key)
    if rule is None or rule.accepts(value):
        return None
    return f"{key}={show(value)} is invalid: expected {rule.expected()}"


def _lookup(cfg: Mapping, key: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def config_problems(cfg: Mapping, rules: Mapping[str, Rule]) -> list[str]:
    """One line per value of the nested mapping ``cfg`` that breaks its rule in the table
    ``rules``, in the table's order (absent keys pass)."""
    problems = []
    for key in rules:
        present, value = _lookup(cfg, key)
        line = problem(key, value, rules) if present else None
        if line is not None:
            problems.append(line)
    return problems


def check_config(cfg: Mapping, rules: Mapping[str, Rule]) -> None:
    """Raise :class:`ConfigError` naming every value of ``cfg`` that breaks its rule in
    the table ``rules``."""
    problems = config_problems(cfg, rules)
    if problems:
        raise ConfigError(problems)
