"""Move a model's state (parameters and buffers, in ``state_dict`` order) to and from numpy."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from fl_async.validation import InvalidArgument


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """Copies of every ``state_dict`` entry (BatchNorm running statistics included), on the CPU."""
    return [tensor.detach().cpu().numpy().copy() for tensor in model.state_dict().values()]


def set_weights(model: nn.Module, arrays: Sequence[np.ndarray]) -> None:
    """Load ``arrays`` (``get_weights`` order) into ``model``, cast to each entry's dtype."""
    state = model.state_dict()
    if len(arrays) != len(state):
        raise InvalidArgument(
            f"model has {len(state)} state_dict entries, got {len(arrays)} arrays"
        )
    loaded: OrderedDict[str, torch.Tensor] = OrderedDict()
    for (key, current), array in zip(state.items(), arrays, strict=True):
        array = np.asarray(array)
        if array.shape != tuple(current.shape):
            raise InvalidArgument(
                f"{key}: the model expects shape {tuple(current.shape)}, got {array.shape}"
            )
        # torch.tensor copies, so read-only buffers (e.g. from Flower's ArrayRecord) are fine.
        loaded[key] = torch.tensor(array, dtype=current.dtype)
    model.load_state_dict(loaded, strict=True)
