"""Twin Q critic for the discrete SAC learner (EGRL Appendix D, Fujimoto et al.'s two heads).

A Q head reads the state together with an action given as (possibly noise-smoothed,
possibly soft) one-hot scores ``[N, H, C]``::

    encoder: x [N, F] --Linear--> [N, hidden]  +  actions [N, H*C] --Linear (no bias)--> [N, hidden]
             --ELU--> depth x (h <- h + ELU(GAT(h)))        on the undirected graph with self-loops
             --global mean || global max pool--> [G, 2*hidden]
    readout: --Linear+ELU--> [G, hidden] --Linear--> [G]

``shared_encoder=False`` (EGRL's twin critic, the default): two independent towers, each
an encoder and a readout. ``shared_encoder=True``: one encoder feeds both readouts, which
halves the critic's work; the two heads then differ only in their readouts.

Several actions on the same graph (a minibatch of transitions that share the workload) are
evaluated at once: the state projection is computed once and broadcast, and the features
of the ``S`` samples are held node-major, ``[N, S, hidden]``, so every convolution runs
over the one graph's edges with rows of ``S * hidden`` floats
(:func:`~policies.graph_ops.attention_on_copies`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_max_pool, global_mean_pool

from policies.categorical import check_num_choices, choice_mask
from policies.graph_ops import (
    EdgeCache,
    attention_conv,
    attention_on_copies,
    check_graph,
    graph_input,
)


class QEncoder(nn.Module):
    """``(state, S actions) -> pooled graph embeddings [G, S, 2 * hidden]``."""

    def __init__(
        self, in_dim: int, action_dim: int, hidden: int, depth: int, heads: int, attention: str
    ):
        super().__init__()
        self.state_in = nn.Linear(in_dim, hidden)
        self.action_in = nn.Linear(action_dim, hidden, bias=False)
        self.convs = nn.ModuleList(attention_conv(attention, hidden, heads) for _ in range(depth))
        self.act_fn = nn.ELU()

    def encode(
        self, x: Tensor, actions: Tensor, edges: Tensor, batch: Tensor, num_graphs: int
    ) -> Tensor:
        """Pooled embeddings float ``[G, S, 2 * hidden]`` (mean then max over each graph's nodes).

        Args:
            x: float ``[N, F]`` node features, shared by all samples.
            actions: float ``[N, S, H*C]`` node-major actions.
            edges: long ``[2, E]`` the graph's edges with one self-loop per node.
            batch: long ``[N]`` graph id of each node.
            num_graphs: ``G``.
        """
        h = self.act_fn(self.state_in(x)[:, None] + self.action_in(actions))  # [N, S, hidden]
        for conv in self.convs:
            h = h + self.act_fn(attention_on_copies(conv, h, edges))
        nodes, samples, width = h.shape
        if num_graphs == 1:
            pooled = torch.cat([h.mean(0), h.amax(0)], dim=-1)[None]
        else:
            flat = h.reshape(nodes, samples * width)
            pooled = torch.cat(
                [
                    global_mean_pool(flat, batch, size=num_graphs).view(-1, samples, width),
                    global_max_pool(flat, batch, size=num_graphs).view(-1, samples, width),
                ],
                dim=-1,
            )
        return pooled


def q_readout(hidden: int) -> nn.Sequential:
    """``[..., 2 * hidden] -> [..., 1]``: the value head on a pooled embedding."""
    return nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ELU(), nn.Linear(hidden, 1))


class QTower(QEncoder):
    """One independent Q head: an encoder and its readout."""

    def __init__(
        self, in_dim: int, action_dim: int, hidden: int, depth: int, heads: int, attention: str
    ):
        super().__init__(in_dim, action_dim, hidden, depth, heads, attention)
        self.readout = q_readout(hidden)

    def forward(
        self, x: Tensor, actions: Tensor, edges: Tensor, batch: Tensor, num_graphs: int
    ) -> Tensor:
        """Values float ``[G, S]`` (arguments as :meth:`QEncoder.encode`)."""
        return self.readout(self.encode(x, actions, edges, batch, num_graphs)).squeeze(-1)


class TwinQCritic(nn.Module):
    """Two Q heads over a decision graph and a multi-head action.

    Args:
        in_dim: node feature width ``F``.
        num_choices: choices per decision head; ``C = max(num_choices)``.
        hidden: encoder width (Table 2: 128; the learner's ``critic_hidden``, else the
            policy's).
        depth: attention layers per encoder (Table 2: 4; the learner's ``critic_depth``,
            else the policy's).
        heads: attention heads per layer (Table 2: 4).
        attention: ``"gat"`` (default) or ``"gatv2"``. GAT's per-node attention scores
            make a forward+backward over ``S`` samples cheaper than GATv2's per-edge ones.
        shared_encoder: one encoder for both heads (``True``) or one per head (``False``,
            two independent towers as in EGRL). Checkpoints of one do not load into the
            other (:meth:`shares_encoder` tells a state dict's kind).
    """

    def __init__(
        self,
        in_dim: int,
        num_choices: Sequence[int],
        hidden: int = 128,
        depth: int = 4,
        heads: int = 4,
        attention: str = "gat",
        shared_encoder: bool = False,
    ):
        super().__init__()
        self.in_dim = in_dim
        self.num_choices = check_num_choices(num_choices)
        self.shared_encoder = bool(shared_encoder)
        self.sizes = {"hidden": hidden, "depth": depth, "heads": heads, "attention": attention}
        self.register_buffer("mask", choice_mask(self.num_choices), persistent=False)
        action_dim = self.mask.numel()
        if self.shared_encoder:
            self.encoder = QEncoder(in_dim, action_dim, hidden, depth, heads, attention)
            self.readout1 = q_readout(hidden)
            self.readout2 = q_readout(hidden)
        else:
            self.q1 = QTower(in_dim, action_dim, hidden, depth, heads, attention)
            self.q2 = QTower(in_dim, action_dim, hidden, depth, heads, attention)
        self._edges = EdgeCache()

    def with_encoder(self, shared: bool) -> TwinQCritic:
        """A new critic of the same sizes with a shared (or two) encoder(s), freshly
        initialised from the global generator, on this critic's device."""
        return self.with_layout(shared, self.sizes["hidden"], self.sizes["depth"])

    def with_layout(self, shared: bool, hidden: int, depth: int) -> TwinQCritic:
        """A new critic with a shared (or two) encoder(s) of ``hidden`` x ``depth`` (this
        critic's heads and attention), freshly initialised from the global generator, on
        this critic's device."""
        sizes = {**self.sizes, "hidden": int(hidden), "depth": int(depth)}
        critic = TwinQCritic(self.in_dim, self.num_choices, shared_encoder=shared, **sizes)
        return critic.to(self.mask.device)

    @property
    def layout(self) -> dict:
        """``{"shared": bool, "hidden": int, "depth": int}``: what :meth:`layout_of` reads."""
        return {
            "shared": self.shared_encoder,
            "hidden": self.sizes["hidden"],
            "depth": self.sizes["depth"],
        }

    @staticmethod
    def shares_encoder(state_dict: dict) -> bool:
        """Whether ``state_dict`` (of a :class:`TwinQCritic`) holds a shared encoder."""
        return any(str(key).startswith("encoder.") for key in state_dict)

    @staticmethod
    def layout_of(state_dict: dict) -> dict:
        """The encoder layout of a :class:`TwinQCritic`'s ``state_dict``: ``{"shared":
        bool, "hidden": int, "depth": int}`` (width and attention layers per encoder)."""
        shared = TwinQCritic.shares_encoder(state_dict)
        prefix = "encoder." if shared else "q1."
        hidden = int(state_dict[f"{prefix}state_in.weight"].shape[0])
        convs = {
            str(key)[len(prefix) :].split(".")[1]
            for key in state_dict
            if str(key).startswith(f"{prefix}convs.")
        }
        return {"shared": shared, "hidden": hidden, "depth": len(convs)}

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
        node_major = (stacked * self.mask).transpose(0, 1).reshape(x.size(0), samples, -1)
        inputs = (
            x,
            node_major.to(x.dtype),
            self._edges(edge_index, x.size(0)),
            graph.batch,
            graph.num_graphs,
        )
        if self.shared_encoder:
            pooled = self.encoder.encode(*inputs)
            q1 = self.readout1(pooled).squeeze(-1)
            q2 = self.readout2(pooled).squeeze(-1)
        else:
            q1, q2 = self.q1(*inputs), self.q2(*inputs)
        q1, q2 = q1.T, q2.T  # [S, G]
        if single:
            return q1[0], q2[0]
        if batch is None:
            return q1[:, 0], q2[:, 0]
        return q1, q2
