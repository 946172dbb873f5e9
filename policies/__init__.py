"""The models: Graph U-Net actor, twin-Q critic, Boltzmann chromosomes, the policy protocol.

The Graph U-Net actor and the twin-Q critic are built on PyTorch Geometric, which takes
seconds to import: they are loaded when first named (``policies.GraphUNetActor``), so that
a run whose agent has no GNN (ea with chromosomes, mbo, the baselines) never imports it.
"""

from importlib import import_module

from policies.base import Policy, num_parameters, seeded_init
from policies.boltzmann import BoltzmannChromosome, ChromosomeView
from policies.categorical import choice_mask, entropy, one_hot_maps

#: the names loaded on first use, and the module each lives in
_ON_FIRST_USE = {"GraphUNetActor": "policies.graph_unet", "TwinQCritic": "policies.critic"}

__all__ = [
    "BoltzmannChromosome",
    "ChromosomeView",
    "GraphUNetActor",
    "Policy",
    "TwinQCritic",
    "choice_mask",
    "entropy",
    "num_parameters",
    "one_hot_maps",
    "seeded_init",
]


def __getattr__(name: str):
    """``GraphUNetActor`` and ``TwinQCritic``, imported on first use (PEP 562)."""
    if name in _ON_FIRST_USE:
        return getattr(import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'policies' has no attribute {name!r}")
