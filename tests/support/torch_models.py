"""The torch importer's small models: a CNN and one transformer layer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class TinyCNN(nn.Module):
    """stem conv-bn-relu, max pool, conv-bn-relu, grouped conv + residual, avg pool, fc."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.c1 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.stem(x)))
        y = F.max_pool2d(x, 2)
        z = F.relu(self.bn1(self.c1(y)))
        z = F.relu(self.c2(z) + y)
        return self.fc(self.pool(z).flatten(1))


class TinyBlock(nn.Module):
    """Embedding, one pre-norm transformer layer (tanh-GELU MLP), tied output head."""

    def __init__(self, vocab: int = 50, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        x = self.ln1(h)
        b, s, d = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        mask = torch.triu(torch.ones(s, s), 1).bool()
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        attn = scores.masked_fill(mask, -1e9).softmax(-1)
        h = h + self.o((attn @ v).transpose(1, 2).reshape(b, s, d))
        m = self.fc1(self.ln2(h))
        m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m**3)))
        h = h + self.fc2(m)
        return self.head(h)
