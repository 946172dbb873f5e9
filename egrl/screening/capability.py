"""Which agents may screen, and search the screen's model: the checks of a run's ``screen``
section against what its agent can do, each refusal written once.

An agent declares what it can (class attributes of :class:`~egrl.agents.base.SearchAgent`):
``screens`` (it proposes candidates for a screen to choose from), ``has_critic(agent)`` (it
has a critic for ``screen=critic``), ``searches_model(agent)`` (its operators can search the
screen's model between paid batches), ``default_search`` (the generations of model search
``screen.search=auto`` gives it) and ``needs_model`` (it searches the model itself, as deep
as its own option says: ``agent=mbo``). :func:`refusal` says why an agent cannot do what a
``screen`` section asks; :func:`refuse` raises it for a run's config, and the command
line's checks (:mod:`egrl.cli.checks`) print it and name the agents that can.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from egrl.screening.base import AUTO, CRITIC_MODELS, NAMES, resolve_search
from egrl.validation import ConfigError, show

if TYPE_CHECKING:
    from collections.abc import Mapping

    from egrl.config import TrainConfig


@dataclass(frozen=True)
class Refusal:
    """Why an agent cannot do what its run's ``screen`` section asks.

    Attributes:
        key, value: the refused option (``screen`` or ``screen.search``) and its value.
        why: what the agent cannot do, in words.
        ability: the agent class's attribute that would allow it (``screens``,
            ``has_critic``, ``searches_model``), by which the agents that can are listed;
            empty where no agent's would.
    """

    key: str
    value: Any
    why: str
    ability: str = ""

    def line(self) -> str:
        """``KEY=VALUE is invalid: WHY``."""
        return f"{self.key}={show(self.value)} is invalid: {self.why}"


def usable_models(agent: Any, section: Mapping[str, Any]) -> list[str]:
    """The screen models ``agent`` (an agent class, configured by its ``agent`` section)
    can use: every model, a critic one only with a critic."""
    return [
        n for n in NAMES if n != "none" and (n not in CRITIC_MODELS or agent.has_critic(section))
    ]


def refusal(
    agent: Any, name: str, screen: str, search: int, section: Mapping[str, Any]
) -> Refusal | None:
    """Why agent class ``agent`` (registered as ``name``, configured by its ``agent``
    section ``section``) cannot run with the screen model ``screen`` and ``search``
    generations of model search (``screen.search``, ``auto`` resolved to 0: the agent's
    own default, never refused); None if it can."""
    if screen == "none":
        if search:
            models = "|".join(n for n in NAMES if n != "none")
            why = f"screen=none has no model to search (choose one: screen={models})"
            return Refusal("screen.search", search, why)
        if agent.needs_model:
            why = f"agent {name!r} searches a model (screen={'|'.join(usable_models(agent, section))})"
            return Refusal("screen", screen, why)
        return None
    if not agent.screens:
        return Refusal("screen", screen, f"agent {name!r} does not screen its proposals", "screens")
    if screen in CRITIC_MODELS and not agent.has_critic(section):
        return Refusal("screen", screen, f"agent {name!r} has no critic", "has_critic")
    if search and agent.needs_model:
        why = (
            f"agent {name!r} searches the model itself: its depth of search is {agent.needs_model}"
        )
        return Refusal("screen.search", search, why)
    if search and not agent.searches_model(section):
        why = f"agent {name!r} cannot search the model"
        return Refusal("screen.search", search, why, "searches_model")
    return None


def requested_search(search: Any) -> int:
    """The generations of model search a ``screen.search`` value asks of the agent: 0 for
    ``auto`` (the agent's own default) and for a value that is not a whole number >= 0
    (the option's rule refuses it)."""
    if search == AUTO or isinstance(search, bool) or not isinstance(search, int) or search < 0:
        return 0
    return resolve_search(search)


def refuse(agent: Any, cfg: TrainConfig) -> None:
    """Raise :class:`~egrl.validation.ConfigError` with the :func:`refusal` of ``agent``
    (an agent class) for ``cfg.screen``, if any: a model search without a screen, a
    screen for an agent that does not screen, a critic screen without a critic, a model
    search it cannot run, no screen for an agent that searches one."""
    why = refusal(
        agent,
        cfg.agent.name,
        cfg.screen.name,
        requested_search(cfg.screen.search),
        asdict(cfg.agent),
    )
    if why is not None:
        raise ConfigError([why.line()])


def search_generations(agent: Any, cfg: TrainConfig) -> int:
    """Steps of ``agent``'s operators on the screen's model between paid batches:
    ``screen.search``, or with ``auto`` the agent's ``default_search`` where it can search
    the model (0 without a screen: nothing to search)."""
    can = cfg.screen.name != "none" and agent.searches_model(asdict(cfg.agent))
    return resolve_search(cfg.screen.search, agent.default_search if can else 0)
