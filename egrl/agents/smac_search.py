"""SMAC3's Bayesian optimisation with a random forest on the map, asked and told in
batches.

Each decision (unit x head) is one categorical hyperparameter of a ConfigSpace, over the
head's choices (``DRAM``, ``LLC``, ``SRAM`` on NNP-I). SMAC's hyperparameter-optimisation
facade models the reward with a random forest (its mean and spread, scikit-learn's trees
in SMAC 2.4) and picks each configuration by expected improvement, searched locally
and at random, after ``n_initial`` Sobol' configurations (the facade's default, ten per
hyperparameter, would be 1120 random maps on ResNet-50). The target is deterministic
to SMAC (one measurement per configuration). A generation asks ``batch``
configurations, measures them in one call and tells each its cost, the negated reward.

SMAC is an optional extra (``pip install -e ".[smac]"``), imported only when this agent
is built; the run does not let it configure logging. Its run history is written to
``RUN_DIR/smac3_output`` at each checkpoint. SMAC's state cannot be checkpointed without
pickle, so the agent records how many configurations each generation asked and the
costs it told; resuming rebuilds SMAC with the same seed and replays those asks and
tells (no hardware measurement, SMAC's own computation again), which restores it exactly
because SMAC draws only from its seeded random states, once its local search starts in an
order that does not follow the process's string-hash seed (:func:`ordered_maximizer`).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.agents import register_agent
from egrl.agents.ask_tell import AskTellHistory
from egrl.agents.base import SearchAgent
from egrl.agents.decisions import Decisions
from egrl.agents.options import STARTS, parse_options, resolve_start, start_mappings, start_rule
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import at_least, ruled

log = logging.getLogger(__name__)

#: SMAC's files in the run directory
OUTPUT_DIR = "smac3_output"
#: the first configuration: ``none`` (SMAC's initial design), or a start map
SMAC_STARTS = ("none", *STARTS)


@dataclass(frozen=True)
class SmacOptions:
    """Parameters of ``agent=smac``.

    Attributes:
        batch: configurations asked per generation (measured in one call).
        n_initial: Sobol' configurations before the forest models the rewards.
        start: ``none`` (the initial design only), or ``native`` (the compiler's map),
            ``initial`` (alias ``dram``), ``fallback`` or ``random``, added to the
            initial design as its first configuration.
    """

    batch: int = ruled(at_least(1), 20)
    n_initial: int = ruled(at_least(1), 20)
    start: str = ruled(start_rule(SMAC_STARTS), "none")


def import_smac():
    """The ``smac`` package, or an ImportError that says how to install it."""
    try:
        import smac  # optional dependency
    except ImportError as err:
        raise ImportError(
            "agent 'smac' needs the optional smac package (SMAC3): pip install -e \".[smac]\""
        ) from err
    logging.getLogger("smac").setLevel(logging.WARNING)
    return smac


def _measured_by_the_agent(config, seed: int = 0) -> float:
    """SMAC's target function, which SMAC calls only in its own loop (``optimize``): the
    agent asks and tells instead, measuring the maps through the run's ledger."""
    raise RuntimeError("agent 'smac' measures maps itself: SMAC's optimize() is not used")


def start_first_design(smac, scenario, n_configs: int, first: list):
    """SMAC's Sobol' initial design of ``n_configs`` configurations, the configurations
    ``first`` (the start map) before them (SMAC appends extra ones at the end)."""

    class StartFirst(smac.initial_design.SobolInitialDesign):
        def select_configurations(self) -> list:
            configs = super().select_configurations()
            return first + [c for c in configs if c not in first]

    return StartFirst(scenario, n_configs=n_configs, additional_configs=list(first))


def ordered_maximizer(smac, scenario):
    """The facade's acquisition maximizer (local and sorted random search), its local
    search started from its points in an order that does not depend on the process.

    SMAC 2.4 removes repeated start points through a ``set`` of configurations, whose hash
    is that of their text, so their order, and every draw of the search after it, follows
    the process's string-hash seed (``PYTHONHASHSEED``): two runs of one seed asked other
    maps, and a resumed run's replay asked other maps than the run it replayed, telling
    SMAC their costs. Here the start points keep the order SMAC's docstring describes: the
    lowest predicted costs first (ties broken by the search's own random state), then the
    additional start points, each configuration where it first occurs. One objective.
    """
    from smac.acquisition.maximizer.local_search import LocalSearch  # optional dependency
    from smac.utils.configspace import convert_configurations_to_array  # optional dependency

    class OrderedStarts(LocalSearch):
        def _get_init_points_from_previous_configs(
            self, previous_configs: list, n_points: int, additional_start_points: list | None
        ) -> list:
            best = []
            if self._acquisition_function.model is not None:
                x = convert_configurations_to_array(previous_configs)
                cost = self._acquisition_function.model.predict_marginalized(x)[0].ravel()
                ties = self._rng.rand(len(cost))
                best = [previous_configs[i] for i in np.lexsort((ties, cost))[:n_points]]
            more = [config for _, config in additional_start_points or []]
            return list(dict.fromkeys(best + more))

    maximizer = smac.HyperparameterOptimizationFacade.get_acquisition_maximizer(scenario)
    default = maximizer._local_search
    maximizer._local_search = OrderedStarts(
        scenario.configspace,
        max_steps=default._max_steps,
        n_steps_plateau_walk=default._n_steps_plateau_walk,
        seed=scenario.seed,
        n_jobs=default.n_jobs,
    )
    return maximizer


@register_agent("smac")
class SmacAgent(SearchAgent):
    """SMAC3's random-forest Bayesian optimisation with ask/tell in batches (see the
    module docstring)."""

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(SmacOptions, cfg)
        self.start = resolve_start(o.start, env, self.name, SMAC_STARTS)
        self.smac_module = import_smac()
        self.seed = int(self.rng.integers(0, 2**31 - 1))
        self.start_map = None  # int64 [N, H]; None: SMAC's initial design alone
        if self.start != "none":
            limit = cfg.prior_time_limit_s
            self.start_map = start_mappings(env, self.start, 1, self.rng, limit)[0]
        self.decisions = Decisions(env)
        self.smac = None  # built at the first generation or on resume
        self._scratch = None  # a temporary output directory without a run directory
        self.history = AskTellHistory("costs")

    def _build(self):
        """A fresh SMAC facade over the map's configuration space, seeded with :attr:`seed`."""
        from ConfigSpace import (  # optional dependency
            Categorical,
            Configuration,
            ConfigurationSpace,
        )

        facade = self.smac_module.HyperparameterOptimizationFacade
        space = ConfigurationSpace(seed=self.seed)
        space.add(
            [
                Categorical(n, self.decisions.labels[self.decisions.head(i)])
                for i, n in enumerate(self.decisions.names)
            ]
        )
        if self.run_dir is not None:
            output = self.run_dir / OUTPUT_DIR
        else:
            self._scratch = self._scratch or tempfile.TemporaryDirectory(prefix="egrl-smac-")
            output = Path(self._scratch.name)
        scenario = self.smac_module.Scenario(
            space,
            deterministic=True,
            n_trials=2**31 - 1,  # the run's budget decides when to stop
            seed=self.seed,
            output_directory=output,
        )
        first = (
            []
            if self.start_map is None
            else [Configuration(space, self.decisions.values(self.start_map))]
        )
        design = start_first_design(self.smac_module, scenario, self.options.n_initial, first)
        return facade(
            scenario,
            _measured_by_the_agent,
            initial_design=design,
            acquisition_maximizer=ordered_maximizer(self.smac_module, scenario),
            overwrite=True,
            logging_level=False,
        )

    def _tell(self, infos: list, costs: np.ndarray) -> None:
        """Tell the first ``len(costs)`` configurations their costs (float64 ``[B]``)."""
        value = self.smac_module.runhistory.dataclasses.TrialValue
        for info, cost in zip(infos, costs):
            self.smac.tell(info, value(cost=float(cost)), save=False)

    def step(self) -> dict:
        if self.smac is None:
            with self.timer("evolution"):
                self.smac = self._build()
        n = min(self.options.batch, self.ledger.remaining)
        with self.timer("evolution"):
            infos = [self.smac.ask() for _ in range(n)]
        ev = self.ledger.evaluate(
            np.stack([self.decisions.mapping(i.config) for i in infos]), "smac"
        )
        costs = -np.asarray(ev.reward, dtype=np.float64)
        with self.timer("evolution"):
            self._tell(infos, costs)
        self.history.add(n, costs)
        return {}

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """The checkpoint, and SMAC's run history in ``RUN_DIR/smac3_output``."""
        if self.smac is not None:
            self.smac.optimizer.save()
        return super().save_checkpoint()

    def agent_state(self) -> dict:
        return {"seed": self.seed, **self.history.state_dict()}

    def load_agent_state(self, state: dict) -> None:
        """Rebuild SMAC and replay the recorded asks and tells (no measurements)."""
        self.seed = int(state["seed"])
        self.smac = self._build()
        self.history.replay(state, self.smac.ask, self._tell)
