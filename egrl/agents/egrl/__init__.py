"""EGRL (Khadka et al., "Optimizing Memory Placement using Evolutionary Graph Reinforcement
Learning", arXiv:2007.07298, 2020) and its ablations ``ea`` and ``pg``, in one folder.

- :mod:`~egrl.agents.egrl.agent`: the agent, one generation of Algorithm 2 (Appendix C);
- :mod:`~egrl.agents.egrl.sac`: the SAC-discrete learner (Appendix D);
- :mod:`~egrl.agents.egrl.portfolio`: several learners and the UCB choice of who rolls out;
- :mod:`~egrl.agents.egrl.warm_start`: a start map put into the policies;
- :mod:`~egrl.agents.egrl.init_from`: fine-tuning from a trained policy;
- :mod:`~egrl.agents.egrl.pretrain`: pre-training on several workloads;
- :mod:`~egrl.agents.egrl.transfer`: zero-shot evaluation of policy snapshots.

The population (Boltzmann chromosomes and GNNs, evolution, migration) is the top-level
:mod:`populations` package and the policies :mod:`policies`; what every agent shares (the
environment, the run directory, the measuring loop) stays at the top of :mod:`egrl`.
Nothing is imported here: ``egrl.agents.egrl.agent`` registers the agents.
"""
