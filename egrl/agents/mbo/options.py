"""The parameters of ``agent=mbo`` (``configs/agent/mbo.yaml``), each with its rule.

:func:`egrl.agents.options.parse_options` fills :class:`MBOOptions` from the run's agent
section and checks every value against the rule its field carries
(:func:`egrl.validation.ruled`), then the share of the bandit against the searchers
(:data:`MBOOptions.RELATIONS`). What ``agent=mbo`` needs of the screen (a model, and no
``screen.search``: its depth of search is ``depth``) is the screen's capability check's
(:mod:`egrl.screening.capability`, from the agent class's ``needs_model``).
"""

from __future__ import annotations

from dataclasses import dataclass

from egrl.agents.mbo.searchers import SEARCHERS
from egrl.agents.options import STARTS, start_rule
from egrl.validation import FLAG, FRACTION, Rule, at_least, ruled

#: what the search does with a map the compiler refuses (``agent.refused``)
REFUSED = ("repair", "drop")
#: the first map paid: ``none`` (the first round's own), or a start map paid alone first
MBO_STARTS = ("none", *STARTS)
#: physics first (``agent.physics``): ``auto`` (on where the target has an NNP-I prior: an
#: external chip with ``hwmodel.params.prior``), ``on`` (also the built-in nnpi, its own
#: model), ``off`` (the screen's model alone)
PHYSICS = ("auto", "on", "off")
#: what the calibrated prior still misses (``agent.residual``): a ridge model on the
#: map's one-hot choices that the solve adds as per-choice costs, extra trees that
#: re-rank the solver's maps, or none
RESIDUALS = ("linear", "forest", "none")
#: how a physics round finds the maps it pays (``agent.acquire``): the solver, or the
#: searchers on the calibrated prior plus residual
ACQUIRERS = ("solver", "searchers")


def _share_fits(o: MBOOptions) -> str | None:
    """Why ``min_share`` is more than each searcher can get (``1 / len(searchers)``), or None."""
    if o.min_share > 1 / len(o.searchers):
        return (
            f"min_share={o.min_share} is invalid: expected a number in "
            f"[0, 1/{len(o.searchers)}] (1 / the number of searchers)"
        )
    return None


def _radii_ordered(o: MBOOptions) -> str | None:
    """Why the trust region's radii are out of order, or None."""
    if not (o.radius_min <= o.radius <= o.radius_max):
        return (
            f"radius={o.radius} is invalid with radius_min={o.radius_min} and radius_max="
            f"{o.radius_max}: expected radius_min <= radius <= radius_max"
        )
    return None


@dataclass(frozen=True)
class MBOOptions:
    """Parameters of ``agent=mbo`` (``configs/agent/mbo.yaml``).

    Attributes:
        depth: model calls per round (per paid batch), the starts included, >= 1.
        batch: maps paid per round, >= 1.
        steps: lock-step moves of the searchers per round, >= 1.
        searchers: names of :data:`~egrl.agents.mbo.searchers.SEARCHERS`, at least one.
        elites: the largest share of a searcher's starts taken from the best paid maps,
            in ``[0, 1]``; the rest are fresh maps.
        check: ask the target's compiler about every map the search makes (``False``:
            the model alone).
        refused: what the search does with a map the compiler refuses: ``drop`` (score it
            ``-inf``, never pay it) or ``repair`` (keep its repair instead; repairs pile
            up on the plateau of maps that read the compiler's own latency, and the search
            stalls there: on the example chip, 1.0000 against 1.2986 with ``drop``).
        trust_radius: None, or the most (unit, head) entries a scored map may differ in
            from the nearest of the best paid maps, >= 1.
        min_share: the least share of the model calls a searcher gets each round, in
            ``[0, 1 / len(searchers)]``.
        discount: the weight of past rounds in the bandit's counts, in ``(0, 1]``.
        spacing: the fewest (unit, head) entries in which two maps of a paid batch differ,
            >= 1 (1: any two distinct maps).
        gnn_width, gnn_depth: the ``egrl`` searcher's Graph U-Net policies: node
            embedding width (hidden and output) and depth (a quarter of the EA's width
            and half its depth: its GNNs are never trained, only evolved, and cost a
            third as much).
        start: ``none`` (the first round pays fresh maps), or a start of
            :data:`~egrl.agents.options.STARTS` (``prior``: the target's prior solved),
            paid alone as the run's first map, so that the searchers start from it.
            Physics first pays the prior's map first (``none`` reads as ``prior``).
        physics: one of :data:`PHYSICS` (:mod:`egrl.agents.mbo.physics`); the options
            below are physics first's.
        calibrate: fit the prior's figures to the readings each round (``False``: the
            datasheet as given).
        prior_weight: the calibration's pull towards the datasheet, >= 0
            (:func:`hwmodels.nnpi.calibrate.calibrate`).
        residual: one of :data:`RESIDUALS`.
        acquire: one of :data:`ACQUIRERS`.
        solutions: maps a physics round pays, >= 1.
        pool: maps solved per round before a forest residual keeps the best
            ``solutions`` of them (None: ``2 * solutions`` with a forest residual,
            ``solutions`` otherwise), >= 1.
        region: solve inside the trust region (``False``: anywhere, the read maps
            excluded).
        radius, radius_min, radius_max: the trust region's radius in units (a solved
            map differs from the nearest of the best ``anchors`` maps read in at most
            ``radius`` units), its least and its most; ``radius_min <= radius <=
            radius_max``.
        anchors: the best maps read that centre the trust region, >= 1.
        anywhere: how many of a round's solved maps are solved outside the trust region
            (over every unit, every map read excluded), the rest inside it, >= 0 (more
            than a round solves: all of them); none without a region.
        window: None (each solve over every unit), or the consecutive units each solve
            may change, the rest kept at the best map read (a large-neighbourhood search,
            exact in each window), >= 1.
        solve_time_s: CP-SAT's deterministic seconds of each solve, > 0 (one worker: the
            same map for the same run on any machine; the best map found so far is
            answered).
    """

    depth: int = ruled(at_least(1), 1000)
    batch: int = ruled(at_least(1), 20)
    steps: int = ruled(at_least(1), 10)
    searchers: list[str] = ruled(
        Rule(list, item=Rule(str, choices=tuple(sorted(SEARCHERS)))),
        default_factory=lambda: ["egrl"],
    )
    elites: float = ruled(FRACTION, 0.2)
    check: bool = ruled(FLAG, True)
    refused: str = ruled(Rule(str, choices=REFUSED), "drop")
    trust_radius: int | None = ruled(Rule(int, low=1, optional=True), None)
    min_share: float = ruled(FRACTION, 0.1)
    discount: float = ruled(Rule(float, low=0, high=1, low_open=True), 0.8)
    spacing: int = ruled(at_least(1), 1)
    gnn_width: int = ruled(at_least(1), 32)
    gnn_depth: int = ruled(at_least(1), 2)
    start: str = ruled(start_rule(MBO_STARTS), "none")
    physics: str = ruled(Rule(str, choices=PHYSICS), "auto")
    calibrate: bool = ruled(FLAG, True)
    prior_weight: float = ruled(Rule(float, low=0), 1.0)
    residual: str = ruled(Rule(str, choices=RESIDUALS), "linear")
    acquire: str = ruled(Rule(str, choices=ACQUIRERS), "solver")
    solutions: int = ruled(at_least(1), 8)
    pool: int | None = ruled(Rule(int, low=1, optional=True), None)
    region: bool = ruled(FLAG, True)
    radius: int = ruled(at_least(1), 4)
    radius_min: int = ruled(at_least(1), 1)
    radius_max: int = ruled(at_least(1), 64)
    anchors: int = ruled(at_least(1), 3)
    anywhere: int = ruled(at_least(0), 2)
    window: int | None = ruled(Rule(int, low=1, optional=True), None)
    solve_time_s: float = ruled(Rule(float, low=0, low_open=True), 0.5)

    #: the checks of fields that go together (:func:`egrl.validation.field_problems`)
    RELATIONS = (_share_fits, _radii_ordered)

    @property
    def solved_pool(self) -> int:
        """Maps solved per physics round (``pool``, or its default)."""
        if self.pool is not None:
            return self.pool
        return 2 * self.solutions if self.residual == "forest" else self.solutions
