"""Multinomial logistic regression: one linear layer on the flattened input."""

from __future__ import annotations

import torch
from torch import nn


class LogReg(nn.Module):
    """``logits = W x + b`` over the flattened input (softmax cross-entropy is the training
    loss); FedProx's model for Synthetic: 610 parameters on 60 features and 10 classes."""

    def __init__(self, *, num_features: int, num_classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(num_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of feature vectors (or images, flattened)."""
        return self.linear(x.flatten(1))
