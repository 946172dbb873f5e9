"""``gnn``: a graph network over the workload graph and the map, as a screen's cost model.

Every decision unit is a node of the workload's decision graph (``Domain.graph``). A node
reads its own features (``graph.x``, standardised) and the one-hot of its choice of each
head; a few graph convolutions (GCN, on the graph with its edges taken both ways) mix
neighbouring units; the nodes are pooled (mean and max) and, beside the target's
description of the map (``Featurizer.describe``, standardised), an MLP predicts the
map's reward, to which a linear function of the description is added. Nothing in it
depends on the number of units, so one model fits on several workloads of a target at
once (``screen.init_from``) and ranks maps of a workload it never saw: what a choice
costs next to a large or a memory-bound layer carries across workloads, where a column
of a one-hot map does not.

All ``B`` maps of a minibatch share their workload's graph, so a layer is one sparse
product of the normalised adjacency ``[N, N]`` with the node features of all maps
``[N, B * F]`` (nodes first): nothing loops over maps.

Training: Adam on the mean squared error of the standardised reward, a fixed number of
minibatch steps (``steps``, whatever the number of maps, so a fit at the warmup takes as
long as one on ``max_train`` maps); each step draws a workload (in proportion to its
maps) and ``batch`` of its maps. Each measured set's rewards are standardised on their
own (mean 0, std 1): workloads' rewards differ in level, and a screen ranks maps of one
workload; predictions are in the scale of the first set (the run's own). A fit is a
function of the seed and the data: weights and minibatches come from ``seed``, and the
global random state is left as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import to_undirected

from egrl.screening.base import Domain, Measured
from egrl.screening.features import one_hot

log = logging.getLogger(__name__)

#: maps predicted per forward pass (bounds the memory of a large pool)
PREDICT_CHUNK = 1024


class GraphConv(nn.Module):
    """One GCN layer (Kipf and Welling; what PyG's ``GCNConv`` computes) for many maps of
    one graph at once: ``out = A @ (h W) + b`` with ``A`` the graph's normalised adjacency.

    PyG's ``GCNConv`` propagates ``[B, N, F]`` by a scatter over the node dimension; one
    sparse product with the nodes first (``[N, B * F]``) computes the same layer three to
    four times faster on a CPU (three layers, forward and backward, 64 maps of resnet50,
    resnet101 or bert-large on one core).

    Args:
        width: features in and out.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width, bias=False)
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, h: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """``[N, B, F]`` -> ``[N, B, F]``; ``adjacency`` sparse float32 ``[N, N]``."""
        n, b, f = h.shape
        mixed = torch.sparse.mm(adjacency, self.lin(h).reshape(n, b * f))
        return mixed.reshape(n, b, f) + self.bias


class MapNet(nn.Module):
    """Maps of one workload -> standardised predicted rewards.

    Args:
        node_in: features per node, ``Fx + sum(C_h)`` (graph features, then one-hot choices).
        described: width ``F`` of the map's description (may be 0).
        hidden: width of the node embeddings and of the MLP.
        layers: graph convolutions (residual, ReLU).
    """

    def __init__(self, node_in: int, described: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Linear(node_in, hidden)
        self.convs = nn.ModuleList(GraphConv(hidden) for _ in range(layers))
        self.head = nn.Sequential(
            nn.Linear(2 * hidden + described, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )
        # a linear path from the description straight to the output: on a target whose
        # description nearly says the reward (NNP-I's latency column) the MLP need not
        # learn the identity
        self.direct = nn.Linear(described, 1, bias=False) if described else None

    def forward(
        self, nodes: torch.Tensor, adjacency: torch.Tensor, described: torch.Tensor
    ) -> torch.Tensor:
        """Predictions float32 ``[B]``.

        Args:
            nodes: float32 ``[N, B, node_in]``, nodes first.
            adjacency: the workload's normalised adjacency, sparse float32 ``[N, N]``
                (the same for all ``B`` maps).
            described: float32 ``[B, F]``.
        """
        h = torch.relu(self.embed(nodes))  # [N, B, hidden]
        for conv in self.convs:
            h = h + torch.relu(conv(h, adjacency))
        pooled = torch.cat([h.mean(dim=0), h.amax(dim=0)], dim=-1)  # [B, 2 * hidden]
        out = self.head(torch.cat([pooled, described], dim=-1))  # [B, 1]
        if self.direct is not None:
            out = out + self.direct(described)
        return out.squeeze(-1)


@dataclass
class _Graph:
    """One workload's graph as the network reads it."""

    x: torch.Tensor  # float32 [N, Fx], standardised
    adjacency: torch.Tensor  # sparse float32 [N, N]: D^-1/2 (A + A^T + I) D^-1/2


@dataclass
class _Stats:
    """Mean and std of a block of columns (std 1 where a column is constant)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> _Stats:
        """The statistics of ``values`` ``[M]`` or ``[M, F]`` over their first axis."""
        values = np.asarray(values, dtype=np.float64)
        std = values.std(axis=0)
        return cls(values.mean(axis=0), np.where(std > 1e-8, std, 1.0))

    def apply(self, values: np.ndarray) -> np.ndarray:
        """float32, the same shape: ``(values - mean) / std``."""
        return ((np.asarray(values, dtype=np.float64) - self.mean) / self.std).astype(np.float32)


class GNNModel:
    """A graph cost model (see the module docstring).

    Args:
        seed: seeds the weights and the minibatches.
        hidden: width of the node embeddings and of the MLP.
        layers: message-passing layers (each mixes a unit with its neighbours).
        steps: Adam steps per fit.
        lr: Adam's learning rate.
        batch: maps per minibatch (all of one workload).
        weight_decay: Adam's L2 penalty.
    """

    def __init__(
        self,
        seed: int,
        hidden: int = 32,
        layers: int = 3,
        steps: int = 600,
        lr: float = 3e-3,
        batch: int = 32,
        weight_decay: float = 1e-4,
    ) -> None:
        self.seed = int(seed)
        self.hidden = int(hidden)
        self.layers = int(layers)
        self.steps = int(steps)
        self.lr = float(lr)
        self.batch = int(batch)
        self.weight_decay = float(weight_decay)
        self.net: MapNet | None = None
        self._node_stats: _Stats | None = None
        self._described_stats: _Stats | None = None
        self._reward_stats: _Stats | None = None  # of data[0]: the scale of predictions
        self._num_choices: np.ndarray | None = None
        self._graphs: dict[int, tuple[Domain, _Graph]] = {}

    # ------------------------------------------------------------------ inputs
    def _graph(self, domain: Domain) -> _Graph:
        """The domain's graph as the network reads it (made once per domain and fit)."""
        cached = self._graphs.get(id(domain))
        if cached is not None and cached[0] is domain:
            return cached[1]
        x = _node_features(domain)
        n = len(x)
        edges = torch.as_tensor(np.asarray(domain.graph.edge_index), dtype=torch.int64)
        # messages flow from edge_index[0] to edge_index[1]: entry [target, source]
        edge_index, weight = gcn_norm(to_undirected(edges, num_nodes=n), None, n)
        adjacency = torch.sparse_coo_tensor(
            edge_index.flip(0), weight.float(), (n, n), check_invariants=True
        ).coalesce()
        made = _Graph(torch.from_numpy(self._node_stats.apply(x)), adjacency)
        self._graphs[id(domain)] = (domain, made)
        return made

    def _check_heads(self, domain: Domain) -> None:
        if not np.array_equal(np.asarray(domain.num_choices), self._num_choices):
            raise ValueError(
                f"screen gnn: workload {domain.name!r} has heads {list(domain.num_choices)}, "
                f"the model was fitted on heads {list(self._num_choices)}"
            )

    def _choices(self, domain: Domain, maps: np.ndarray) -> torch.Tensor:
        """float32 ``[B, N, sum(C_h)]``: the one-hot choices of maps int ``[B, N, H]``."""
        b, n, _ = maps.shape
        nodes = self._graph(domain).x.shape[0]
        if nodes != n:
            raise ValueError(
                f"screen gnn: the graph of workload {domain.name!r} has {nodes} nodes, its "
                f"maps {n} units (the model needs one node per unit)"
            )
        return torch.from_numpy(one_hot(maps, self._num_choices).reshape(b, n, -1))

    @staticmethod
    def _nodes(graph: _Graph, choices: torch.Tensor) -> torch.Tensor:
        """float32 ``[N, B, Fx + sum(C_h)]``, nodes first: each node's graph features
        beside its choices in each map (``choices`` float32 ``[B, N, sum(C_h)]``)."""
        b, n, _ = choices.shape
        return torch.cat([graph.x[:, None].expand(n, b, -1), choices.transpose(0, 1)], dim=-1)

    # --------------------------------------------------------------- protocol
    def fit(self, data: Sequence[Measured]) -> None:
        """Train a new network on every set of ``data`` (``data[0]`` the run's own)."""
        data = [d for d in data if len(d)]
        if not data:
            raise ValueError("screen gnn: nothing to fit on")
        self._num_choices = np.asarray(data[0].domain.num_choices, dtype=np.int64)
        for d in data:
            self._check_heads(d.domain)
        self._graphs = {}
        self._node_stats = _Stats.of(np.concatenate([_node_features(d.domain) for d in data]))
        maps = [np.asarray(d.maps, dtype=np.int64) for d in data]
        described = [d.domain.featurize.describe(m) for d, m in zip(data, maps)]
        self._described_stats = _Stats.of(np.concatenate(described))
        self._reward_stats = _Stats.of(data[0].rewards)
        sets = [
            (
                self._graph(d.domain),
                self._choices(d.domain, m),
                torch.from_numpy(self._described_stats.apply(x)),
                torch.from_numpy(_Stats.of(d.rewards).apply(d.rewards)),
            )
            for d, m, x in zip(data, maps, described)
        ]
        sizes = torch.tensor([len(d) for d in data], dtype=torch.float64)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            generator = torch.Generator().manual_seed(self.seed)
            graph, choices, desc, _ = sets[0]
            net = MapNet(
                graph.x.shape[1] + choices.shape[2], desc.shape[1], self.hidden, self.layers
            )
            optimizer = torch.optim.Adam(
                net.parameters(), lr=self.lr, weight_decay=self.weight_decay
            )
            net.train()
            for _ in range(self.steps):
                graph, choices, desc, target = sets[
                    int(torch.multinomial(sizes, 1, generator=generator))
                ]
                rows = torch.randint(
                    len(target), (min(self.batch, len(target)),), generator=generator
                )
                predicted = net(self._nodes(graph, choices[rows]), graph.adjacency, desc[rows])
                loss = torch.mean((predicted - target[rows]) ** 2)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        net.eval()
        self.net = net
        log.debug("screen gnn: fitted on %d maps of %d workloads", int(sizes.sum()), len(data))

    @torch.no_grad()
    def predict(self, domain: Domain, maps: np.ndarray) -> np.ndarray:
        """Predicted rewards float64 ``[B]`` of maps int ``[B, N, H]`` of ``domain``, in
        the scale of the run's own rewards."""
        if self.net is None:
            raise RuntimeError("screen gnn: predict before fit")
        self._check_heads(domain)
        maps = np.asarray(maps, dtype=np.int64)
        graph = self._graph(domain)
        out = np.zeros(len(maps), dtype=np.float64)
        for start in range(0, len(maps), PREDICT_CHUNK):
            chunk = maps[start : start + PREDICT_CHUNK]
            nodes = self._nodes(graph, self._choices(domain, chunk))
            desc = torch.from_numpy(self._described_stats.apply(domain.featurize.describe(chunk)))
            out[start : start + len(chunk)] = self.net(nodes, graph.adjacency, desc)
        return out * self._reward_stats.std + self._reward_stats.mean


def _node_features(domain: Domain) -> np.ndarray:
    """float32 ``[N, Fx]``: the raw node features of the domain's graph."""
    graph = domain.graph
    if graph is None or getattr(graph, "x", None) is None:
        raise ValueError(f"screen gnn needs the decision graph of workload {domain.name!r}")
    return np.asarray(graph.x, dtype=np.float32)
