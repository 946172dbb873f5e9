"""A MuZero-style planning agent for the TPU memory-mapping game (Wang et al., "Optimizing
Memory Mapping Using Deep Reinforcement Learning", arXiv:2305.07440, section 4.3).

The observation encoder (:mod:`~egrl.agents.muzero.encode`), the representation /
dynamics / prediction networks (:mod:`~egrl.agents.muzero.networks`), pUCT tree search
with the learned or the true dynamics (:mod:`~egrl.agents.muzero.mcts`, one game; the
same search over many games at once in flat arrays: :mod:`~egrl.agents.muzero.batched`),
self-play trajectories and the replay buffer (:mod:`~egrl.agents.muzero.replay`), and the agent
registered as ``agent=muzero`` (:mod:`~egrl.agents.muzero.agent`). See ``docs/planner.md``.
"""

from egrl.agents.muzero.agent import MuZeroAgent, MuZeroOptions
from egrl.agents.muzero.batched import BatchResult, batched_search
from egrl.agents.muzero.encode import Encoder, EncoderSpec
from egrl.agents.muzero.mcts import LearnedModel, SearchConfig, SearchResult, TrueModel, search
from egrl.agents.muzero.networks import MuZeroNet
from egrl.agents.muzero.replay import Replay, Trajectory

__all__ = [
    "BatchResult",
    "Encoder",
    "EncoderSpec",
    "LearnedModel",
    "MuZeroAgent",
    "MuZeroNet",
    "MuZeroOptions",
    "Replay",
    "SearchConfig",
    "SearchResult",
    "Trajectory",
    "TrueModel",
    "batched_search",
    "search",
]
