"""A small U-Net: three down levels, a bottleneck and three up levels with skip connections across them."""

from __future__ import annotations

import torch
from torch import nn


def block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.Conv2d(c_out, c_out, 3, padding=1),
                         nn.ReLU())


class UNet(nn.Module):
    def __init__(self, c_in: int = 3, classes: int = 2, width: int = 8) -> None:
        super().__init__()
        w = width
        self.down1 = block(c_in, w)
        self.down2 = block(w, 2 * w)
        self.down3 = block(2 * w, 4 * w)
        self.pool = nn.MaxPool2d(2)
        self.bottom = block(4 * w, 8 * w)
        self.up3 = nn.ConvTranspose2d(8 * w, 4 * w, 2, stride=2)
        self.dec3 = block(8 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = block(4 * w, 2 * w)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = block(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        d3 = self.down3(self.pool(d2))
        b = self.bottom(self.pool(d3))
        u3 = self.dec3(torch.cat([self.up3(b), d3], dim=1))
        u2 = self.dec2(torch.cat([self.up2(u3), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.head(u1)


def build():
    """(model, example inputs): 4 RGB images of 64x64."""
    return UNet().eval(), (torch.randn(4, 3, 64, 64),)
