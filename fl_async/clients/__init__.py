"""Client side: local PyTorch training and evaluation, and the choice of device."""

from fl_async.clients.device import select_device
from fl_async.clients.training import evaluate, train

__all__ = ["evaluate", "select_device", "train"]
