"""The ATen rules current architectures need, each on a tiny module: the kind and cost of
the raw op (norms, routing and grouped matrix products of mixtures of experts, scatters,
the core ATen forms of attention and normalisation); a decoder block imported from its
core ATen decomposition; a ConvNeXt V2 from ``transformers`` end to end."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workloads import from_torch
from workloads.rawgraph import RawOp
from workloads.torch_import import export, translate


class Call(nn.Module):
    """A module whose forward is ``fn`` (its parameters, if any, passed first)."""

    def __init__(self, fn: Callable, *params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList(params)

    def forward(self, *xs: torch.Tensor):
        return self.fn(*self.params, *xs)


def raw_ops(module: nn.Module, *args: torch.Tensor, core: bool = False) -> list[RawOp]:
    """The raw ops of ``module`` on ``args``; ``core``: after the core ATen decompositions."""
    program = export(module, args, "tiny")
    if core:
        program = program.run_decompositions()
    return translate(program, 1)[0]


def raw_op(op: str, module: nn.Module, *args: torch.Tensor, core: bool = False) -> RawOp:
    """The one raw op of packet ``op`` (``"aten.topk"``) in ``module``."""
    found = [r for r in raw_ops(module, *args, core=core) if r.source_op.rsplit(".", 1)[0] == op]
    assert len(found) == 1, [r.source_op for r in raw_ops(module, *args, core=core)]
    return found[0]


def randn(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=generator) for s in shapes]


INDEX = torch.tensor([[0, 2], [1, 3]])
# op, function, input shapes, kind, vector ops
CASES = [
    # a p-norm (ConvNeXt V2's global response norm): one multiply-add per input element
    (
        "aten.linalg_vector_norm",
        lambda x: torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True),
        [(1, 4, 4, 8)],
        "reduce",
        128,
    ),
    ("aten.any", lambda x: (x > 0).any(-1), [(2, 3, 5)], "reduce", 30),
    ("aten.all", lambda x: (x > 0).all(-1), [(2, 3, 5)], "reduce", 30),
    # router of a mixture of experts: top-k of 16 tokens x 4 experts, sort, histogram
    ("aten.topk", lambda x: torch.topk(x, 2).indices, [(16, 4)], "reduce", 64),
    ("aten.histc", lambda x: torch.histc(x, 4), [(32,)], "reduce", 32),
    ("aten.sort", lambda x: torch.sort(x).values, [(4, 6)], "layout", 24 * 3),  # ceil(log2 6)
    ("aten.argsort", lambda x: x.argsort(-1), [(4, 8)], "layout", 32 * 3),
    # interleaved rotary tables and repeated key-value heads
    (
        "aten.repeat_interleave",
        lambda x: x.repeat_interleave(2, dim=1),
        [(1, 2, 16, 8)],
        "layout",
        512,
    ),
    ("aten.tile", lambda x: x.tile((1, 2)), [(4, 6)], "layout", 48),
    (
        "aten.meshgrid",
        lambda a, b: torch.meshgrid(a, b, indexing="ij")[1],
        [(4,), (3,)],
        "layout",
        24,
    ),  # two 4x3 grids
    ("aten.as_strided", lambda x: x.as_strided((2, 3), (1, 2)) * 2, [(8,)], "alias", 0),
    ("aten.floor_divide", lambda x: torch.floor_divide(x, 2), [(4, 6)], "eltwise", 24),
    ("aten.remainder", lambda x: torch.remainder(x, 2), [(4, 6)], "eltwise", 24),
    ("aten.fmod", lambda x: torch.fmod(x, 2), [(4, 6)], "eltwise", 24),
    ("aten.log1p", lambda x: torch.log1p(x.abs()), [(4, 6)], "eltwise", 24),
    ("aten.expm1", lambda x: torch.expm1(x), [(4, 6)], "eltwise", 24),
    # scatters: one vector op per element written
    (
        "aten.slice_scatter",
        lambda x, s: torch.slice_scatter(x, s, dim=1, start=0, end=2),
        [(4, 6), (4, 2)],
        "eltwise",
        8,
    ),
    (
        "aten.select_scatter",
        lambda x, s: torch.select_scatter(x, s, 0, 1),
        [(4, 6), (6,)],
        "eltwise",
        6,
    ),
    ("aten.scatter", lambda x, s: x.scatter(1, INDEX, s), [(2, 6), (2, 2)], "eltwise", 4),
    ("aten.scatter_add", lambda x, s: x.scatter_add(1, INDEX, s), [(2, 6), (2, 2)], "eltwise", 4),
    ("aten.index_add", lambda x, s: x.index_add(0, INDEX[0], s), [(4, 6), (2, 6)], "eltwise", 12),
    ("aten.index_put", lambda x, s: x.index_put((INDEX[0],), s), [(4, 6), (2, 6)], "eltwise", 12),
    (
        "aten.index_put",
        lambda x: x.index_put((x > 0,), torch.tensor(0.0)),
        [(2, 5)],
        "eltwise",
        10,
    ),  # a boolean mask: every position it may select
    # values that do not depend on the input's values
    ("aten.eye", lambda x: x + torch.eye(3), [(3, 3)], "const", 0),
    ("aten.fill", lambda x: x.clone().fill_(1.0), [(3, 3)], "const", 0),
]


@pytest.mark.parametrize(
    ("op", "fn", "shapes", "kind", "vector_ops"),
    CASES,
    ids=[f"{c[0].split('.')[1]}-{i}" for i, c in enumerate(CASES)],
)
def test_rule_kind_and_cost(op, fn, shapes, kind, vector_ops):
    raw = raw_op(op, Call(fn), *randn(*shapes))
    assert (raw.kind, raw.macs, raw.vector_ops) == (kind, 0, vector_ops)


def test_a_slice_assignment_copies_its_source_then_scatters_it():
    def assign(x, s):
        y = x.clone()
        y[:, :2] = s
        return y

    x, s = randn((4, 6), (4, 2))
    copy = raw_op("aten.copy", Call(assign), x, s)
    scatter = raw_op("aten.slice_scatter", Call(assign), x, s)
    assert (copy.kind, copy.vector_ops) == ("eltwise", 8)
    assert (scatter.kind, scatter.vector_ops) == ("eltwise", 8)


def test_index_put_counts_the_dims_no_index_covers():
    def assign(x, s):
        y = x.clone()
        y[:, INDEX[0]] = s
        return y

    raw = raw_op("aten.index_put", Call(assign), *randn((3, 5, 8), (2, 8)))
    assert raw.vector_ops == 2 * 3 * 8  # 2 indexed rows in each of 3 batches, 8 wide


def test_the_cpu_flash_attention_costs_what_scaled_dot_product_attention_does():
    q, k, v = randn((1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16))
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    raw = raw_op(str(flash), Call(lambda *a: flash(*a)[0]), q, k, v)
    sdpa = raw_op(
        "aten.scaled_dot_product_attention", Call(F.scaled_dot_product_attention), q, k, v
    )
    scores = 2 * 8 * 8
    assert (raw.kind, raw.macs, raw.vector_ops) == ("matmul", scores * 32, 3 * scores)
    assert (sdpa.macs, sdpa.vector_ops) == (raw.macs, raw.vector_ops)


def test_grouped_mm_multiplies_each_row_by_its_experts_weight():
    weight = torch.randn(4, 8, 16, dtype=torch.bfloat16)  # 4 experts, 8 -> 16
    x = torch.randn(10, 8, dtype=torch.bfloat16)  # 10 routed rows
    offs = torch.tensor([2, 5, 7, 10], dtype=torch.int32)
    module = Call(lambda w, x, offs: torch._grouped_mm(x, w, offs=offs), weight)
    raw = raw_op("aten._grouped_mm", module, x, offs)
    assert (raw.kind, raw.macs, sum(raw.params.values())) == ("matmul", 10 * 8 * 16, 4 * 8 * 16)
    assert [n.op_type for n in from_torch(module, (x, offs)).nodes] == ["linear"]


def test_the_transformers_grouped_mm_fallback_is_a_grouped_mm():
    pytest.importorskip("transformers.integrations.moe")
    weight, x = randn((4, 8, 6), (10, 8))
    offs = torch.tensor([2, 5, 7, 10], dtype=torch.int32)
    fallback = torch.ops.transformers.grouped_mm_fallback
    module = Call(lambda w, x, offs: fallback(x, w, offs), weight)
    raw = raw_op("transformers.grouped_mm_fallback", module, x, offs)
    assert (raw.kind, raw.macs) == ("matmul", 10 * 8 * 6)


class CoreOps(nn.Module):
    """Group norm, max pooling, layer norm and a mask test: their core ATen forms."""

    def __init__(self) -> None:
        super().__init__()
        self.gn, self.pool, self.ln = nn.GroupNorm(2, 4), nn.MaxPool2d(2), nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ln(self.pool(self.gn(x))), (x > 0).any(-1)


@pytest.mark.parametrize(
    ("op", "kind", "vector_ops"),
    [
        ("aten.native_group_norm", "norm", 5 * 4 * 8 * 16),
        ("aten.max_pool2d_with_indices", "pool", 4 * 4 * 8 * 4),  # output x 2x2 window
        ("aten.native_layer_norm", "norm", 5 * 4 * 4 * 8),
        ("aten.any", "reduce", 4 * 8 * 16),
    ],
)
def test_core_aten_forms(op, kind, vector_ops):
    raw = raw_op(op, CoreOps(), *randn((1, 4, 8, 16)), core=True)
    assert (raw.kind, raw.vector_ops) == (kind, vector_ops)
    if kind == "pool":
        assert raw.attrs["kernel"] == (2, 2) and raw.attrs["stride"] == 2


class DecoderBlock(nn.Module):
    """RMSNorm, rotary embeddings, grouped-query causal attention, a SwiGLU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm = nn.RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate_up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        length, half = x.shape[-2], self.head_dim // 2
        freq = torch.arange(half) / half
        angle = torch.arange(length)[:, None] * 10_000.0 ** (-freq)
        cos, sin = angle.cos().repeat_interleave(2, -1), angle.sin().repeat_interleave(2, -1)
        pairs = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
        return x * cos + pairs * sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, s, self.heads, -1).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2 * self.kv_heads, -1).transpose(1, 2).chunk(2, 1)
        k = k.repeat_interleave(self.heads // self.kv_heads, 1)
        v = v.repeat_interleave(self.heads // self.kv_heads, 1)
        att = F.scaled_dot_product_attention(self.rotate(q), self.rotate(k), v, is_causal=True)
        x = x + self.o(att.transpose(1, 2).reshape(b, s, d))
        gate, up = self.gate_up(self.norm(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


def test_a_decoder_block_imports_from_core_aten_with_the_same_macs():
    x = randn((1, 8, 32))[0]
    default, core = raw_ops(DecoderBlock(), x), raw_ops(DecoderBlock(), x, core=True)
    assert sum(r.macs for r in core) == sum(r.macs for r in default) > 0
    assert "aten.repeat_interleave.self_int" in {r.source_op for r in default}
    assert "aten.any.dim" in {r.source_op for r in core}  # the causal mask's check
    w = from_torch(DecoderBlock(), x)
    assert w.total_weight_bytes == sum(p.numel() for p in DecoderBlock().parameters())


def test_a_tiny_convnext_v2_imports_with_its_response_norm_a_reduction():
    transformers = pytest.importorskip("transformers")
    config = transformers.ConvNextV2Config(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1])
    torch.manual_seed(0)
    model = transformers.ConvNextV2Model(config).eval()
    w = from_torch(model, torch.randn(1, 3, 32, 32))
    grn = [n for n in w.nodes if "linalg_vector_norm" in n.name]
    assert [n.op_type for n in grn] == ["reduce", "reduce"]  # one per block
    # the norm reads each element of the 4x-wide hidden map once (8x8 then 4x4 pixels)
    assert [n.vector_ops for n in grn] == [8 * 8 * 64, 4 * 4 * 128]
    assert w.total_weight_bytes == sum(p.numel() for p in model.parameters())
