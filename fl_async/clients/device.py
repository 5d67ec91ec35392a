"""``select_device``: CUDA, then Apple's MPS, then the CPU, unless the user names one;
``check_device``: the same refusals without importing torch where no accelerator is named;
``limit_torch_threads``: the torch threads of a ClientApp or of the ServerApp's evaluation."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_CUDA = re.compile(r"^cuda(?::(\d+))?$")
PREFERENCES = ("auto", "cpu", "cuda", "cuda:<index>", "mps")


def select_device(preference: str = "auto") -> torch.device:
    """The torch device for ``preference``; a named device that is not available raises
    ``RuntimeError`` saying why, rather than silently falling back to the CPU."""
    import torch  # here: check_device serves the launcher, which runs without torch

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
        raise _unknown(preference)
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


def check_device(preference: str) -> None:
    """Refuse ``preference`` as ``select_device`` would: ``auto`` and ``cpu`` always work and are
    accepted without importing torch; a named accelerator is looked for."""
    choice = preference.strip().lower()
    if choice in ("auto", "cpu"):
        return
    if choice != "mps" and _CUDA.match(choice) is None:
        raise _unknown(preference)
    select_device(preference)


def _unknown(preference: str) -> ValueError:
    return ValueError(f"unknown device {preference!r}; choose one of {', '.join(PREFERENCES)}")


def in_ray_simulation() -> bool:
    """Whether this process runs inside a Ray simulation: a Ray actor, or the process that
    started Ray (Flower's simulation runs the ServerApp there, beside its actors)."""
    ray = sys.modules.get("ray")  # never imported here: only a Ray process has it loaded
    return ray is not None and ray.is_initialized()


def limit_torch_threads(threads: int) -> int:
    """Apply a ``threads`` setting to torch in this process; the count in force after it.

    ``threads`` > 0 is used as given; 0 means one thread inside a Ray simulation and torch's
    default elsewhere. In a simulation every core already runs an actor: a second torch thread
    in a process only competes with them, and a parallel op that waits for a thread the kernel
    gave to another process stalls (docs/running.md, "Threads").
    """
    import torch

    if threads == 0 and in_ray_simulation():
        threads = 1
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()
