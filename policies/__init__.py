"""The models: Graph U-Net actor, twin-Q critic, Boltzmann chromosomes, the policy protocol."""

from policies.base import Policy, num_parameters, seeded_init
from policies.boltzmann import BoltzmannChromosome, ChromosomeView
from policies.categorical import choice_mask, entropy, one_hot_maps
from policies.critic import TwinQCritic
from policies.graph_unet import GraphUNetActor

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
