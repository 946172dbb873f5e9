"""Model-based optimisation (``agent=mbo``): the agent (:mod:`egrl.agents.mbo.agent`), the
searchers it runs on the cost model (:mod:`egrl.agents.mbo.searchers`) and the bandit that
shares the model calls among them (:mod:`egrl.agents.mbo.bandit`)."""
