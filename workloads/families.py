"""Parameterised architecture families written with ``torch.nn``, for generated datasets.

Each family is one builder function (depth, width, kernel size, expansion, ... as
arguments) plus the example inputs it is exported with and the rule that names a variant
(``resnet-basic-d18-w32``). :class:`Variant` ties a family to one set of parameters and
imports it with :func:`workloads.from_torch`:

>>> v = Variant("resnet-basic", {"depth": 18, "width": 32})
>>> v.name
'resnet-basic-d18-w32'
>>> w = v.to_workload()

No family uses attention. Modules are built on the ``meta`` device and their parameters
filled from a seeded ``torch.Generator`` (the graph never depends on the values), so
building a variant touches no global random state and is deterministic.

Families (:data:`FAMILIES`):

* ``vgg``: plain convolution stacks with batch-norm and max pooling, three-layer classifier.
* ``resnet-basic`` / ``resnet-bottleneck``: four-stage ResNets of basic (two 3x3) or
  bottleneck (1x1-3x3-1x1, expansion 4) blocks with projection shortcuts.
* ``mobilenet``: MobileNetV2-style inverted residuals (1x1 expansion, depthwise kxk,
  linear 1x1 projection), depth and width multipliers.
* ``inception``: GoogLeNet-style modules of four parallel branches joined by a concat.
* ``unet``: encoder-decoder with transposed-convolution upsampling and concatenated skips.
* ``lstm`` / ``gru``: recurrent cells unrolled over ``steps`` time steps with
  ``nn.Linear`` and elementwise gates, stacked ``layers`` deep, optionally bidirectional.
* ``mlp``: deep perceptrons (linear, layer-norm, ReLU per layer).
* ``recsys``: DLRM-style (dot-product feature interaction) and wide-and-deep
  recommenders with one embedding table per sparse feature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workloads.ir import Workload

IMAGE_SIZE = 224
UNET_IMAGE_SIZE = 256
NUM_CLASSES = 1000
RECSYS_ROWS = 20_000


# --------------------------------------------------------------------------- building blocks


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """Convolution (``same``-style padding, no bias) followed by batch-norm."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    )


def conv_bn_relu(
    cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    """Convolution, batch-norm and ReLU."""
    return nn.Sequential(*conv_bn(cin, cout, kernel, stride, groups), nn.ReLU())


def classifier(features: int, hidden: Sequence[int], out: int) -> nn.Sequential:
    """Linear layers with ReLU between them: ``features -> *hidden -> out``."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    return nn.Sequential(*layers, nn.Linear(features, out))


# --------------------------------------------------------------------------- plain CNN

#: convolutions per stage of VGG-11/13/16/19 (Simonyan and Zisserman, Table 1, A/B/D/E)
VGG_STAGES = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}


def vgg(depth: int, width: int) -> nn.Module:
    """VGG with batch-norm: five stages of 3x3 convolutions (``width`` doubling to ``8 *
    width``), each closed by a 2x2 max pool, then a classifier of two hidden layers of
    ``64 * width`` units (VGG's 4096 at ``width`` 64)."""
    layers: list[nn.Module] = []
    cin = 3
    for stage, convs in enumerate(VGG_STAGES[depth]):
        cout = width * min(2**stage, 8)
        for _ in range(convs):
            layers.append(conv_bn_relu(cin, cout, 3))
            cin = cout
        layers.append(nn.MaxPool2d(2))
    side = IMAGE_SIZE // 32
    hidden = 64 * width
    return nn.Sequential(
        *layers, nn.Flatten(), classifier(cin * side * side, [hidden, hidden], NUM_CLASSES)
    )


# --------------------------------------------------------------------------- residual CNNs

#: blocks per stage by depth, basic blocks (2 convolutions each) and bottlenecks (3 each)
RESNET_BLOCKS = {
    "basic": {10: (1, 1, 1, 1), 18: (2, 2, 2, 2), 26: (3, 3, 3, 3), 34: (3, 4, 6, 3)},
    "bottleneck": {26: (2, 2, 2, 2), 38: (3, 3, 3, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)},
}


class ResidualBlock(nn.Module):
    """A basic (3x3, 3x3) or bottleneck (1x1, 3x3, 1x1 x4) block with its shortcut."""

    def __init__(self, kind: str, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * (4 if kind == "bottleneck" else 1)
        if kind == "basic":
            self.body = nn.Sequential(conv_bn_relu(cin, width, 3, stride), conv_bn(width, width, 3))
        else:
            self.body = nn.Sequential(
                conv_bn_relu(cin, width, 1),
                conv_bn_relu(width, width, 3, stride),
                conv_bn(width, cout, 1),
            )
        self.shortcut = (
            conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()
        )
        self.out_channels = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet(block: str, depth: int, width: int) -> nn.Module:
    """ResNet of ``block`` blocks ("basic" or "bottleneck"): 7x7 stem, max pool, four stages
    of widths ``width * (1, 2, 4, 8)``, global average pool and classifier; ``depth``
    selects the blocks per stage (:data:`RESNET_BLOCKS`)."""
    layers: list[nn.Module] = [conv_bn_relu(3, width, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = width
    for stage, blocks in enumerate(RESNET_BLOCKS[block][depth]):
        for i in range(blocks):
            unit = ResidualBlock(block, cin, width * 2**stage, 2 if stage and not i else 1)
            layers.append(unit)
            cin = unit.out_channels
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, NUM_CLASSES)
    )


# --------------------------------------------------------------------------- inverted residuals

#: MobileNetV2 stages: (expansion, channels, blocks, stride); Sandler et al., Table 2
MOBILENET_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _round_channels(channels: float, divisor: int = 8) -> int:
    """``channels`` rounded to a multiple of ``divisor`` (MobileNet's ``_make_divisible``)."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


class InvertedResidual(nn.Module):
    """1x1 expansion (skipped at expansion 1), depthwise kxk, linear 1x1 projection, and the
    residual add when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int, kernel: int) -> None:
        super().__init__()
        hidden = cin * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(conv_bn_relu(cin, hidden, 1))
        layers += [
            conv_bn_relu(hidden, hidden, kernel, stride, groups=hidden),
            conv_bn(hidden, cout, 1),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


def mobilenet(depth: int, width: int, kernel: int, expansion: int) -> nn.Module:
    """MobileNetV2 with multipliers: ``depth`` and ``width`` in percent of the blocks per
    stage and of the channels, depthwise ``kernel`` and ``expansion`` in place of 3 and 6."""
    scale = width / 100
    cin = _round_channels(32 * scale)
    layers: list[nn.Module] = [conv_bn_relu(3, cin, 3, 2)]
    for t, c, n, s in MOBILENET_STAGES:
        cout = _round_channels(c * scale)
        for i in range(max(1, round(n * depth / 100))):
            layers.append(
                InvertedResidual(cin, cout, s if i == 0 else 1, expansion if t != 1 else 1, kernel)
            )
            cin = cout
    last = _round_channels(1280 * max(1.0, scale))
    return nn.Sequential(
        *layers,
        conv_bn_relu(cin, last, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(last, NUM_CLASSES),
    )


# --------------------------------------------------------------------------- multi-branch CNN


class InceptionModule(nn.Module):
    """Four parallel branches concatenated on channels: 1x1; 1x1 then 3x3; 1x1 then 5x5
    (two 3x3 when ``factorized``, as in Inception-v2); 3x3 max pool then 1x1."""

    def __init__(self, cin: int, width: int, factorized: bool) -> None:
        super().__init__()
        wide = (
            [conv_bn_relu(width // 2, width, 3), conv_bn_relu(width, width, 3)]
            if factorized
            else [conv_bn_relu(width // 2, width, 5)]
        )
        self.branches = nn.ModuleList(
            [
                conv_bn_relu(cin, width, 1),
                nn.Sequential(conv_bn_relu(cin, width, 1), conv_bn_relu(width, 2 * width, 3)),
                nn.Sequential(conv_bn_relu(cin, width // 2, 1), *wide),
                nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn_relu(cin, width, 1)),
            ]
        )
        self.out_channels = 5 * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


def inception(modules: Sequence[int], width: int, factorized: bool) -> nn.Module:
    """GoogLeNet-style network: stem (7x7/2, pool, 1x1, 3x3, pool), three stages of
    ``modules[i]`` inception modules (branch width ``width * 2**i``) separated by 3x3/2 max
    pools, global average pool and classifier."""
    layers: list[nn.Module] = [
        conv_bn_relu(3, width, 7, 2),
        nn.MaxPool2d(3, 2, 1),
        conv_bn_relu(width, width, 1),
        conv_bn_relu(width, 3 * width, 3),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 3 * width
    for stage, count in enumerate(modules):
        if stage:
            layers.append(nn.MaxPool2d(3, 2, 1))
        for _ in range(count):
            unit = InceptionModule(cin, width * 2**stage, factorized)
            layers.append(unit)
            cin = unit.out_channels
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, NUM_CLASSES)
    )


# --------------------------------------------------------------------------- encoder-decoder


def _conv_block(cin: int, cout: int, convs: int) -> nn.Sequential:
    return nn.Sequential(*(conv_bn_relu(cin if i == 0 else cout, cout, 3) for i in range(convs)))


class UNet(nn.Module):
    """U-Net: ``levels`` encoder blocks (``convs`` 3x3 convolutions each, channels
    ``width * 2**i``) with 2x2 max pools, a bottleneck block, and as many decoder levels
    (2x2 transposed convolution, concat with the encoder's skip, a conv block), then a 1x1
    convolution to ``classes`` maps."""

    def __init__(self, levels: int, width: int, convs: int, classes: int = 2) -> None:
        super().__init__()
        widths = [width * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList(
            _conv_block(3 if i == 0 else widths[i - 1], widths[i], convs) for i in range(levels)
        )
        self.pool = nn.MaxPool2d(2)
        self.bottom = _conv_block(widths[levels - 1], widths[levels], convs)
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2) for i in reversed(range(levels))
        )
        self.decode = nn.ModuleList(
            _conv_block(2 * widths[i], widths[i], convs) for i in reversed(range(levels))
        )
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for up, block, skip in zip(self.up, self.decode, reversed(skips)):
            x = block(torch.cat([up(x), skip], dim=1))
        return self.head(x)


def unet(levels: int, width: int, convs: int) -> nn.Module:
    """:class:`UNet` with ``levels`` levels (see there)."""
    return UNet(levels, width, convs)


# --------------------------------------------------------------------------- recurrent


class UnrolledRNN(nn.Module):
    """An LSTM or GRU unrolled over the sequence with ``nn.Linear`` gates.

    Token ids ``[B, steps]`` are embedded; each layer runs one cell per direction per time
    step (the input projection and the recurrent projection are separate linears, the gates
    elementwise; the first step has no recurrent projection since the state starts at
    zero); a bidirectional layer concatenates both directions' states per step for the
    next layer. The last layer's final states feed a linear classifier.
    """

    def __init__(
        self, cell: str, layers: int, hidden: int, bidirectional: bool, vocab: int, embed: int
    ) -> None:
        super().__init__()
        self.cell, self.hidden = cell, hidden
        gates = 4 if cell == "lstm" else 3
        directions = 2 if bidirectional else 1
        self.directions = directions
        self.embed = nn.Embedding(vocab, embed)
        sizes = [embed] + [hidden * directions] * (layers - 1)
        self.ih = nn.ModuleList(
            nn.ModuleList(nn.Linear(n, gates * hidden) for _ in range(directions)) for n in sizes
        )
        self.hh = nn.ModuleList(
            nn.ModuleList(nn.Linear(hidden, gates * hidden) for _ in range(directions))
            for _ in sizes
        )
        self.head = nn.Linear(hidden * directions, NUM_CLASSES)

    def step(
        self, x: torch.Tensor, state: tuple | None, ih: nn.Linear, hh: nn.Linear
    ) -> tuple[torch.Tensor, tuple]:
        """One cell step: returns the new hidden state and the full state."""
        gx = ih(x)
        if self.cell == "lstm":
            gates = gx if state is None else gx + hh(state[0])
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(i) * torch.tanh(g)
            if state is not None:
                c = c + torch.sigmoid(f) * state[1]
            h = torch.sigmoid(o) * torch.tanh(c)
            return h, (h, c)
        xr, xz, xn = gx.chunk(3, dim=-1)
        if state is None:
            h = (1 - torch.sigmoid(xz)) * torch.tanh(xn)
        else:
            hr, hz, hn = hh(state[0]).chunk(3, dim=-1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1 - z) * n + z * state[0]
        return h, (h,)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq = list(self.embed(ids).unbind(1))
        finals: list[torch.Tensor] = []
        for ih, hh in zip(self.ih, self.hh):
            outputs = []
            finals = []
            for d in range(self.directions):
                order = range(len(seq)) if d == 0 else reversed(range(len(seq)))
                states: dict[int, torch.Tensor] = {}
                state = None
                for t in order:
                    states[t], state = self.step(seq[t], state, ih[d], hh[d])
                outputs.append(states)
                finals.append(state[0])
            seq = (
                [torch.cat([o[t] for o in outputs], dim=-1) for t in range(len(seq))]
                if self.directions > 1
                else [outputs[0][t] for t in range(len(seq))]
            )
        last = torch.cat(finals, dim=-1) if self.directions > 1 else finals[0]
        return self.head(last)


def rnn(cell: str, layers: int, hidden: int, steps: int, bidirectional: bool) -> nn.Module:
    """:class:`UnrolledRNN` over ``steps`` tokens of a 10,000-word vocabulary embedded in
    ``hidden`` dimensions (``steps`` only fixes the input shape)."""
    del steps  # the sequence length is the example input's
    return UnrolledRNN(cell, layers, hidden, bidirectional, vocab=10_000, embed=hidden)


# --------------------------------------------------------------------------- MLPs, recommenders


def mlp(depth: int, width: int, features: int = 512) -> nn.Module:
    """``depth`` hidden layers of ``width`` units (linear, layer-norm, ReLU) on ``features``
    inputs, then a linear classifier."""
    layers: list[nn.Module] = []
    cin = features
    for _ in range(depth):
        layers += [nn.Linear(cin, width), nn.LayerNorm(width), nn.ReLU()]
        cin = width
    return nn.Sequential(*layers, nn.Linear(cin, NUM_CLASSES))


class Recommender(nn.Module):
    """Click-through-rate model on ``dense`` float features and ``sparse`` categorical ids
    (one embedding table of ``rows`` x ``dim`` per feature).

    ``interaction="dot"`` is DLRM: a bottom MLP maps the dense features to ``dim``, the
    pairwise dot products of all ``sparse + 1`` vectors (one batched matmul) are
    concatenated with it and fed to the top MLP. ``interaction="wide"`` is wide-and-deep:
    the concatenated embeddings and dense features go through the deep MLP, a linear model
    over the dense and hashed cross features is added to its logit.
    """

    def __init__(
        self, interaction: str, sparse: int, dim: int, layers: int, dense: int, rows: int
    ) -> None:
        super().__init__()
        self.interaction = interaction
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(sparse))
        hidden = [4 * dim] * layers
        if interaction == "dot":
            self.bottom = classifier(dense, hidden, dim)
            top_in = dim + (sparse + 1) ** 2
        else:
            self.wide = nn.Linear(dense + 1024, 1)
            top_in = dense + sparse * dim
        self.top = classifier(top_in, hidden, 1)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor, cross: torch.Tensor) -> torch.Tensor:
        embedded = [table(ids[:, i]) for i, table in enumerate(self.tables)]
        if self.interaction == "dot":
            x = torch.relu(self.bottom(dense))
            z = torch.stack([x, *embedded], dim=1)
            pairs = torch.bmm(z, z.transpose(1, 2)).flatten(1)
            return torch.sigmoid(self.top(torch.cat([x, pairs], dim=1)))
        deep = self.top(torch.cat([dense, *embedded], dim=1))
        return torch.sigmoid(deep + self.wide(torch.cat([dense, cross], dim=1)))


def recommender(interaction: str, sparse: int, dim: int, layers: int) -> nn.Module:
    """:class:`Recommender` with 13 dense features (as Criteo's) and 20,000-row tables."""
    return Recommender(interaction, sparse, dim, layers, dense=13, rows=RECSYS_ROWS)


# --------------------------------------------------------------------------- registry


def _image(size: int = IMAGE_SIZE) -> Callable[[dict, torch.Generator], tuple[torch.Tensor, ...]]:
    def inputs(params: dict, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(1, 3, size, size, generator=gen),)

    return inputs


def _tokens(params: dict, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 10_000, (1, params["steps"]), generator=gen),)


def _features(params: dict, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 512, generator=gen),)


def _ctr(params: dict, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (
        torch.randn(1, 13, generator=gen),
        torch.randint(0, RECSYS_ROWS, (1, params["sparse"]), generator=gen),
        torch.randn(1, 1024, generator=gen),
    )


@dataclass(frozen=True)
class Family:
    """An architecture family: its builder, example inputs and variant naming.

    Attributes:
        name: family name (``"resnet-basic"``).
        builder: ``builder(**params) -> nn.Module``.
        inputs: ``inputs(params, generator) -> example inputs`` (batch 1).
        label: ``label(params) -> variant name``; names are stable, so keep them unique.
        depth: the parameter that makes the network deeper (more nodes when larger).
        description: one line for the documentation.
    """

    name: str
    builder: Callable[..., nn.Module]
    inputs: Callable[[dict, torch.Generator], tuple[torch.Tensor, ...]]
    label: Callable[[dict], str]
    depth: str
    description: str


def _rnn_label(p: dict) -> str:
    prefix = ("bi" if p["bidirectional"] else "") + p["cell"]
    return f"{prefix}-l{p['layers']}-h{p['hidden']}-t{p['steps']}"


def _rnn_family(cell: str) -> Family:
    """The family of ``cell`` (``"lstm"`` or ``"gru"``) unrolled over the sequence."""
    return Family(
        cell,
        lambda layers, hidden, steps, bidirectional: rnn(
            cell, layers, hidden, steps, bidirectional
        ),
        _tokens,
        lambda p: _rnn_label({**p, "cell": cell}),
        "steps",
        f"{cell.upper()} unrolled over the sequence (linear gates), stacked, optionally "
        "bidirectional",
    )


def _recsys_label(p: dict) -> str:
    kind = "dlrm" if p["interaction"] == "dot" else "widedeep"
    return f"{kind}-s{p['sparse']}-e{p['dim']}-l{p['layers']}"


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "vgg",
            vgg,
            _image(),
            lambda p: f"vgg-d{p['depth']}-w{p['width']}",
            "depth",
            "plain CNN: VGG-11/13/16/19 stages of 3x3 conv + BN + ReLU, max pools, 3 FC layers",
        ),
        Family(
            "resnet-basic",
            lambda depth, width: resnet("basic", depth, width),
            _image(),
            lambda p: f"resnet-basic-d{p['depth']}-w{p['width']}",
            "depth",
            "ResNet of basic blocks (two 3x3 convs + shortcut), four stages",
        ),
        Family(
            "resnet-bottleneck",
            lambda depth, width: resnet("bottleneck", depth, width),
            _image(),
            lambda p: f"resnet-bottleneck-d{p['depth']}-w{p['width']}",
            "depth",
            "ResNet of bottleneck blocks (1x1, 3x3, 1x1 x4 + shortcut), four stages",
        ),
        Family(
            "mobilenet",
            mobilenet,
            _image(),
            lambda p: f"mobilenet-d{p['depth']}-w{p['width']}-k{p['kernel']}-e{p['expansion']}",
            "depth",
            "inverted residuals (1x1 expand, depthwise kxk, 1x1 project), MobileNetV2 stages",
        ),
        Family(
            "inception",
            lambda modules, width, factorized: inception(modules, width, factorized),
            _image(),
            lambda p: (
                f"inception-m{'-'.join(map(str, p['modules']))}-w{p['width']}"
                + ("-f" if p["factorized"] else "")
            ),
            "modules",
            "GoogLeNet-style modules: four parallel branches joined by a concat",
        ),
        Family(
            "unet",
            unet,
            _image(UNET_IMAGE_SIZE),
            lambda p: f"unet-l{p['levels']}-w{p['width']}-c{p['convs']}",
            "levels",
            "U-Net encoder-decoder: conv blocks, max pools, transposed convs, concatenated skips",
        ),
        _rnn_family("lstm"),
        _rnn_family("gru"),
        Family(
            "mlp",
            lambda depth, width: mlp(depth, width),
            _features,
            lambda p: f"mlp-d{p['depth']}-w{p['width']}",
            "depth",
            "deep perceptron: linear + layer-norm + ReLU per layer",
        ),
        Family(
            "recsys",
            recommender,
            _ctr,
            _recsys_label,
            "sparse",
            "DLRM (dot interaction) and wide-and-deep recommenders, one table per sparse feature",
        ),
    )
}


# --------------------------------------------------------------------------- variants


def materialize(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Give a module built on the ``meta`` device real CPU storage, filled deterministically:
    parameters ``N(0, 0.02)`` from ``generator``, batch-norm running variance 1, other
    buffers 0. Returns the module, in eval mode."""
    module = module.to_empty(device="cpu")
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 0.02, generator=generator)
        for name, buf in module.named_buffers():
            buf.fill_(1 if name.endswith("running_var") else 0)
    return module.eval()


def _jsonable(value: Any) -> Any:
    """Tuples as lists, so parameters compare equal after a JSON round trip."""
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Variant:
    """One member of a family: ``Variant("vgg", {"depth": 11, "width": 16})``."""

    family: str
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise KeyError(f"unknown family {self.family!r}; known: {sorted(FAMILIES)}")
        object.__setattr__(self, "params", {k: _jsonable(v) for k, v in self.params.items()})

    @property
    def name(self) -> str:
        """The stable variant name (``resnet-basic-d18-w32``)."""
        return FAMILIES[self.family].label(self.params)

    def build(self, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """The module (eval mode, weights drawn from ``seed``) and its example inputs."""
        family = FAMILIES[self.family]
        generator = torch.Generator().manual_seed(seed)
        with torch.device("meta"):
            module = family.builder(**self.params)
        module = materialize(module, generator)
        return module, family.inputs(self.params, generator)

    def to_workload(self, seed: int = 0) -> Workload:
        """Import the variant with :func:`workloads.from_torch` (int8); ``meta`` records the
        family, parameters, seed and torch version."""
        from workloads.torch_import import from_torch

        module, args = self.build(seed)
        workload = from_torch(module, args, name=self.name)
        workload.meta.update(
            family=self.family,
            builder=f"workloads.families.FAMILIES[{self.family!r}]",
            params=self.params,
            seed=seed,
            versions={"torch": torch.__version__},
        )
        return workload
