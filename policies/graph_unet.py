"""The Graph U-Net actor (Gao & Ji 2019, as used by EGRL section 3 and Table 2).

Shapes for a graph (or a batch of graphs) of ``N`` nodes with ``F`` features, ``H``
decision heads and ``C = max(num_choices)``::

    x [N, F] --Linear+ELU--> [N, hidden] --GATv2--> level 0
    level i (i = 1..depth): A <- A^2 pattern, gPool (TopK, keep ceil(ratio * n) nodes per graph),
                            GATv2 on the pooled graph
    decoder j = depth-1..0: gUnpool (scatter back to the kept indices, zeros elsewhere),
                            add the level-j skip, GATv2 on the level-j graph
    [N, hidden] --Linear+ELU--> [N, out] --one Linear per head--> logits [N, H, C]

Every attention convolution is ``GATv2Conv(hidden, hidden // heads, heads, concat=True)``:
``heads`` attention heads of ``hidden // heads`` channels concatenated back to ``hidden``
(``attention="gat"`` swaps in the cheaper ``GATConv``). Logits of choices a head
does not have are ``-inf``.

The convolutions and gPools are PyG modules (their parameters are the checkpoint's), run
through :func:`policies.graph_ops.attention_on_copies` and
:func:`policies.graph_ops.top_k_pool`: the same functions as the modules' ``forward`` in a
few tensor operations each (tested against the modules).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import TopKPooling

from policies.base import Policy
from policies.categorical import check_num_choices, choice_mask, mask_logits
from policies.graph_ops import (
    EdgeCache,
    attention_conv,
    attention_on_copies,
    check_graph,
    graph_input,
    square_adjacency,
    top_k_pool,
)


class GraphUNetActor(nn.Module, Policy):
    """Graph U-Net policy: one categorical per node and decision head.

    Args:
        in_dim: node feature width ``F``.
        num_choices: choices per decision head (NNP-I: ``[3, 3]``).
        hidden: width of every graph convolution (Table 2: 128).
        out: width of the node embedding before the heads (Table 2: 128).
        depth: number of pooling levels (Table 2: 4).
        heads: attention heads per convolution (Table 2: 4).
        pool_ratio: fraction of nodes each gPool keeps.
        attention: ``"gatv2"`` or ``"gat"`` (see :func:`attention_conv`).
    """

    def __init__(
        self,
        in_dim: int,
        num_choices: Sequence[int],
        hidden: int = 128,
        out: int = 128,
        depth: int = 4,
        heads: int = 4,
        pool_ratio: float = 0.5,
        attention: str = "gatv2",
    ):
        super().__init__()
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        if not 0.0 < pool_ratio <= 1.0:
            raise ValueError(f"pool_ratio must be in (0, 1], got {pool_ratio}")
        self.in_dim = in_dim
        self.num_choices = check_num_choices(num_choices)
        self.depth = depth
        self.embed = nn.Linear(in_dim, hidden)
        self.down = nn.ModuleList(
            attention_conv(attention, hidden, heads) for _ in range(depth + 1)
        )
        self.pools = nn.ModuleList(
            TopKPooling(hidden, ratio=pool_ratio, nonlinearity="sigmoid") for _ in range(depth)
        )
        self.up = nn.ModuleList(attention_conv(attention, hidden, heads) for _ in range(depth))
        self.project = nn.Linear(hidden, out)
        self.heads = nn.ModuleList(nn.Linear(out, c) for c in self.num_choices)
        self.register_buffer("mask", choice_mask(self.num_choices), persistent=False)
        self.act_fn = nn.ELU()
        self._edges = EdgeCache()
        self._squares = EdgeCache(transform=square_adjacency)

    @property
    def num_heads(self) -> int:
        return len(self.num_choices)

    def _block(self, conv: nn.Module, h: Tensor, edges: Tensor) -> Tensor:
        """Residual attention block ``h + ELU(conv(h))``: keeps node identity on dense levels.

        The convolution runs through :func:`attention_on_copies` (one copy), which computes
        what the PyG module's ``forward`` does without its per-call message-passing
        machinery: on graphs of tens to hundreds of nodes that machinery, not arithmetic,
        was most of a forward's time.
        """
        return h + self.act_fn(attention_on_copies(conv, h[:, None], edges)[:, 0])

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        """Logits float ``[N, H, C]`` for node features ``x [N, F]`` and edges ``[2, E]``.

        ``batch`` (long ``[N]``) separates the graphs of a PyG ``Batch``; pooling keeps
        a share of every graph.
        """
        check_graph(x, edge_index, self.in_dim, type(self).__name__)
        graph = graph_input(x, edge_index, batch)
        edges = self._edges(edge_index, x.size(0))
        batch = graph.batch

        h = self._block(self.down[0], self.act_fn(self.embed(x)), edges)
        skips, levels, perms = [], [], []
        for level, (pool, conv) in enumerate(zip(self.pools, self.down[1:])):
            skips.append(h)
            levels.append(edges)
            # the first level's A^2 is the same on every call for one graph: kept
            square = self._squares if level == 0 else square_adjacency
            edges = square(edges, h.size(0))
            h, edges, batch, perm = top_k_pool(pool, h, edges, batch, graph.num_graphs)
            h = self._block(conv, h, edges)
            perms.append(perm)
        for conv, skip, level, perm in zip(
            self.up, reversed(skips), reversed(levels), reversed(perms)
        ):
            h = skip.index_add(0, perm, h)  # gUnpool + skip connection
            h = self._block(conv, h, level)
        h = self.act_fn(self.project(h))
        width = self.mask.size(1)
        logits = torch.stack(
            [nn.functional.pad(head(h), (0, width - head.out_features)) for head in self.heads],
            dim=1,
        )
        return mask_logits(logits, self.mask)

    def policy_logits(self, data) -> Tensor:
        """Logits float ``[N, H, C]`` of the graph (or PyG ``Batch``) ``data``."""
        return self(data.x, data.edge_index, getattr(data, "batch", None))

    def log_distribution(self, data) -> Tensor:
        """Log-probabilities float ``[N, H, C]``; differentiable.

        Missing choices hold ``log(tiny)`` (about -87 in float32) instead of ``-inf`` and
        get no gradient, so ``probs * log_probs`` is 0 there rather than NaN.
        """
        logp = torch.log_softmax(self.policy_logits(data), dim=-1)
        return logp.masked_fill(~self.mask, math.log(torch.finfo(logp.dtype).tiny))
