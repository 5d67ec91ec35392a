"""Client side: local PyTorch training and evaluation, and the choice of device.

The names are imported on first use (PEP 562), so that ``fl_async.clients.node_data`` serves
the launcher's checks without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fl_async.clients.device import select_device
    from fl_async.clients.training import evaluate, train

_MODULE_OF = {"select_device": "device", "evaluate": "training", "train": "training"}

__all__ = ["evaluate", "select_device", "train"]


def __getattr__(name: str) -> Any:
    """``fl_async.clients.<name>``, imported from its module the first time it is asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'fl_async.clients' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fl_async.clients.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
