"""Access functions of data-movement operators, as integer maps of the Integer Set Library.

A data-movement operator (reshape, transpose, expand, repeat, slice, split, concat, pad,
...) copies elements: each element of its output is one element of one of its inputs,
or a constant (padding). Following Zheng et al., *Optimizing Memory-Access Patterns for
Deep Learning Accelerators* (AWS, arXiv:2002.12798, 2020), the operator's load
``v = x[f_l(i)]`` and store ``y[f_s(i)] = v`` compose into one map from the output's
index space to the input's, ``g = f_l o f_s^-1``; composing such maps along a chain of
operators tells a later load where its element really lives. The maps are
`islpy <https://pypi.org/project/islpy/>`_ maps (the paper's library) over unnamed
integer tuples ``{ [o0, ..., o(n-1)] -> [i0, ..., i(m-1)] : ... }``.

An :class:`Access` is the load of one operand: for every index of the operand's
``shape``, which source tensor and which of its elements it reads (one isl map per
source), or ``fill`` where no source covers the index (padding). The pattern functions
(:func:`reshape`, :func:`permute`, :func:`expand`, :func:`repeat`, :func:`slice_`,
:func:`select`, :func:`flip`, :func:`roll`, :func:`pad`, :func:`cat`, :func:`stack`)
each apply one operator to an access; :func:`compose` substitutes one access for a
source of another (the data-movement elimination step); :func:`gather` executes an
access with NumPy.

Reshape is not affine on multi-dimensional indices: the output index is linearised
(row-major) and each input coordinate is ``floor(l / stride) mod extent`` of the
linear index ``l``, a quasi-affine expression that isl represents exactly (integer
division and modulo by constants) and simplifies when reshapes compose.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import islpy as isl
import numpy as np

from workloads.errors import WorkloadError


class AccessError(WorkloadError):
    """An access function cannot be built (bad parameters, an unrepresentable composition)."""


Shape = tuple[int, ...]


@dataclass(frozen=True)
class Access:
    """The load of one operand of ``shape``: where each of its elements comes from.

    Attributes:
        shape: the operand's shape ``[d0, ..., d(n-1)]``.
        maps: source tensor name -> single-valued isl map ``{ [o] -> [i] }`` from operand
            indices to that source's indices; the maps' domains are disjoint.
        source_shapes: source tensor name -> its shape.
        fill: value of the operand's elements no map covers (padding); None if every
            element is covered.
    """

    shape: Shape
    maps: dict[str, isl.Map]
    source_shapes: dict[str, Shape]
    fill: float | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def sources(self) -> list[str]:
        return list(self.maps)

    @property
    def numel(self) -> int:
        return _numel(self.shape)

    def text(self) -> dict[str, str]:
        """Source name -> the isl text of its map (what a rewritten node stores)."""
        return {name: str(m) for name, m in self.maps.items()}

    def is_identity(self) -> bool:
        """True if the operand is one source read element for element, in order."""
        if self.fill is not None or len(self.maps) != 1:
            return False
        ((name, m),) = self.maps.items()
        return self.source_shapes[name] == self.shape and m.is_equal(_identity_map(self.shape))


def identity(name: str, shape: Sequence[int]) -> Access:
    """The access that reads tensor ``name`` of ``shape`` as it is."""
    shape = _check_shape(shape, f"tensor {name!r}")
    return Access(shape, {name: _identity_map(shape)}, {name: shape})


def from_text(
    shape: Sequence[int],
    maps: Mapping[str, str],
    source_shapes: Mapping[str, Sequence[int]],
    fill: float | None = None,
) -> Access:
    """An access from stored isl texts (the inverse of :meth:`Access.text`)."""
    return Access(
        tuple(int(d) for d in shape),
        {name: isl.Map(text) for name, text in maps.items()},
        {name: tuple(int(d) for d in s) for name, s in source_shapes.items()},
        fill,
    )


# ------------------------------------------------------------------ building maps
def _vars(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{k}" for k in range(n)]


def _box(names: Sequence[str], shape: Shape) -> str:
    return " and ".join(f"0 <= {v} < {d}" for v, d in zip(names, shape)) or "true"


def _step_map(new_shape: Shape, exprs: Sequence[str], extra: str = "") -> isl.Map:
    """``{ [o] -> [exprs(o)] : o in the box of new_shape (and extra) }``."""
    o = _vars("o", len(new_shape))
    cond = _box(o, new_shape) + (f" and {extra}" if extra else "")
    return isl.Map(f"{{ [{', '.join(o)}] -> [{', '.join(exprs)}] : {cond} }}")


def _identity_map(shape: Shape) -> isl.Map:
    return _step_map(shape, _vars("o", len(shape)))


def _apply(access: Access, new_shape: Shape, step: isl.Map, fill: float | None = None) -> Access:
    """The access of an operator whose output index ``o`` reads its input at ``step(o)``.

    Output indices outside ``step``'s domain take ``fill`` (padding).
    """
    maps = {}
    for name, m in access.maps.items():
        composed = step.apply_range(m)
        if not composed.is_empty():
            maps[name] = composed.coalesce()
    covered_all = step.domain().is_equal(_identity_map(new_shape).domain())
    new_fill = access.fill
    if not covered_all:
        if access.fill is not None and fill is not None and access.fill != fill:
            raise AccessError(
                f"padding with {fill} around an operand already padded with {access.fill}: "
                "one access has one fill value"
            )
        new_fill = fill if fill is not None else access.fill
    sources = {name: access.source_shapes[name] for name in maps}
    return Access(new_shape, maps, sources, new_fill)


def _dim(dim: int, ndim: int, op: str) -> int:
    if not -ndim <= dim < max(ndim, 1):
        raise AccessError(f"{op}: dimension {dim} is out of range for {ndim} dimensions")
    return dim % ndim if ndim else 0


# ------------------------------------------------------------------- the patterns
def reshape(access: Access, shape: Sequence[int]) -> Access:
    """View the operand as ``shape`` (row-major; one ``-1`` is inferred), quasi-affine."""
    old = access.shape
    new = _infer_shape(shape, _numel(old), "reshape")
    o = _vars("o", len(new))
    new_strides = _strides(new)
    linear = " + ".join(f"{s}*{v}" for s, v in zip(new_strides, o)) or "0"
    exprs = [f"floor(({linear})/{s}) mod {d}" if d > 1 else "0" for s, d in zip(_strides(old), old)]
    return _apply(access, new, _step_map(new, exprs))


def permute(access: Access, perm: Sequence[int]) -> Access:
    """Reorder the dimensions: output dimension ``j`` is input dimension ``perm[j]``."""
    old = access.shape
    perm = [_dim(int(p), len(old), "permute") for p in perm]
    if sorted(perm) != list(range(len(old))):
        raise AccessError(f"permute: {perm} is not a permutation of {len(old)} dimensions")
    new = tuple(old[p] for p in perm)
    exprs = [""] * len(old)
    for j, p in enumerate(perm):
        exprs[p] = f"o{j}"
    return _apply(access, new, _step_map(new, exprs))


def transpose(access: Access, dim0: int, dim1: int) -> Access:
    """Swap two dimensions."""
    n = len(access.shape)
    perm = list(range(n))
    a, b = _dim(dim0, n, "transpose"), _dim(dim1, n, "transpose")
    perm[a], perm[b] = perm[b], perm[a]
    return permute(access, perm)


def expand(access: Access, shape: Sequence[int]) -> Access:
    """Broadcast to ``shape`` (dimensions aligned on the right; size-1 dims repeat)."""
    old = access.shape
    new = tuple(int(d) for d in shape)
    off = len(new) - len(old)
    if off < 0:
        raise AccessError(f"expand: cannot broadcast {old} to fewer dimensions {new}")
    new = tuple(old[k - off] if d == -1 and k >= off else d for k, d in enumerate(new))
    exprs = []
    for k, d in enumerate(old):
        target = new[k + off]
        if d != target and d != 1:
            raise AccessError(f"expand: dimension {k} of {old} cannot broadcast to {new}")
        exprs.append("0" if d == 1 else f"o{k + off}")
    return _apply(access, new, _step_map(new, exprs))


def repeat(access: Access, repeats: Sequence[int]) -> Access:
    """Tile the operand ``repeats[k]`` times along each dimension (``torch.Tensor.repeat``)."""
    old = access.shape
    off = len(repeats) - len(old)
    if off < 0:
        raise AccessError(f"repeat: {len(repeats)} repeats for {len(old)} dimensions")
    padded = (1,) * off + old
    new = tuple(int(r) * d for r, d in zip(repeats, padded))
    exprs = [f"o{k + off} mod {d}" if d > 1 else "0" for k, d in enumerate(old)]
    return _apply(access, new, _step_map(new, exprs))


def slice_(access: Access, dim: int, start: int | None, stop: int | None, step: int = 1) -> Access:
    """``x[..., start:stop:step, ...]`` along ``dim`` (Python slice semantics, ``step > 0``)."""
    old = access.shape
    dim = _dim(dim, len(old), "slice")
    if step is None:
        step = 1
    if step <= 0:
        raise AccessError(f"slice: step must be positive, got {step}")
    start, stop, step = slice(start, stop, step).indices(old[dim])
    length = max(0, math.ceil((stop - start) / step))
    new = old[:dim] + (length,) + old[dim + 1 :]
    exprs = [f"{start} + {step}*o{k}" if k == dim else f"o{k}" for k in range(len(old))]
    return _apply(access, new, _step_map(new, exprs))


def select(access: Access, dim: int, index: int) -> Access:
    """``x[..., index, ...]``: drop dimension ``dim`` at ``index``."""
    old = access.shape
    dim = _dim(dim, len(old), "select")
    if not -old[dim] <= index < old[dim]:
        raise AccessError(f"select: index {index} out of range for dimension {dim} of {old}")
    new = old[:dim] + old[dim + 1 :]
    exprs = [f"o{k}" for k in range(dim)] + [str(index % old[dim])]
    exprs += [f"o{k - 1}" for k in range(dim + 1, len(old))]
    return _apply(access, new, _step_map(new, exprs))


def flip(access: Access, dims: Sequence[int]) -> Access:
    """Reverse the operand along ``dims``."""
    old = access.shape
    dims = {_dim(int(d), len(old), "flip") for d in dims}
    exprs = [f"{d - 1} - o{k}" if k in dims else f"o{k}" for k, d in enumerate(old)]
    return _apply(access, old, _step_map(old, exprs))


def roll(access: Access, shifts: Sequence[int], dims: Sequence[int]) -> Access:
    """``torch.roll``: element ``o`` reads ``(o - shift) mod extent`` along each of ``dims``."""
    old = access.shape
    if len(shifts) != len(dims):
        raise AccessError(f"roll: {len(shifts)} shifts for {len(dims)} dimensions")
    shift = {_dim(int(d), len(old), "roll"): int(s) for s, d in zip(shifts, dims)}
    exprs = [
        f"(o{k} + {(-shift[k]) % d}) mod {d}" if k in shift and d > 1 else f"o{k}"
        for k, d in enumerate(old)
    ]
    return _apply(access, old, _step_map(old, exprs))


def pad(access: Access, pads: Sequence[int], value: float = 0.0) -> Access:
    """Constant padding in ``torch.nn.functional.pad`` order: ``(last_before, last_after,
    second_last_before, ...)``; negative pads crop."""
    old = access.shape
    if len(pads) % 2 or len(pads) // 2 > len(old):
        raise AccessError(f"pad: {list(pads)} is not (before, after) pairs for {len(old)} dims")
    before = [0] * len(old)
    after = [0] * len(old)
    for j in range(len(pads) // 2):
        k = len(old) - 1 - j
        before[k], after[k] = int(pads[2 * j]), int(pads[2 * j + 1])
    new = tuple(d + b + a for d, b, a in zip(old, before, after))
    if min(new, default=1) < 0:
        raise AccessError(f"pad: {list(pads)} crops {old} below zero")
    exprs = [f"o{k} - {b}" for k, b in enumerate(before)]
    inside = " and ".join(f"{b} <= o{k} < {b + d}" for k, (b, d) in enumerate(zip(before, old)))
    return _apply(access, new, _step_map(new, exprs, inside), fill=float(value))


def cat(accesses: Sequence[Access], dim: int) -> Access:
    """Concatenate operands along ``dim``; each keeps its own sources."""
    if not accesses:
        raise AccessError("cat: no operands")
    first = accesses[0].shape
    dim = _dim(dim, len(first), "cat")
    for a in accesses:
        if len(a.shape) != len(first) or any(
            x != y for k, (x, y) in enumerate(zip(a.shape, first)) if k != dim
        ):
            raise AccessError(
                f"cat: operand shapes {[a.shape for a in accesses]} differ off dim {dim}"
            )
    new = first[:dim] + (sum(a.shape[dim] for a in accesses),) + first[dim + 1 :]
    maps: dict[str, isl.Map] = {}
    sources: dict[str, Shape] = {}
    fills = set()
    offset = 0
    for a in accesses:
        n = a.shape[dim]
        exprs = [f"o{k} - {offset}" if k == dim else f"o{k}" for k in range(len(new))]
        part = _apply(a, new, _step_map(new, exprs, f"{offset} <= o{dim} < {offset + n}"), a.fill)
        if part.fill is not None and a.fill is not None:
            fills.add(a.fill)
        for name, m in part.maps.items():
            maps[name] = maps[name].union(m).coalesce() if name in maps else m
            sources[name] = part.source_shapes[name]
        offset += n
    if len(fills) > 1:
        raise AccessError(f"cat: operands padded with different values {sorted(fills)}")
    covered = _union_domain(maps, new)
    full = _identity_map(new).domain()
    fill = None if covered.is_equal(full) else (fills.pop() if fills else 0.0)
    return Access(new, maps, sources, fill)


def stack(accesses: Sequence[Access], dim: int) -> Access:
    """Stack operands along a new dimension ``dim``."""
    if not accesses:
        raise AccessError("stack: no operands")
    ndim = len(accesses[0].shape) + 1
    dim = _dim(dim, ndim, "stack")
    return cat([reshape(a, a.shape[:dim] + (1,) + a.shape[dim:]) for a in accesses], dim)


# ------------------------------------------------------------------ composition
def compose(outer: Access, source: str, inner: Access) -> Access:
    """Read ``inner``'s sources where ``outer`` read tensor ``source`` (g = f_inner o f_outer).

    ``inner`` is the access that produced ``source`` (its shape must be ``source``'s);
    the result reads no ``source`` any more.

    Raises:
        AccessError: ``source`` is not a source of ``outer``, the shapes differ, or the
            two fills differ.
    """
    if source not in outer.maps:
        raise AccessError(f"compose: {source!r} is not a source of the access ({outer.sources})")
    if inner.shape != outer.source_shapes[source]:
        raise AccessError(
            f"compose: {source!r} has shape {outer.source_shapes[source]}, the access that "
            f"produced it has shape {inner.shape}"
        )
    maps = {k: m for k, m in outer.maps.items() if k != source}
    sources = {k: outer.source_shapes[k] for k in maps}
    for name, m in inner.maps.items():
        composed = outer.maps[source].apply_range(m)
        if composed.is_empty():
            continue
        maps[name] = maps[name].union(composed).coalesce() if name in maps else composed.coalesce()
        sources[name] = inner.source_shapes[name]
    fill = outer.fill
    if inner.fill is not None:
        uncovered = (
            outer.maps[source]
            .domain()
            .subtract(_union_domain({k: m for k, m in maps.items()}, outer.shape))
        )
        if not uncovered.is_empty():
            if fill is not None and fill != inner.fill:
                raise AccessError(
                    f"compose: padding {inner.fill} of {source!r} meets padding {fill}"
                )
            fill = inner.fill
    return Access(outer.shape, maps, sources, fill)


def _union_domain(maps: Mapping[str, isl.Map], shape: Shape) -> isl.Set:
    dom = _identity_map(shape).domain().subtract(_identity_map(shape).domain())
    for m in maps.values():
        dom = dom.union(m.domain())
    return dom


# ------------------------------------------------------------- NumPy execution
def gather(access: Access, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Execute ``access``: the operand as an array of ``access.shape``.

    ``arrays`` holds every source by name (shape ``source_shapes[name]``); elements no
    map covers take ``access.fill``. Every map is evaluated as isl's piecewise
    quasi-affine function, vectorised over all operand indices.

    Raises:
        AccessError: a source is missing or has the wrong shape, or two maps cover one
            element.
    """
    points = np.indices(access.shape, dtype=np.int64).reshape(len(access.shape), -1).T  # [P, n]
    dtype = np.result_type(
        *[np.asarray(arrays[s]).dtype for s in access.maps if s in arrays] or [float]
    )
    out = np.full(len(points), access.fill if access.fill is not None else 0, dtype=dtype)
    seen = np.zeros(len(points), dtype=bool)
    for name, m in access.maps.items():
        if name not in arrays:
            raise AccessError(f"gather: no array for source {name!r}")
        src = np.asarray(arrays[name])
        if tuple(src.shape) != access.source_shapes[name]:
            raise AccessError(
                f"gather: source {name!r} has shape {src.shape}, "
                f"expected {access.source_shapes[name]}"
            )
        for dom, exprs in _pieces(m):
            mask = _in_set(dom, points)
            if (mask & seen).any():
                raise AccessError(f"gather: two maps cover one element of the operand ({name!r})")
            seen |= mask
            pts = points[mask]
            idx = tuple(_eval_aff(a, pts) for a in exprs)
            out[mask] = src[idx] if idx else src[()]
    if access.fill is None and not seen.all():
        raise AccessError("gather: the access leaves elements uncovered but has no fill")
    return out.reshape(access.shape)


def _pieces(m: isl.Map) -> list[tuple[isl.Set, list[isl.Aff]]]:
    pieces: list[tuple[isl.Set, list[isl.Aff]]] = []
    pma = m.as_pw_multi_aff()

    def visit(dom: isl.Set, maff: isl.MultiAff) -> None:
        n = maff.dim(isl.dim_type.out)
        pieces.append((dom, [maff.get_at(k) for k in range(n)]))

    pma.foreach_piece(visit)
    return pieces


def _in_set(s: isl.Set, points: np.ndarray) -> np.ndarray:
    """bool ``[P]``: which of ``points`` ``[P, n]`` lie in ``s``."""
    inside = np.zeros(len(points), dtype=bool)
    for bset in s.get_basic_sets():
        ok = np.ones(len(points), dtype=bool)
        for c in bset.get_constraints():
            num, _ = _eval_scaled(c.get_aff(), points)
            ok &= (num == 0) if c.is_equality() else (num >= 0)
        inside |= ok
    return inside


def _frac(v: isl.Val) -> Fraction:
    return Fraction(v.to_str())


def _eval_scaled(aff: isl.Aff, points: np.ndarray) -> tuple[np.ndarray, int]:
    """``(num, den)`` with ``aff(points) == num / den`` exactly: int64 ``[P]``, ``den > 0``."""
    n_in = aff.dim(isl.dim_type.in_)
    n_div = aff.dim(isl.dim_type.div)
    const = _frac(aff.get_constant_val())
    coef = [_frac(aff.get_coefficient_val(isl.dim_type.in_, k)) for k in range(n_in)]
    dcoef = [_frac(aff.get_coefficient_val(isl.dim_type.div, k)) for k in range(n_div)]
    den = math.lcm(*(f.denominator for f in [const, *coef, *dcoef]))
    num = np.full(len(points), int(const * den), dtype=np.int64)
    for k, c in enumerate(coef):
        if c:
            num += int(c * den) * points[:, k]
    for k, c in enumerate(dcoef):
        if c:
            dnum, dden = _eval_scaled(aff.get_div(k), points)
            num += int(c * den) * np.floor_divide(dnum, dden)
    return num, den


def _eval_aff(aff: isl.Aff, points: np.ndarray) -> np.ndarray:
    """int64 ``[P]``: an integer-valued quasi-affine ``aff`` at ``points`` ``[P, n]``."""
    num, den = _eval_scaled(aff, points)
    if den != 1 and (num % den).any():
        raise AccessError(f"access expression {aff} is not integral")
    return num // den


# ------------------------------------------------------------------------ helpers
def _numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if len(shape) else 1


def _strides(shape: Shape) -> list[int]:
    """Row-major strides of ``shape`` in elements."""
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def _infer_shape(shape: Sequence[int], numel: int, op: str) -> Shape:
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise AccessError(f"{op}: more than one -1 in {shape}")
    if -1 in shape:
        known = _numel([d for d in shape if d != -1])
        if known == 0 or numel % known:
            raise AccessError(f"{op}: cannot infer -1 in {shape} for {numel} elements")
        shape[shape.index(-1)] = numel // known
    if _numel(shape) != numel:
        raise AccessError(f"{op}: {numel} elements cannot be viewed as {tuple(shape)}")
    return tuple(shape)


def _check_shape(shape: Sequence[int], where: str) -> Shape:
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise AccessError(f"{where}: negative size in shape {shape}")
    return shape
