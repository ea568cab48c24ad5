"""A small Transformer encoder (two nn.TransformerEncoderLayer blocks) with a classifier head."""

from __future__ import annotations

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab: int = 1000, d_model: int = 128, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True)
            for _ in range(layers)
        )
        self.head = nn.Linear(d_model, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])


def build():
    """(model, example inputs): 8 sequences of 64 tokens."""
    return Encoder().eval(), (torch.randint(0, 1000, (8, 64)),)
