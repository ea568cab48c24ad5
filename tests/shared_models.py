"""Small PyTorch models several test modules share (the source as text too, for stage workers that import it
from a file)."""

from __future__ import annotations

# a block called at two depths (ALBERT-style sharing) and a tied embedding / head; op-level groups:
# 0 embedding, 1 linear(block), 2 tanh, 3 linear(mid), 4 tanh, 5 linear(block), 6 tanh, 7 linear(head = embedding)
TWICE = """
import torch
from torch import nn


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.block = nn.Linear(16, 16)
        self.mid = nn.Linear(16, 16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        x = torch.tanh(self.block(self.embed(tokens)))
        x = torch.tanh(self.mid(x))
        x = torch.tanh(self.block(x))
        return self.head(x)


def build():
    return Twice().eval(), (torch.randint(0, 32, (4, 8)),)
"""


def twice_module():
    """:data:`TWICE` as a module (its ``Twice`` and ``build``)."""
    import types

    module = types.ModuleType("dnnplace_test_twice")
    exec(compile(TWICE, "twice.py", "exec"), module.__dict__)
    return module
