"""An MLP-Mixer block stack (token-mixing and channel-mixing MLPs with LayerNorm and residuals)."""

from __future__ import annotations

import torch
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, channels: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(channels)
        self.channel_mlp = nn.Sequential(nn.Linear(channels, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, tokens: int = 32, channels: int = 128, depth: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(MixerBlock(tokens, channels, 2 * tokens, 4 * channels) for _ in range(depth)))
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def build():
    """(model, example inputs): 8 sequences of 32 patches with 128 channels."""
    return Mixer().eval(), (torch.randn(8, 32, 128),)
