"""Twin Q critic for the discrete SAC learner (EGRL Appendix D, Fujimoto et al.'s two heads).

Each of the two independent towers reads the state together with an action given as
(possibly noise-smoothed, possibly soft) one-hot scores ``[N, H, C]``::

    x [N, F] --Linear--> [N, hidden]  +  actions [N, H*C] --Linear (no bias)--> [N, hidden]
    --ELU--> depth x (h <- h + ELU(GAT(h)))                on the undirected graph with self-loops
    --global mean || global max pool--> [G, 2*hidden] --Linear+ELU--> [G, hidden] --Linear--> [G]

Several actions on the same graph (a minibatch of transitions that share the workload)
are evaluated at once by folding the sample dimension into a disjoint union of ``S``
copies of the graph: the state projection is computed once and broadcast, the
convolutions then run on one graph of ``S * N`` nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_max_pool, global_mean_pool

from policies.categorical import check_num_choices, choice_mask
from policies.graph_ops import EdgeCache, attention_conv, check_graph, fold_copies, graph_input


class QTower(nn.Module):
    """One Q head: ``(state, action) -> value`` per graph."""

    def __init__(
        self, in_dim: int, action_dim: int, hidden: int, depth: int, heads: int, attention: str
    ):
        super().__init__()
        self.state_in = nn.Linear(in_dim, hidden)
        self.action_in = nn.Linear(action_dim, hidden, bias=False)
        self.convs = nn.ModuleList(attention_conv(attention, hidden, heads) for _ in range(depth))
        self.readout = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ELU(), nn.Linear(hidden, 1))
        self.act_fn = nn.ELU()

    def forward(
        self, x: Tensor, actions: Tensor, edges: Tensor, batch: Tensor, num_graphs: int
    ) -> Tensor:
        """Values float ``[S * G]`` (sample-major).

        Args:
            x: float ``[N, F]`` node features, shared by all samples.
            actions: float ``[S, N, H*C]``.
            edges: long ``[2, S*E]`` the folded graph (see :func:`fold_copies`).
            batch: long ``[S*N]`` graph id of each folded node.
            num_graphs: ``S * G``.
        """
        samples, nodes = actions.shape[:2]
        h = self.state_in(x)[None] + self.action_in(actions)
        h = self.act_fn(h).reshape(samples * nodes, -1)
        for conv in self.convs:
            h = h + self.act_fn(conv(h, edges))
        pooled = torch.cat(
            [
                global_mean_pool(h, batch, size=num_graphs),
                global_max_pool(h, batch, size=num_graphs),
            ],
            dim=-1,
        )
        return self.readout(pooled).squeeze(-1)


class TwinQCritic(nn.Module):
    """Two independent Q towers over a decision graph and a multi-head action.

    Args:
        in_dim: node feature width ``F``.
        num_choices: choices per decision head; ``C = max(num_choices)``.
        hidden: tower width (Table 2: 128).
        depth: attention layers per tower (Table 2: 4).
        heads: attention heads per layer (Table 2: 4).
        attention: ``"gat"`` (default) or ``"gatv2"``. The critic runs on ``S`` copies of
            the graph per update, where GAT's per-node attention scores make a
            forward+backward several times cheaper than GATv2's per-edge ones.
    """

    def __init__(
        self,
        in_dim: int,
        num_choices: Sequence[int],
        hidden: int = 128,
        depth: int = 4,
        heads: int = 4,
        attention: str = "gat",
    ):
        super().__init__()
        self.in_dim = in_dim
        self.num_choices = check_num_choices(num_choices)
        self.register_buffer("mask", choice_mask(self.num_choices), persistent=False)
        action_dim = self.mask.numel()
        self.q1 = QTower(in_dim, action_dim, hidden, depth, heads, attention)
        self.q2 = QTower(in_dim, action_dim, hidden, depth, heads, attention)
        self._edges = EdgeCache()

    def forward(
        self, x: Tensor, edge_index: Tensor, actions: Tensor, batch: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Twin values ``(q1, q2)``.

        Args:
            x: float ``[N, F]``; edge_index: long ``[2, E]``; batch: long ``[N]`` or None.
            actions: float ``[N, H, C]`` (one action) or ``[S, N, H, C]`` (``S`` actions on
                the same graph). Entries of choices a head lacks are ignored.

        Returns:
            Each of ``q1``, ``q2`` is float

            * ``[G]`` for actions ``[N, H, C]`` (``G = 1`` when ``batch`` is None);
            * ``[S]`` for actions ``[S, N, H, C]`` and ``batch`` None;
            * ``[S, G]`` for actions ``[S, N, H, C]`` and a ``batch``.
        """
        check_graph(x, edge_index, self.in_dim, type(self).__name__)
        graph = graph_input(x, edge_index, batch)
        single = actions.dim() == 3
        stacked = actions[None] if single else actions
        expected = (x.size(0), *self.mask.shape)
        if stacked.dim() != 4 or tuple(stacked.shape[1:]) != expected:
            raise ValueError(
                f"{type(self).__name__}: actions must be [N, H, C] or [S, N, H, C] with "
                f"(N, H, C) = {expected}, got {list(actions.shape)}"
            )
        samples = stacked.size(0)
        flat = (stacked * self.mask).reshape(samples, x.size(0), -1).to(x.dtype)
        edges, folded = fold_copies(
            self._edges(edge_index, x.size(0)), graph.batch, x.size(0), graph.num_graphs, samples
        )
        groups = samples * graph.num_graphs
        q1 = self.q1(x, flat, edges, folded, groups).reshape(samples, graph.num_graphs)
        q2 = self.q2(x, flat, edges, folded, groups).reshape(samples, graph.num_graphs)
        if single:
            return q1[0], q2[0]
        if batch is None:
            return q1[:, 0], q2[:, 0]
        return q1, q2
