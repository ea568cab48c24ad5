"""An MLP whose hidden layers have skip connections, including one that skips two layers."""

from __future__ import annotations

import torch
from torch import nn


class SkipMLP(nn.Module):
    def __init__(self, d_in: int = 512, hidden: int = 1024, d_out: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in, hidden)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = torch.relu(self.inp(x))
        h1 = torch.relu(self.fc1(h0)) + h0
        h2 = torch.relu(self.fc2(h1))
        h3 = torch.relu(self.fc3(h2)) + h0  # skips two layers
        return self.out(h3 + h1)


def build():
    """(model, example inputs): a batch of 256 vectors."""
    return SkipMLP().eval(), (torch.randn(256, 512),)
