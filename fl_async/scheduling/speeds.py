"""Node speed models: how each node's time per example ``t_sample`` is drawn (seconds per example).

Each model is a small frozen dataclass; ``draw(rng)`` takes one node's own generator (see
``VirtualClock`` for the seeding layout), so a node's speed never depends on any other node.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from fl_async.validation import InvalidArgument, check_number


def _check_positive(name: str, value: float) -> None:
    check_number(name, value, minimum=0, min_open=True)


@dataclass(frozen=True)
class LogNormal:
    """``t_sample = median * exp(sigma * z)``, ``z ~ N(0, 1)``: the default, median 1, sigma 1."""

    sigma: float = 1.0
    median: float = 1.0
    name: ClassVar[str] = "lognormal"

    def __post_init__(self) -> None:
        check_number("LogNormal sigma", self.sigma, minimum=0)
        _check_positive("LogNormal median", self.median)

    def draw(self, rng: np.random.Generator) -> float:
        """One node's ``t_sample``, from that node's own generator."""
        return self.median * math.exp(self.sigma * float(rng.standard_normal()))


@dataclass(frozen=True)
class Uniform:
    """``t_sample ~ uniform(low, high)``, ``0 < low <= high`` (default 0.5 to 1.5: median 1)."""

    low: float = 0.5
    high: float = 1.5
    name: ClassVar[str] = "uniform"

    def __post_init__(self) -> None:
        _check_positive("Uniform low", self.low)
        _check_positive("Uniform high", self.high)
        if self.low > self.high:
            raise InvalidArgument(
                f"Uniform needs low <= high, got low={self.low!r} > high={self.high!r}"
            )

    def draw(self, rng: np.random.Generator) -> float:
        """One node's ``t_sample``, from that node's own generator."""
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class Pareto:
    """Classical Pareto: ``t_sample = scale * (1 + L)``, ``L ~ Lomax(shape)``, so ``t >= scale``.

    The median is ``scale * 2 ** (1 / shape)``; the tail is heavier for a smaller ``shape``.
    """

    shape: float = 2.0
    scale: float = 1.0
    name: ClassVar[str] = "pareto"

    def __post_init__(self) -> None:
        _check_positive("Pareto shape", self.shape)
        _check_positive("Pareto scale", self.scale)

    def draw(self, rng: np.random.Generator) -> float:
        """One node's ``t_sample``, from that node's own generator."""
        return self.scale * (1.0 + float(rng.pareto(self.shape)))


@dataclass(frozen=True)
class Trace:
    """Speeds and bandwidths from a FedScale device-capacity file (see ``traces``); no draws.

    ``augmentation_factor`` converts FedScale's inference ms per sample into training time.
    """

    path: str | os.PathLike[str]
    augmentation_factor: float = 3.0
    name: ClassVar[str] = "trace"

    def __post_init__(self) -> None:
        if not Path(self.path).is_file():
            raise FileNotFoundError(
                f"trace file {str(self.path)!r} does not exist; expected a FedScale "
                "device-capacity pickle"
            )
        _check_positive("Trace augmentation_factor", self.augmentation_factor)


SpeedModel = LogNormal | Uniform | Pareto | Trace
"""Any of the speed models."""

SPEED_MODELS: dict[str, type] = {m.name: m for m in (LogNormal, Uniform, Pareto, Trace)}
"""Speed models by the short name accepted as ``VirtualClock(speed=...)``."""
