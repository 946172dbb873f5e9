"""EGRL: Evolutionary Graph Reinforcement Learning for mapping workloads onto hardware."""

import workloads
from egrl.env import Env, Evaluation, make_env

__all__ = ["Env", "Evaluation", "make_env", "workloads"]
__version__ = "0.1.0"
