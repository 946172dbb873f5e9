"""The evolutionary half of EGRL: a mixed population of GNN and Boltzmann policies.

``MixedPopulation`` holds the members and runs one generation of Algorithm 2 at a time;
its operators live on a DEAP toolbox (``population.toolbox``) and can be swapped.
"""

from populations.mixed import BOLTZMANN, GNN, KINDS, GenerationReport, MixedPopulation
from populations.params import EvolutionParams

__all__ = ["BOLTZMANN", "GNN", "KINDS", "EvolutionParams", "GenerationReport", "MixedPopulation"]
