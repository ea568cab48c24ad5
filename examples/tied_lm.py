"""A tiny language model whose output projection is its token embedding (tied weights, as GPT-2's lm_head).

Split so that the embedding and the head land on different stages, the tied
weight is held by two stage processes; training sums its two gradients across
them before each optimizer step (``dnnplace run --training``).
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class TiedLM(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)  # as GPT-2: small, so the tied head's logits start small
        self.head.weight = self.embed.weight  # tied: one parameter, used first and last

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


VOCAB, BATCH, SEQ = 256, 4, 16


def build():
    """(model, tokens, no keywords, next-token cross-entropy): 4 sequences of 16 tokens."""
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    targets = tokens[:, 1:].reshape(-1)

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets)

    return TiedLM(VOCAB).eval(), (tokens[:, :-1].contiguous(),), {}, loss_fn
