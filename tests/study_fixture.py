"""A study small enough for the runner's test: random search and greedy-DP on resnet18."""

from __future__ import annotations

from pathlib import Path

from studies.render import markdown_table
from studies.runner import RunSpec, read_runs
from studies.stats import format_mean_std

SECTION = "fixture"


def plan(cfg, out: Path):
    """One stage of ``agents x seeds`` runs, then a second that needs the first's seed 0."""
    common = (f"workload={cfg.workload}", f"budget={cfg.budget}")
    yield [
        RunSpec(agent, seed, (f"agent={agent}", *common))
        for agent in cfg.agents
        for seed in range(cfg.seeds)
    ]
    first = cfg.agents[0]
    yield [RunSpec(f"{first}-again", 0, (f"agent={first}", *common), after=f"{first}/seed0")]


def analyse(cfg, out: Path) -> dict[str, list[float]]:
    """Each group's final best speedups over its seeds."""
    groups = [*cfg.agents, f"{cfg.agents[0]}-again"]
    return {g: [r.final_speedup for r in read_runs(out / g).runs] for g in groups}


def render(cfg, result: dict[str, list[float]], page) -> str:
    rows = [(g, len(v), format_mean_std(v)) for g, v in result.items()]
    table = markdown_table(("group", "runs", "final speedup"), rows)
    return f"## Fixture\n\n{table}\n\n```\n{page.command}\n```\n"
