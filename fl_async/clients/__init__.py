"""Client side: local PyTorch training and evaluation, and the choice of device.

The names are imported on first use (PEP 562), so that ``fl_async.clients.node_data`` serves
the launcher's checks without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fl_async.lazy import lazy_names

if TYPE_CHECKING:
    from fl_async.clients.device import select_device
    from fl_async.clients.training import evaluate, train

_MODULE_OF = {"select_device": "device", "evaluate": "training", "train": "training"}

__all__ = ["evaluate", "select_device", "train"]


__getattr__, __dir__ = lazy_names(__name__, _MODULE_OF, globals())
