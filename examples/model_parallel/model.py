"""The model and data of the model-parallel example, shared by the training script and the check.

Data: scikit-learn's handwritten digits (1797 8x8 images, shipped inside the package; no download),
each image read as a sequence of 8 rows of 8 pixels. Model: a small transformer classifier written
as an ``nn.Sequential`` of blocks (row embedding, two encoder layers, pooled head), the form smp's
pipeline splits into stages.
"""

from __future__ import annotations

import torch
from torch import nn

ROWS, COLS, CLASSES = 8, 8, 10


class RowEmbedding(nn.Module):
    """Projects each image row to ``dim`` features and adds a learned row position."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(COLS, dim)
        self.pos = nn.Parameter(torch.zeros(ROWS, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + self.pos


class PooledHead(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x).mean(dim=1))


def build_model(dim: int = 32, heads: int = 4, layers: int = 2, dropout: float = 0.1) -> nn.Sequential:
    blocks: list[nn.Module] = [RowEmbedding(dim)]
    blocks += [
        nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=dropout, batch_first=True)
        for _ in range(layers)
    ]
    blocks.append(PooledHead(dim))
    return nn.Sequential(*blocks)


def digits(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images as [N, 8, 8] floats in [0, 1], labels); a fixed 80/20 split ("train" or "test")."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = 1437
    idx = order[:cut] if split == "train" else order[cut:]
    return x[idx], y[idx]
