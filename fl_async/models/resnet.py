"""ResNet-8 (the 6n+2 CIFAR ResNet with n=1) with BatchNorm, for any image size."""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two conv(3×3)–BatchNorm layers and a residual connection (1×1 conv if the shape changes)."""

    def __init__(self, width_in: int, width_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width_in, width_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width_out)
        self.conv2 = nn.Conv2d(width_out, width_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or width_in != width_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(width_in, width_out, 1, stride=stride, bias=False),
                nn.BatchNorm2d(width_out),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output: relu(F(x) + shortcut(x))."""
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet8(nn.Module):
    """Stem conv(16) then one residual block per stage (16, 32, 64 channels; stride 1, 2, 2),
    global average pooling and a linear classifier; ~78k parameters."""

    def __init__(self, *, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
        )
        self.stages = nn.Sequential(
            BasicBlock(16, 16, stride=1),
            BasicBlock(16, 32, stride=2),
            BasicBlock(32, 64, stride=2),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of normalised images."""
        return self.head(self.stages(self.stem(x)))
