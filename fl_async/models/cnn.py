"""Small convolutional networks: ``CNN`` for 28×28 grey digits, ``CNN32`` for 32×32 colour."""

from __future__ import annotations

import torch
from torch import nn


class CNN(nn.Module):
    """conv(3×3, 16) – pool – conv(3×3, 32) – pool – fc(64) – fc(classes); ~105k parameters on
    28×28 grey images, sized so 20 simulated nodes train in minutes on two CPU cores."""

    def __init__(self, *, num_classes: int, in_channels: int, image_size: int) -> None:
        super().__init__()
        side = image_size // 4
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * side * side, 64),
            nn.ReLU(),
            nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of normalised images."""
        return self.classifier(self.features(x))


class CNN32(nn.Module):
    """Three conv(3×3)–pool blocks (32, 64, 128 channels) – fc(128) – fc(classes); ~360k
    parameters on 32×32 colour images."""

    def __init__(self, *, num_classes: int, in_channels: int, image_size: int) -> None:
        super().__init__()
        side = image_size // 8
        layers: list[nn.Module] = []
        for width_in, width_out in ((in_channels, 32), (32, 64), (64, 128)):
            layers += [
                nn.Conv2d(width_in, width_out, kernel_size=3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(128 * side * side, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of normalised images."""
        return self.classifier(self.features(x))
