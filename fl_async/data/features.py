"""In-memory feature vectors: float32 features and int64 labels, fed to a model as they are."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fl_async.validation import InvalidArgument


@dataclass(frozen=True)
class FeatureSet:
    """Feature vectors (float32, N×D) with labels (int64, N).

    Unlike an ``ImageSet`` they are not normalised: a generated data set such as Synthetic
    fixes their scale, and a model sees exactly the features it was generated with.
    """

    features: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        if self.features.dtype != torch.float32 or self.features.dim() != 2:
            raise InvalidArgument(
                f"features must be a float32 tensor N×D, got {self.features.dtype} "
                f"of shape {tuple(self.features.shape)}"
            )
        if self.labels.dtype != torch.int64 or self.labels.shape != (len(self.features),):
            raise InvalidArgument(
                f"labels must be an int64 tensor of shape ({len(self.features)},), got "
                f"{self.labels.dtype} of shape {tuple(self.labels.shape)}"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def input_shape(self) -> tuple[int]:
        """The shape of one example: ``(D,)``."""
        return (int(self.features.shape[1]),)

    def batch(
        self, index: torch.Tensor, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels of the examples ``index`` (int64), on ``device``."""
        return self.features[index].to(device), self.labels[index].to(device)
