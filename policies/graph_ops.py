"""Graph plumbing shared by the actor and the critic.

Decision graphs arrive directed (producer -> consumer). Inside the GNNs they are read
as undirected with one self-loop per node; :class:`EdgeCache` keeps that conversion for
the last few graphs so repeated calls on the same graph (the trainer calls a policy many
times per generation on one workload) do not redo it.

The attention convolutions sum their messages with :func:`weighted_sum`, which never
holds the per-edge messages ``[E, S, D]`` of a whole graph at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F
from torch_geometric.nn import GATConv, GATv2Conv, TopKPooling
from torch_geometric.utils import add_self_loops, coalesce, remove_self_loops, to_undirected


@dataclass
class GraphInput:
    """A decision graph (or a disjoint union of them) as the policies read it.

    Attributes:
        x: float ``[N, F]`` node features.
        edge_index: long ``[2, E]`` producer -> consumer edges.
        batch: long ``[N]`` graph id of each node (all zeros for one graph).
        num_graphs: ``G``, the number of graphs.
    """

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    num_graphs: int


def check_graph(x: Tensor, edge_index: Tensor, in_dim: int, where: str) -> None:
    """Raise a ``ValueError`` naming the problem if ``x``/``edge_index`` are malformed."""
    if x.dim() != 2 or x.size(1) != in_dim:
        raise ValueError(f"{where}: node features must be [N, {in_dim}], got {list(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{where}: node features must be floating point, got {x.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{where}: edge_index must be [2, E], got {list(edge_index.shape)}")
    if edge_index.dtype != torch.long:
        raise ValueError(f"{where}: edge_index must be int64, got {edge_index.dtype}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= x.size(0)):
        bad = int(((edge_index < 0) | (edge_index >= x.size(0))).any(dim=0).nonzero()[0])
        raise ValueError(
            f"{where}: edge {bad} ({edge_index[0, bad].item()} -> {edge_index[1, bad].item()}) "
            f"points outside the {x.size(0)} nodes"
        )


def graph_input(x: Tensor, edge_index: Tensor, batch: Tensor | None) -> GraphInput:
    """Bundle a graph; ``batch=None`` means one graph."""
    if batch is None:
        batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        num_graphs = 1
    else:
        if batch.shape != (x.size(0),):
            raise ValueError(f"batch must be [N={x.size(0)}], got {list(batch.shape)}")
        num_graphs = int(batch.max()) + 1 if batch.numel() else 1
    return GraphInput(x=x, edge_index=edge_index, batch=batch, num_graphs=num_graphs)


def undirected_with_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Both directions of every edge plus exactly one self-loop per node: long ``[2, E']``."""
    edges = to_undirected(edge_index, num_nodes=num_nodes)
    edges, _ = remove_self_loops(edges)
    edges, _ = add_self_loops(edges, num_nodes=num_nodes)
    return edges


def square_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Sparsity pattern of ``A @ A`` (Gao & Ji's connectivity augmentation): long ``[2, E2]``.

    ``edge_index`` must already hold a self-loop per node, so the result keeps every
    original edge and adds the 2-hop ones. Vectorized join of edges ``i->j`` with ``j->k``.
    """
    edges = coalesce(edge_index, num_nodes=num_nodes)  # sorted by source
    src, dst = edges
    degree = torch.bincount(src, minlength=num_nodes)
    start = torch.cumsum(degree, 0) - degree
    reps = degree[dst]  # edge i->j continues along every edge leaving j
    first = torch.repeat_interleave(src, reps)
    offset = torch.arange(int(reps.sum()), device=edges.device)
    offset = offset - torch.repeat_interleave(torch.cumsum(reps, 0) - reps, reps)
    last = dst[torch.repeat_interleave(start[dst], reps) + offset]
    return coalesce(torch.stack([first, last]), num_nodes=num_nodes)


class EdgeCache:
    """Remembers ``transform(edge_index, num_nodes)`` for the last ``size`` edge tensors.

    The transform is :func:`undirected_with_self_loops` unless another is given (the Graph
    U-Net also keeps :func:`square_adjacency` of its first level). An entry is reused only
    for the very same tensor object at the same version (the cache holds a reference, so
    its storage cannot be recycled for another graph).
    """

    def __init__(self, size: int = 4, transform: Callable[[Tensor, int], Tensor] | None = None):
        self.size = size
        self.transform = transform or undirected_with_self_loops
        self._entries: list[tuple[Tensor, int, int, Tensor]] = []

    def __call__(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        for key, version, nodes, value in self._entries:
            if key is edge_index and version == edge_index._version and nodes == num_nodes:
                return value
        value = self.transform(edge_index, num_nodes)
        self._entries = [(edge_index, edge_index._version, num_nodes, value)] + self._entries
        del self._entries[self.size :]
        return value

    def __deepcopy__(self, memo) -> EdgeCache:
        return EdgeCache(self.size, self.transform)


ATTENTION = {"gatv2": GATv2Conv, "gat": GATConv}


def attention_conv(kind: str, hidden: int, heads: int) -> nn.Module:
    """A ``hidden -> hidden`` multi-head attention convolution.

    The ``heads`` heads each produce ``hidden // heads`` channels and are concatenated back
    to ``hidden`` (the Transformer split), so the per-edge work is ``hidden`` floats instead
    of ``heads * hidden``. ``kind`` is ``"gatv2"`` (Brody et al.'s dynamic attention, the
    actor's default) or ``"gat"`` (Velickovic et al.; per-node scores, cheaper; the
    critic's default). Every edge set the networks
    hand it already holds one self-loop per node.
    """
    if kind not in ATTENTION:
        raise ValueError(f"unknown attention {kind!r}; expected one of {sorted(ATTENTION)}")
    if heads < 1 or hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a positive multiple of heads ({heads})")
    return ATTENTION[kind](hidden, hidden // heads, heads=heads, concat=True, add_self_loops=False)


def edge_softmax(scores: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """Softmax of edge scores ``[E, ...]`` over the edges entering each node.

    ``dst`` long ``[E]``: the node each edge enters. Node-major: the trailing dimensions
    (samples, attention heads) are independent softmaxes over the same edges. As in
    :func:`torch_geometric.utils.softmax`, the (detached) largest score entering a node is
    subtracted first and ``1e-16`` is added to the denominator.
    """
    shape = (num_nodes, *scores.shape[1:])
    index = dst.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    top = scores.new_full(shape, float("-inf"))
    top = top.scatter_reduce_(0, index, scores.detach(), "amax")
    exp = (scores - top.index_select(0, dst)).exp()
    total = exp.new_zeros(shape).index_add(0, dst, exp) + 1e-16
    return exp / total.index_select(0, dst)


#: floats of one block of per-edge messages in :func:`weighted_sum` (1 MiB of float32)
MESSAGE_BLOCK = 1 << 18


def weighted_sum(x: Tensor, alpha: Tensor, src: Tensor, dst: Tensor) -> Tensor:
    """Attention-weighted messages summed at their destinations: float ``[N, S, K, W]``.

    ``out[d] = sum over edges e with dst[e] = d of alpha[e, ..., None] * x[src[e]]``,
    exactly what ``zeros.index_add(0, dst, x.index_select(0, src) * alpha[..., None])``
    computes, values and gradients bit for bit (every node's sum is taken over its edges in
    edge order, as ``index_add`` does). The messages are made :data:`MESSAGE_BLOCK` floats
    at a time, in the forward and in the backward, so the ``[E, S, K, W]`` tensors of the
    whole graph are never held: on the 10,000-node programs of the TPU study, with the
    critic's ``S = 24`` maps of a minibatch, each was about 0.5 GB, and most of an update's
    time went into allocating them.

    Args:
        x: float ``[N, S, K, W]``: node features (``S`` samples, ``K`` heads of ``W``).
        alpha: float ``[E, S, K]``: each edge's weight.
        src, dst: long ``[E]``: each edge's source and destination node.
    """
    if src.numel() <= _block_edges(x):  # one block: autograd's own ops, without the overhead
        messages = x.index_select(0, src) * alpha.unsqueeze(-1)
        return messages.new_zeros(x.shape).index_add(0, dst, messages)
    return _WeightedSum.apply(x, alpha, src, dst)


class _WeightedSum(torch.autograd.Function):
    """:func:`weighted_sum` with a backward that recomputes the messages block by block."""

    @staticmethod
    def forward(ctx, x: Tensor, alpha: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        step = _block_edges(x)
        out = x.new_zeros(x.shape)
        for lo in range(0, src.numel(), step):
            a = alpha[lo : lo + step].unsqueeze(-1)
            out.index_add_(0, dst[lo : lo + step], x.index_select(0, src[lo : lo + step]) * a)
        ctx.save_for_backward(x, alpha, src, dst)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        # the gradients autograd takes through index_add, the product and index_select
        x, alpha, src, dst = ctx.saved_tensors
        want_x, want_alpha = ctx.needs_input_grad[:2]
        grad_x = x.new_zeros(x.shape) if want_x else None
        grad_alpha = alpha.new_empty(alpha.shape) if want_alpha else None
        step = _block_edges(x)
        for lo in range(0, src.numel(), step):
            at = slice(lo, lo + step)
            upstream = grad.index_select(0, dst[at])  # [e, S, K, W]
            if want_x:
                grad_x.index_add_(0, src[at], upstream * alpha[at].unsqueeze(-1))
            if want_alpha:
                grad_alpha[at] = (upstream * x.index_select(0, src[at])).sum(-1)
        return grad_x, grad_alpha, None, None


def _block_edges(x: Tensor) -> int:
    """Edges per block of :func:`weighted_sum`: :data:`MESSAGE_BLOCK` floats of messages."""
    return max(1, MESSAGE_BLOCK // max(1, math.prod(x.shape[1:])))


def _check_shared_conv(conv: nn.Module) -> None:
    """Refuse convolution settings :func:`attention_on_copies` does not implement."""
    if not isinstance(conv, (GATConv, GATv2Conv)):
        raise TypeError(f"attention_on_copies: expected GATConv or GATv2Conv, got {type(conv)}")
    unsupported = {
        "concat": not conv.concat,
        "add_self_loops": conv.add_self_loops,
        "edge_dim": conv.edge_dim is not None,
        "residual": getattr(conv, "res", None) is not None,
        "dropout": conv.training and conv.dropout > 0,
        "bipartite": getattr(conv, "lin", True) is None,
    }
    bad = [name for name, flag in unsupported.items() if flag]
    if bad:
        raise ValueError(f"attention_on_copies: {type(conv).__name__} with {bad} is not supported")


def attention_on_copies(conv: nn.Module, h: Tensor, edges: Tensor) -> Tensor:
    """``conv`` applied to ``S`` copies of one graph at once: float ``[N, S, D]``.

    Computes what ``conv(h[:, s], edges)`` computes for every sample ``s`` (up to the order
    of floating-point sums), with the sample dimension inside each node's row: every
    gather and scatter runs over the ``E`` edges of the one graph with rows of ``S * D``
    floats, instead of over ``S * E`` edges of a folded disjoint union.

    Args:
        conv: a :class:`GATConv` or :class:`GATv2Conv` made by :func:`attention_conv`
            (concatenated heads, no added self-loops); its parameters are used as they are.
        h: float ``[N, S, D_in]`` node-major features of ``S`` samples.
        edges: long ``[2, E]`` edges of the one graph (already with self-loops).
    """
    _check_shared_conv(conv)
    nodes, samples = h.shape[:2]
    heads, width = conv.heads, conv.out_channels
    src, dst = edges[0], edges[1]
    if isinstance(conv, GATConv):
        x = conv.lin(h).view(nodes, samples, heads, width)
        score_src = (x * conv.att_src).sum(-1)  # [N, S, heads]
        score_dst = (x * conv.att_dst).sum(-1)
        scores = score_src.index_select(0, src) + score_dst.index_select(0, dst)
        scores = F.leaky_relu(scores, conv.negative_slope)  # [E, S, heads]
    else:
        x = conv.lin_l(h).view(nodes, samples, heads, width)
        right = x if conv.share_weights else conv.lin_r(h).view(nodes, samples, heads, width)
        pair = x.index_select(0, src) + right.index_select(0, dst)
        scores = (F.leaky_relu(pair, conv.negative_slope) * conv.att).sum(-1)
    alpha = edge_softmax(scores, dst, nodes)
    out = weighted_sum(x, alpha, src, dst).view(nodes, samples, heads * width)
    return out if conv.bias is None else out + conv.bias


def top_k_pool(
    pool: TopKPooling, h: Tensor, edges: Tensor, batch: Tensor, num_graphs: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What ``pool(h, edges, batch=batch)`` computes (Gao & Ji's gPool), in a few tensor ops.

    Each node is scored ``y = sigmoid(h . p / ||p||)`` with the module's projection ``p``;
    each graph keeps its ``ceil(ratio * n)`` best-scoring nodes (PyG's rule: a ratio of 1
    or more keeps that many nodes), gated by their scores, and
    the edges between kept nodes, renumbered. The selection is PyG's (a descending sort,
    then a stable sort by graph); reading the module's own parameters keeps checkpoints
    unchanged, and no per-call bookkeeping objects are built.

    Args:
        pool: a :class:`TopKPooling` without ``min_score`` or multiplier.
        h: float ``[N, D]`` node features.
        edges: long ``[2, E]`` edges.
        batch: long ``[N]`` graph id of each node.
        num_graphs: ``G``.

    Returns:
        ``(h [K, D], edges [2, E'], batch [K], perm [K])``: ``perm`` holds the kept nodes'
        indices into ``h``, best first within each graph.
    """
    select = pool.select
    if select.min_score is not None or pool.multiplier != 1:
        raise ValueError("top_k_pool: TopKPooling with min_score or a multiplier is not supported")
    weight = select.weight
    score = select.act((h * weight).sum(dim=-1) / weight.norm(p=2, dim=-1))
    order = torch.sort(score, descending=True).indices
    counts = torch.bincount(batch, minlength=num_graphs)
    if select.ratio >= 1:  # PyG: a ratio of 1 or more is a number of nodes per graph
        keep = torch.full_like(counts, int(select.ratio))
    else:
        keep = (float(select.ratio) * counts.to(h.dtype)).ceil().long()
    if num_graphs == 1:
        perm = order[: int(keep[0])]
    else:
        order = order[torch.sort(batch[order], stable=True).indices]
        grouped = batch[order]
        rank = torch.arange(order.numel(), device=h.device) - (counts.cumsum(0) - counts)[grouped]
        perm = order[rank < keep[grouped]]
    h = h[perm] * score[perm].unsqueeze(-1)
    index = torch.full((score.numel(),), -1, dtype=torch.long, device=h.device)
    index[perm] = torch.arange(perm.numel(), device=h.device)
    renumbered = index[edges]
    edges = renumbered[:, (renumbered >= 0).all(dim=0)]
    return h, edges, batch[perm], perm
