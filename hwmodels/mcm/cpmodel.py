"""The static constraints of Equation 5 as an OR-tools CP-SAT model.

Variables: ``x[u, c]`` (node ``u`` on chip ``c``, exactly one per node) and the integer
``f[u] = sum_c c * x[u, c]``; ``used[c]`` (chip ``c`` holds a node); ``direct[a, b]``
(``G_D`` has the edge ``a -> b``, ``a < b``) and ``reach[a, b]`` (a path ``a -> b``).

* acyclic dataflow: ``f[u] <= f[v]`` per edge;
* no skipped chips: ``x[u, c] => used[c]``, ``used[c] => OR_u x[u, c]``,
  ``used[c+1] => used[c]``;
* triangle rule: ``x[u, a] and sends[u, b] => direct[a, b]`` (``sends[u, b]``: a
  consumer of ``u`` is on ``b``), ``direct => reach``, ``reach[a, c] and direct[c, b]
  => reach[a, b]``, and never ``direct[a, b] and reach[a, c] and reach[c, b]``.

``direct`` and ``reach`` are only forced up, never down; any solution's true chip
graph is contained in them, so a solution meets the rule, and the true graph itself is
a solution, so nothing valid is cut off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from hwmodels.mcm.dataflow import Dataflow


@dataclass
class StaticModel:
    """A CP-SAT model of the static constraints and its variables.

    Attributes:
        model: the ``CpModel``.
        x: ``[N][C]`` chip literals.
        f: ``[N]`` chip of each node (integer variables).
        used: ``[C]`` chip-in-use literals.
        sends: ``{(u, b): literal}``: a consumer of ``u`` is on chip ``b``.
    """

    model: cp_model.CpModel
    x: list[list[cp_model.IntVar]]
    f: list[cp_model.IntVar]
    used: list[cp_model.IntVar]
    sends: dict

    def x_indices(self) -> np.ndarray:
        """int64 ``[N, C]``: proto index of every ``x[u, c]`` (for objectives and hints)."""
        return np.array([[v.Index() for v in row] for row in self.x], dtype=np.int64)


def build_static(flow: Dataflow, num_chips: int | None = None) -> StaticModel:
    """The CP-SAT model of acyclic dataflow, no skipped chips and the triangle rule."""
    n = flow.num_nodes
    c = flow.num_chips if num_chips is None else int(num_chips)
    m = cp_model.CpModel()
    x = [[m.new_bool_var(f"x{u}_{d}") for d in range(c)] for u in range(n)]
    f = [m.new_int_var(0, c - 1, f"f{u}") for u in range(n)]
    for u in range(n):
        m.add_exactly_one(x[u])
        m.add(f[u] == sum(d * x[u][d] for d in range(1, c)))
    for u, v in zip(flow.src.tolist(), flow.dst.tolist()):
        m.add(f[u] <= f[v])
    used = [m.new_bool_var(f"used{d}") for d in range(c)]
    for d in range(c):
        for u in range(n):
            m.add_implication(x[u][d], used[d])
        m.add_bool_or([x[u][d] for u in range(n)] + [~used[d]])
        if d + 1 < c:
            m.add_implication(used[d + 1], used[d])
    sends = _add_triangle(m, flow, x, c)
    return StaticModel(model=m, x=x, f=f, used=used, sends=sends)


def _add_triangle(m: cp_model.CpModel, flow: Dataflow, x, c: int) -> dict:
    """Chip-graph literals and the triangle rule (see the module docstring)."""
    direct = {(a, b): m.new_bool_var(f"direct{a}_{b}") for a in range(c) for b in range(a + 1, c)}
    reach = {(a, b): m.new_bool_var(f"reach{a}_{b}") for a in range(c) for b in range(a + 1, c)}
    sends = {}
    for u in flow.producers.tolist():
        consumers = flow.dst[flow.src == u].tolist()
        for b in range(1, c):
            lit = m.new_bool_var(f"sends{u}_{b}")
            for v in consumers:
                m.add_implication(x[v][b], lit)
            sends[u, b] = lit
            for a in range(b):
                m.add_bool_or([~x[u][a], ~lit, direct[a, b]])
    for (a, b), lit in direct.items():
        m.add_implication(lit, reach[a, b])
    for a in range(c):
        for mid in range(a + 1, c):
            for b in range(mid + 1, c):
                m.add_bool_or([~reach[a, mid], ~direct[mid, b], reach[a, b]])
                m.add_bool_or([~direct[a, b], ~reach[a, mid], ~reach[mid, b]])
    return sends
