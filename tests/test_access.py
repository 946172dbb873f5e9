"""Access functions of data-movement operators against NumPy's own operators."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workloads import access as A
from workloads import movement as mv
from workloads.access import AccessError

RNG_SEED = 0
X_SHAPE = (2, 3, 4)


def _x(shape=X_SHAPE, seed=RNG_SEED) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _run(access: A.Access, **arrays) -> np.ndarray:
    return A.gather(access, arrays)


# Each case: (expression over input 0 of shape X_SHAPE, NumPy reference on x).
PATTERNS = {
    "reshape": ({"op": "reshape", "shape": [4, 6]}, lambda x: x.reshape(4, 6)),
    "reshape-infer": ({"op": "reshape", "shape": [3, -1]}, lambda x: x.reshape(3, -1)),
    "permute": ({"op": "permute", "perm": [2, 0, 1]}, lambda x: x.transpose(2, 0, 1)),
    "expand": ({"op": "expand", "shape": [5, 2, 3, 4]}, lambda x: np.broadcast_to(x, (5, 2, 3, 4))),
    "repeat": ({"op": "repeat", "repeats": [2, 1, 2, 3]}, lambda x: np.tile(x, (2, 1, 2, 3))),
    "slice": (
        {"op": "slice", "dim": 2, "start": 1, "stop": 4, "step": 2},
        lambda x: x[:, :, 1:4:2],
    ),
    "slice-negative": ({"op": "slice", "dim": 1, "start": -2, "stop": None}, lambda x: x[:, -2:]),
    "select": ({"op": "select", "dim": 1, "index": -1}, lambda x: x[:, -1]),
    "flip": ({"op": "flip", "dims": [0, 2]}, lambda x: x[::-1, :, ::-1]),
    "roll": (
        {"op": "roll", "shifts": [1, -3], "dims": [1, 2]},
        lambda x: np.roll(np.roll(x, 1, 1), -3, 2),
    ),
    "pad": (
        {"op": "pad", "pads": [1, 2, 0, 1], "value": 7.0},
        lambda x: np.pad(x, ((0, 0), (0, 1), (1, 2)), constant_values=7.0),
    ),
    "pad-crop": (
        {"op": "pad", "pads": [-1, 1]},
        lambda x: np.pad(x[:, :, 1:], ((0, 0),) * 2 + ((0, 1),)),
    ),
    "cat": ({"op": "cat", "dim": 1}, lambda x: np.concatenate([x, x[:, :2]], 1)),
    "stack": ({"op": "stack", "dim": 3}, lambda x: np.stack([x, x[:, :, ::-1]], 3)),
}


def _expr(name: str) -> dict:
    expr, _ = PATTERNS[name]
    leaf = {"input": 0}
    if name == "cat":
        return {
            **expr,
            "args": [leaf, {"op": "slice", "dim": 1, "start": 0, "stop": 2, "args": [leaf]}],
        }
    if name == "stack":
        return {**expr, "args": [leaf, {"op": "flip", "dims": [2], "args": [leaf]}]}
    return {**expr, "args": [leaf]}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_matches_numpy(name):
    x = _x()
    expr, reference = _expr(name), PATTERNS[name][1]
    access = mv.to_access(expr, [("x", X_SHAPE)])
    want = reference(x)
    np.testing.assert_array_equal(_run(access, x=x), want)
    np.testing.assert_array_equal(mv.evaluate(expr, [x]), want)  # the reference executor
    assert access.shape == want.shape


def test_two_sources_concatenate_piecewise():
    x, y = _x(), _x((2, 5, 4), seed=1)
    access = A.cat(
        [A.identity("x", x.shape), A.identity("y", y.shape), A.identity("x", x.shape)], 1
    )
    assert sorted(access.sources) == ["x", "y"]
    np.testing.assert_array_equal(_run(access, x=x, y=y), np.concatenate([x, y, x], 1))


def test_reshape_is_quasi_affine_and_simplifies():
    a = A.identity("x", X_SHAPE)
    flat = A.reshape(a, (24,))
    assert "floor" in str(flat.maps["x"]) or "mod" in str(flat.maps["x"])
    assert A.reshape(flat, X_SHAPE).is_identity()
    assert A.permute(A.permute(a, (1, 2, 0)), (2, 0, 1)).is_identity()
    assert not A.permute(a, (1, 0, 2)).is_identity()


def test_compose_reads_the_source_directly():
    x = _x()
    inner = A.permute(A.reshape(A.identity("x", X_SHAPE), (6, 4)), (1, 0))  # t = x.reshape.T
    outer = A.pad(A.slice_(A.identity("t", (4, 6)), 1, 1, 5), (1, 0), 0.0)
    composed = A.compose(outer, "t", inner)
    assert composed.sources == ["x"]
    want = np.pad(x.reshape(6, 4).T[:, 1:5], ((0, 0), (1, 0)))
    np.testing.assert_array_equal(_run(composed, x=x), want)


# ------------------------------------------------------------- random compositions
def _random_step(rng: np.random.Generator, shape: tuple[int, ...], arg: dict) -> dict | None:
    """A random data-movement step valid on an operand of ``shape`` (None: none fits)."""
    n = len(shape)
    op = rng.choice(
        [
            "reshape",
            "permute",
            "expand",
            "repeat",
            "slice",
            "select",
            "flip",
            "roll",
            "pad",
            "cat",
            "stack",
        ]
    )
    numel = math.prod(shape)
    if op == "reshape":
        dims = [int(d) for d in rng.permutation(list(shape))] + [1] * int(rng.integers(0, 2))
        return {"op": "reshape", "shape": [int(d) for d in rng.permutation(dims)], "args": [arg]}
    if op == "permute" and n:
        return {"op": "permute", "perm": [int(p) for p in rng.permutation(n)], "args": [arg]}
    if op == "expand" and numel * 3 <= 600:
        return {
            "op": "expand",
            "shape": [3, *shape],
            "args": [{"op": "reshape", "shape": [1, *shape], "args": [arg]}],
        }
    if op == "repeat" and n and numel * 2 <= 600:
        reps = [1] * n
        reps[int(rng.integers(n))] = 2
        return {"op": "repeat", "repeats": reps, "args": [arg]}
    if op in ("slice", "select", "flip", "roll", "pad", "cat", "stack") and n:
        dim = int(rng.integers(n))
        size = shape[dim]
        if op == "slice" and size > 1:
            start = int(rng.integers(0, size - 1))
            return {
                "op": "slice",
                "dim": dim,
                "start": start,
                "stop": size,
                "step": int(rng.integers(1, 3)),
                "args": [arg],
            }
        if op == "select" and n > 1:
            return {"op": "select", "dim": dim, "index": int(rng.integers(size)), "args": [arg]}
        if op == "flip":
            return {"op": "flip", "dims": [dim], "args": [arg]}
        if op == "roll":
            return {
                "op": "roll",
                "shifts": [int(rng.integers(-3, 4))],
                "dims": [dim],
                "args": [arg],
            }
        if op == "pad" and numel < 400:
            pads = [0, 0] * (n - 1 - dim) + [int(rng.integers(0, 3)), int(rng.integers(0, 2))]
            return {"op": "pad", "pads": pads, "value": 0.0, "args": [arg]}
        if op in ("cat", "stack") and numel * 2 <= 600:
            other = {"op": "flip", "dims": [dim], "args": [arg]}
            return {"op": op, "dim": dim, "args": [arg, other]}
    return None


def _random_chain(rng: np.random.Generator, shape: tuple[int, ...], length: int) -> dict:
    expr: dict = {"input": 0}
    for _ in range(length):
        step = None
        while step is None:
            step = _random_step(rng, mv.to_access(expr, [("x", shape)]).shape, expr)
        expr = step
    return expr


@pytest.mark.parametrize("seed", range(12))
def test_random_compositions_match_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    x = rng.standard_normal(shape)
    expr = _random_chain(rng, shape, length=int(rng.integers(2, 6)))
    np.testing.assert_array_equal(
        _run(mv.to_access(expr, [("x", shape)]), x=x), mv.evaluate(expr, [x])
    )


@pytest.mark.parametrize("seed", range(8))
def test_composed_chains_match_running_both_chains(seed):
    """compose(outer over t, inner producing t) == outer(inner(x)) executed with NumPy."""
    rng = np.random.default_rng(100 + seed)
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    x = rng.standard_normal(shape)
    inner_expr = _random_chain(rng, shape, 3)
    inner = mv.to_access(inner_expr, [("x", shape)])
    outer_expr = _random_chain(rng, inner.shape, 3)
    outer = mv.to_access(outer_expr, [("t", inner.shape)])
    composed = A.compose(outer, "t", inner)
    assert composed.sources in (["x"], [])
    want = mv.evaluate(outer_expr, [mv.evaluate(inner_expr, [x])])
    np.testing.assert_array_equal(_run(composed, x=x), want)


# ------------------------------------------------------------------- bad input
def test_bad_patterns_name_the_problem():
    a = A.identity("x", X_SHAPE)
    with pytest.raises(AccessError, match="cannot be viewed"):
        A.reshape(a, (5, 5))
    with pytest.raises(AccessError, match="not a permutation"):
        A.permute(a, (0, 0, 1))
    with pytest.raises(AccessError, match="cannot broadcast"):
        A.expand(a, (2, 5, 4))
    with pytest.raises(AccessError, match="out of range"):
        A.select(a, 5, 0)
    with pytest.raises(AccessError, match="step must be positive"):
        A.slice_(a, 0, 0, 2, -1)
    with pytest.raises(AccessError, match="differ off dim"):
        A.cat([a, A.identity("y", (2, 2, 2))], 1)
    with pytest.raises(AccessError, match="one fill value"):
        A.pad(A.pad(a, (1, 1), 0.0), (1, 1), 1.0)


def test_compose_and_gather_check_their_operands():
    a = A.identity("x", X_SHAPE)
    with pytest.raises(AccessError, match="not a source"):
        A.compose(a, "y", a)
    with pytest.raises(AccessError, match="has shape"):
        A.compose(a, "x", A.identity("z", (24,)))
    with pytest.raises(AccessError, match="no array for source 'x'"):
        A.gather(a, {})
    with pytest.raises(AccessError, match="expected"):
        A.gather(a, {"x": np.zeros((3, 2, 4))})


def test_malformed_expressions_are_rejected_with_the_place():
    with pytest.raises(AccessError, match="node 'n'.*names no input"):
        mv.check({"op": "flip", "dims": [0], "args": [{"input": 3}]}, 1, "node 'n'")
    with pytest.raises(AccessError, match="unknown movement op 'shuffle'"):
        mv.check({"op": "shuffle", "args": [{"input": 0}]}, 1, "node 'n'")
    with pytest.raises(mv.OpaqueError, match="pixel_shuffle"):
        mv.to_access({"opaque": "pixel_shuffle", "args": [{"input": 0}]}, [("x", X_SHAPE)])
