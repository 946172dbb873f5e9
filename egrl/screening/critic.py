"""``screen=critic``: the learner's own twin-Q critic ranks the candidates.

In EGRL every episode is one step (``done = True``), so the critic's Q of a map is what
its Bellman target makes it, the expected reward of the map: normalised with the replay
buffer's mean and std and scaled (``learner.reward_norm``, ``reward_scale``), an
increasing function of the reward, which is all a screen needs, since it only ranks
(:meth:`Screen.select`, ``screen_spearman``, ``screen_top_quarter``). The learner already
trains the critic on the replay buffer, so :meth:`CriticModel.fit` trains nothing.

How a screen reaches the critic: an agent with a learner attaches a
:class:`LearnerCritic` to its screen (:meth:`egrl.screening.screen.Screen.attach_critic`);
at every refit (the start of a generation) the screen builds a :class:`CriticModel` with
it, and the model's fit takes a frozen copy of the critic as it is then
(:meth:`LearnerCritic.freeze`). The copy ranks every candidate of the generation and, at
its end, the maps that were paid, so ``screen_spearman`` measures a critic that had not
yet trained on them (the learner's updates of the generation come after its choices), as
the forest is measured on maps it was not fitted on. A resumed run restores the learner,
refits from it and continues identically. Until the learner has made its first update
(its buffer short of ``learner.burn_in``) the screen has no model: the agent's first
proposals are kept, as during the warmup.

Choices made here:

* ``min(Q1, Q2)``, not the mean: it is the value the actor maximises
  (``L_pi = -min_j Q_j``) and, taken at the top of a pool, the pessimistic head counters
  the winner's curse of keeping the maps whose value is most overestimated (the reason
  SAC and TD3 take the minimum). With the default shared encoder both heads read one
  embedding, and the two rank alike.
* With several learners (``learner.num_learners``), the critic of the lead learner: the
  one the portfolio's recent rollouts rate best (``EGRLAgent._lead_learner``), the same one
  that migrates into the population and makes the clean rollouts. Every learner trains on
  the same buffer; one critic costs one forward pass per candidate instead of one per
  learner.
* Maps enter the critic as clean one-hot actions ``[S, N, H, C]`` (the critic trains on
  noise-smoothed one-hots around them), in chunks of :data:`CHUNK` maps under
  ``torch.no_grad()`` on the learner's device.
* The earlier runs of ``screen.init_from`` and the description of ``screen.prior`` are
  not read: the critic knows the run's own graph and buffer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from egrl.screening.base import Domain, Measured

#: maps scored per critic forward pass
CHUNK = 128


def critic_scores(
    critic: torch.nn.Module, graph: Any, mask: torch.Tensor, maps: np.ndarray, chunk: int = CHUNK
) -> np.ndarray:
    """``min(Q1, Q2)`` float64 ``[B]`` of maps int ``[B, N, H]`` on the decision ``graph``.

    Args:
        critic: a twin-Q critic (``forward(x, edge_index, actions [S, N, H, C]) -> (q1,
            q2)``, each ``[S]``), e.g. :class:`policies.TwinQCritic`.
        graph: the decision graph (PyG ``Data``: ``x [N, F]``, ``edge_index [2, E]``).
        mask: bool ``[H, C]`` of real choices, on the critic's device.
        maps: int ``[B, N, H]``.
        chunk: maps per forward pass.
    """
    maps = np.asarray(maps, dtype=np.int64)
    device = mask.device
    nodes = int(graph.x.shape[0])
    if maps.ndim != 3 or maps.shape[1:] != (nodes, mask.shape[0]):
        raise ValueError(
            f"maps must be [B, {nodes}, {mask.shape[0]}] for this critic, got {list(maps.shape)}"
        )
    out = np.zeros(len(maps), dtype=np.float64)
    if len(maps) == 0:
        return out
    x, edge_index = graph.x.to(device), graph.edge_index.to(device)
    with torch.no_grad():
        for start in range(0, len(maps), max(int(chunk), 1)):
            actions = torch.as_tensor(maps[start : start + chunk], device=device)
            one_hot = F.one_hot(actions, num_classes=mask.shape[-1]).to(x.dtype) * mask
            q1, q2 = critic(x, edge_index, one_hot)
            out[start : start + len(actions)] = torch.minimum(q1, q2).double().cpu().numpy()
    return out


class LearnerCritic:
    """An agent's learned critic, as its screen reads it.

    Args:
        learners: the agent's learners (:class:`egrl.agents.egrl.sac.SACDiscrete`: ``critic``,
            ``mask``, ``num_updates``).
        graph: the run's decision graph.
        lead: the index of the learner whose critic ranks (the portfolio's lead); None:
            learner 0.
        chunk: maps per forward pass.

    The learner and its critic module are looked up at each use, so a critic a checkpoint
    rebuilt (:meth:`egrl.agents.egrl.sac.SACDiscrete.load_state_dict`) is the one read.
    """

    def __init__(
        self,
        learners: Sequence[Any],
        graph: Any,
        lead: Callable[[], int] | None = None,
        chunk: int = CHUNK,
    ) -> None:
        self.learners = learners
        self.graph = graph
        self.lead = lead if lead is not None else (lambda: 0)
        self.chunk = int(chunk)

    @property
    def learner(self) -> Any:
        """The learner whose critic ranks now."""
        return self.learners[int(self.lead())]

    @property
    def version(self) -> tuple[int, int]:
        """``(lead learner, its updates)``: the critic changed when this did."""
        lead = int(self.lead())
        return lead, int(self.learners[lead].num_updates)

    @property
    def trained(self) -> bool:
        """The lead learner has made at least one update (it is past its burn-in)."""
        return self.version[1] > 0

    def __call__(self, maps: np.ndarray) -> np.ndarray:
        """``min(Q1, Q2)`` float64 ``[B]`` of maps int ``[B, N, H]`` by the live critic."""
        learner = self.learner
        return critic_scores(learner.critic, self.graph, learner.mask, maps, self.chunk)

    def freeze(self) -> Callable[[np.ndarray], np.ndarray]:
        """The scores of the lead learner's critic as it is now: maps int ``[B, N, H]`` ->
        float64 ``[B]``, unchanged by the learner's later updates."""
        learner = self.learner
        critic = copy.deepcopy(learner.critic).eval()
        graph, mask, chunk = self.graph, learner.mask, self.chunk

        def scores(maps: np.ndarray) -> np.ndarray:
            return critic_scores(critic, graph, mask, maps, chunk)

        return scores


class CriticModel:
    """The cost model ``critic`` (:class:`egrl.screening.base.CostModel`): predictions
    are ``min(Q1, Q2)`` of the learner's critic as it was at :meth:`fit`, on the learner's
    scale (an increasing function of the reward).

    Args:
        seed: unused (nothing is drawn); the factory protocol passes it.
        critic: the agent's critic (:class:`LearnerCritic`).

    Raises:
        ValueError: no critic (the screen's agent attached none).
    """

    def __init__(self, seed: int, critic: LearnerCritic | None = None) -> None:
        if critic is None:
            raise ValueError(
                "screen 'critic' ranks with an agent's learned critic and none was attached "
                "(Screen.attach_critic)"
            )
        self.critic = critic
        self.scores: Callable[[np.ndarray], np.ndarray] | None = None

    def fit(self, data: Sequence[Measured]) -> None:
        """Take the critic as it is now; ``data`` is not read (the learner trains it)."""
        self.scores = self.critic.freeze()

    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        if self.scores is None:
            raise RuntimeError("CriticModel.predict before fit")
        return self.scores(maps)
