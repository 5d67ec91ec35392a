"""``select_device``: CUDA, then Apple's MPS, then the CPU, unless the user names one."""

from __future__ import annotations

import re

import torch

_CUDA = re.compile(r"^cuda(?::(\d+))?$")
PREFERENCES = ("auto", "cpu", "cuda", "cuda:<index>", "mps")


def select_device(preference: str = "auto") -> torch.device:
    """The torch device for ``preference``; a named device that is not available raises
    ``RuntimeError`` saying why, rather than silently falling back to the CPU."""
    choice = preference.strip().lower()
    if choice == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "mps":
        if not torch.backends.mps.is_available():
            built = "built with MPS" if torch.backends.mps.is_built() else "built without MPS"
            raise RuntimeError(
                f"device 'mps' is not available (this torch is {built}; MPS needs "
                "Apple silicon and macOS 12.3+); use 'auto' or 'cpu'"
            )
        return torch.device("mps")
    match = _CUDA.match(choice)
    if match is None:
        raise ValueError(f"unknown device {preference!r}; choose one of {', '.join(PREFERENCES)}")
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA support"
        raise RuntimeError(
            f"device {preference!r} is not available: this torch has {build} and sees no GPU "
            "(check the driver with nvidia-smi, CUDA_VISIBLE_DEVICES, or on Jetson NVIDIA's "
            "JetPack torch wheel); use 'auto' or 'cpu'"
        )
    index = int(match.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise RuntimeError(
            f"device {preference!r} is not available: "
            f"{torch.cuda.device_count()} CUDA device(s) visible"
        )
    return torch.device(choice)
