"""The one way options are checked: a :class:`Rule` per option, written once.

A :class:`Rule` says what one option accepts: the value's kind and its range or choices.
An option that is a field of a dataclass carries its rule beside its default
(:func:`ruled`: ``batch: int = ruled(at_least(1), 20)``); :func:`field_rules` reads a
dataclass's rules back, :func:`section_rules` as a table of dotted keys
(``learner.tau``), and :func:`field_problems` / :func:`check_fields` check an instance
(a dataclass's ``__post_init__`` or :func:`egrl.agents.options.parse_options`). Every
agent's options (EGRL's sections, SAC's hyperparameters, mbo's and each baseline's
options dataclass) are declared that way.

A table maps a dotted key of a training configuration (``budget``, ``learner.gamma``,
...) to its rule. :data:`RULES` is the table of the run's own options (its agent's and
its ``screen`` section's aside: :data:`egrl.screening.rules.RULES` names the screening
models); :func:`egrl.config.run_rules` joins them with the agent's, which its config
class derives from its fields. :func:`config_problems` lists every value of a nested
mapping that breaks its rule in a table, one line each (``budget=-5 is invalid: expected
an integer >= 1``); :func:`check_config` raises :class:`ConfigError` with them.
``egrl.config.from_mapping`` and ``egrl-train`` both use them, so Python users and the
command line get the same checks and the same words (the command line adds only its
``egrl-train:`` prefix and exit status 2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
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
        kind: ``int``, ``float``, ``bool``, ``str`` (an ``int`` is a valid ``float``;
            a ``bool`` is never a number) or ``list`` (a non-empty list whose every
            element ``item`` accepts).
        low, high: bounds of a number, ``None`` for none.
        low_open, high_open: exclude the bound itself (``> low`` rather than ``>= low``).
        optional: ``None`` (``null``) is allowed too.
        choices: the allowed strings of a ``str`` option.
        pattern: a regular expression a ``str`` option must match in full.
        describe: the allowed values in words, for a ``pattern``.
        words: strings a number option also accepts (e.g. ``auto``).
        many: a non-empty list of such values is accepted too.
        item: what each element of a ``list`` accepts.
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
    item: Rule | None = None

    def accepts(self, value: Any) -> bool:
        """True if ``value`` is of the rule's kind and within its bounds."""
        if self.many and isinstance(value, (list, tuple)):
            one = replace(self, many=False, optional=False)
            return bool(value) and all(one.accepts(v) for v in value)
        if value is None:
            return self.optional
        if self.kind is list:
            items = value if isinstance(value, (list, tuple)) else ()
            return bool(items) and self.item is not None and all(map(self.item.accepts, items))
        if isinstance(value, str) and value in self.words:
            return True
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is str:
            if isinstance(value, bool) and show(value) in self.choices:
                return True  # ``key=true`` typed for a choice named "true" parses to a boolean
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
        if self.kind is bool:  # its words first: ``auto, true or false``
            text = "".join(f"{word}, " for word in self.words) + "true or false"
        elif self.kind is list:
            text = "a non-empty list, each " + (self.item.expected() if self.item else "value")
        else:
            if self.kind is str:
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

#: the key of a dataclass field's metadata that holds its :class:`Rule`
RULE = "rule"
#: the key of a dataclass's class attribute naming checks that read several fields
RELATIONS = "RELATIONS"


def ruled(rule: Rule, default: Any = MISSING, *, default_factory: Any = MISSING) -> Any:
    """A dataclass field (``dataclasses.field``) whose allowed values are ``rule``: the
    option's default and its rule written in one place."""
    return field(default=default, default_factory=default_factory, metadata={RULE: rule})


def field_rules(cls: type) -> dict[str, Rule]:
    """Field name -> rule of every field of the dataclass ``cls`` (or an instance)
    declared with :func:`ruled`, in field order (a subclass's after its base's)."""
    return {f.name: f.metadata[RULE] for f in fields(cls) if RULE in f.metadata}


def section_rules(cls: type, section: str) -> dict[str, Rule]:
    """:func:`field_rules` of ``cls`` as a table of dotted keys ``section.field``."""
    return {f"{section}.{name}": rule for name, rule in field_rules(cls).items()}


def field_problems(obj: Any, prefix: str = "") -> list[str]:
    """One line per field of the dataclass instance ``obj`` whose value breaks its rule
    (``prefix`` + ``key=value is invalid: expected ...``), then the lines of the checks
    that read several fields together: the class's :data:`RELATIONS` attribute, a tuple of
    functions ``obj -> line or None`` (run once every field is valid)."""
    rules = field_rules(obj)
    values = {name: getattr(obj, name) for name in rules}
    problems = [
        prefix + line for key in rules if (line := problem(key, values[key], rules)) is not None
    ]
    if not problems:
        relations: tuple[Callable[[Any], str | None], ...] = getattr(obj, RELATIONS, ())
        problems = [prefix + line for check in relations if (line := check(obj)) is not None]
    return problems


def check_fields(obj: Any, prefix: str = "") -> None:
    """Raise :class:`ConfigError` with :func:`field_problems` of ``obj``, if any."""
    problems = field_problems(obj, prefix)
    if problems:
        raise ConfigError(problems)


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
