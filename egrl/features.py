"""The featuriser: a target's raw decision graph as the policies' inputs.

Targets hand over their decision graph with raw features (byte counts, MACs, shapes:
values from 0 to 1e10 and beyond, possibly negative, e.g. a slack). The policies read
them after one scaling, applied here for every target so that the same GNN sees the
same scale whatever the hardware model:

``featurise(graph).x = float32(sign(x) * log1p(|x|))``, computed in float64.

On non-negative features this is ``log1p`` exactly (bit for bit the inputs policies
were trained on before targets stopped scaling their own features).
"""

from __future__ import annotations

import numpy as np
import torch


def signed_log1p(x: np.ndarray) -> np.ndarray:
    """``sign(x) * log1p(|x|)`` elementwise (float64, same shape): odd, monotone, 0 at 0."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.log1p(np.abs(x))


def featurise(graph, where: str = "decision graph"):
    """The policies' view of a raw decision graph.

    Args:
        graph: ``torch_geometric.data.Data`` with raw ``x`` float ``[N, F]`` and
            ``edge_index`` int64 ``[2, E]`` (any further attributes ride along).
        where: names the graph in errors (e.g. the target and workload).

    Returns:
        A copy of ``graph`` whose ``x`` is float32 ``[N, F]`` :func:`signed_log1p` of the
        raw features (the input is not changed).

    Raises:
        ValueError: ``x`` is not 2-D or holds NaN or infinite values (the first one is
            named).
    """
    raw = graph.x.detach().cpu().numpy() if isinstance(graph.x, torch.Tensor) else graph.x
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim != 2:
        raise ValueError(f"{where}: features x must be [N, F], got shape {list(raw.shape)}")
    bad = ~np.isfinite(raw)
    if bad.any():
        node, col = (int(i) for i in np.argwhere(bad)[0])
        names = getattr(graph, "node_names", None)
        label = repr(names[node]) if names is not None and node < len(names) else str(node)
        raise ValueError(f"{where}: feature {col} of node {label} is {raw[node, col]}")
    out = graph.clone()
    out.x = torch.as_tensor(signed_log1p(raw), dtype=torch.float32)
    return out
