"""Which agents may screen, and search the screen's model: the checks of a run's ``screen``
section against what its agent can do.

An agent declares what it can (class attributes of :class:`~egrl.agents.base.SearchAgent`):
``screens`` (it proposes candidates for a screen to choose from), ``has_critic(agent)`` (it
has a critic for ``screen=critic``), ``searches_model(agent)`` (its operators can search the
screen's model between paid batches) and ``default_search`` (the generations of model
search ``screen.search=auto`` gives it). The command line's checks name the agents that can
(:mod:`egrl.cli.checks`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from egrl.screening.base import CRITIC_MODELS, resolve_search
from egrl.validation import ConfigError

if TYPE_CHECKING:
    from egrl.config import TrainConfig


def refuse(agent: Any, cfg: TrainConfig) -> None:
    """Raise :class:`~egrl.validation.ConfigError` if ``agent`` (an agent class) cannot do
    what ``cfg.screen`` asks: a model search without a screen, a screen for an agent that
    does not screen, a critic screen without a critic, a model search it cannot run."""
    screen, name, section = cfg.screen.name, cfg.agent.name, asdict(cfg.agent)
    search = resolve_search(cfg.screen.search)  # auto, the agent's own: never refused
    if screen == "none" and search:
        why = f"screen.search={search} is invalid: screen=none has no model to search"
    elif screen != "none" and not agent.screens:
        why = f"screen={screen} is invalid: agent {name!r} does not screen its proposals"
    elif screen in CRITIC_MODELS and not agent.has_critic(section):
        why = f"screen={screen} is invalid: agent {name!r} has no critic"
    elif screen != "none" and search and not agent.searches_model(section):
        why = f"screen.search={search} is invalid: agent {name!r} cannot search the model"
    else:
        return
    raise ConfigError([why])


def search_generations(agent: Any, cfg: TrainConfig) -> int:
    """Steps of ``agent``'s operators on the screen's model between paid batches:
    ``screen.search``, or with ``auto`` the agent's ``default_search`` where it can search
    the model (0 without a screen: nothing to search)."""
    can = cfg.screen.name != "none" and agent.searches_model(asdict(cfg.agent))
    return resolve_search(cfg.screen.search, agent.default_search if can else 0)
