"""Wall-clock timings of the policies on random decision graphs.

``python -m policies.timing --threads 1 2`` logs, for each thread count, the forward
time of :class:`GraphUNetActor` on graphs of 57, 185 and 400 nodes and the
forward+backward time of :class:`TwinQCritic` on 24 actions over one 185-node graph.
Each figure is the median and the minimum over ``--repeats`` calls after two warm-up calls.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

import torch
from torch_geometric.data import Data

from policies.critic import TwinQCritic
from policies.graph_unet import GraphUNetActor

log = logging.getLogger(__name__)


def random_graph(num_nodes: int, in_dim: int, generator: torch.Generator) -> Data:
    """A chain of ``num_nodes`` layers plus ``num_nodes // 4`` random forward skip edges."""
    src = torch.arange(num_nodes - 1)
    chain = torch.stack([src, src + 1])
    extra = torch.randint(0, num_nodes, (2, num_nodes // 4), generator=generator)
    extra = torch.sort(extra, dim=0).values
    extra = extra[:, extra[0] < extra[1]]
    scale = 10 ** (7 * torch.rand(num_nodes, in_dim, generator=generator))
    x = torch.log1p(torch.rand(num_nodes, in_dim, generator=generator) * scale)
    return Data(x=x, edge_index=torch.cat([chain, extra], dim=1))


def time_call(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, min) seconds of ``fn()`` over ``repeats`` calls after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def actor_forward(num_nodes: int, attention: str, seed: int = 0) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    actor = GraphUNetActor(19, [3, 3], attention=attention).eval()
    graph = random_graph(num_nodes, 19, gen)

    def run():
        with torch.no_grad():
            return actor(graph.x, graph.edge_index)

    return run


def critic_step(num_nodes: int, samples: int, attention: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    critic = TwinQCritic(19, [3, 3], attention=attention)
    graph = random_graph(num_nodes, 19, gen)
    maps = torch.randint(0, 3, (samples, num_nodes, 2), generator=gen)
    actions = torch.nn.functional.one_hot(maps, 3).float()

    def run():
        critic.zero_grad()
        q1, q2 = critic(graph.x, graph.edge_index, actions)
        (q1.square().mean() + q2.square().mean()).backward()

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--attention", default="gatv2")
    parser.add_argument("--critic-attention", default="gat")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for nodes in (57, 185, 400):
            med, low = time_call(actor_forward(nodes, args.attention), args.repeats)
            log.info(
                "threads=%d actor forward N=%d: %.1f ms (min %.1f)",
                threads,
                nodes,
                med * 1e3,
                low * 1e3,
            )
        med, low = time_call(critic_step(185, 24, args.critic_attention), max(3, args.repeats // 4))
        log.info(
            "threads=%d critic fwd+bwd 24 x N=185: %.1f ms (min %.1f)",
            threads,
            med * 1e3,
            low * 1e3,
        )


if __name__ == "__main__":
    main()
