"""Staleness weights ``s(tau)`` shared by every rule (ALGORITHMS.md, "Staleness weights")."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

StalenessFn = Callable[[int], float]
"""Any callable mapping staleness ``tau`` (server steps, >= 0) to a weight >= 0."""


def _check_non_negative(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Constant:
    """``s(tau) = 1``: every update counts fully, however stale."""

    def __call__(self, tau: int) -> float:
        return 1.0


@dataclass(frozen=True)
class Polynomial:
    """``s(tau) = (1 + tau) ** -a`` (FedAsync's polynomial weight)."""

    a: float = 0.5

    def __post_init__(self) -> None:
        _check_non_negative("Polynomial a", self.a)

    def __call__(self, tau: int) -> float:
        return float((1.0 + tau) ** -self.a)


@dataclass(frozen=True)
class Hinge:
    """``s(tau) = 1`` if ``tau <= b`` else ``1 / (a * (tau - b) + 1)`` (FedAsync's hinge weight)."""

    a: float = 10.0
    b: int = 4

    def __post_init__(self) -> None:
        _check_non_negative("Hinge a", self.a)
        if isinstance(self.b, bool) or not isinstance(self.b, int) or self.b < 0:
            raise ValueError(f"Hinge b must be an integer >= 0, got {self.b!r}")

    def __call__(self, tau: int) -> float:
        if tau <= self.b:
            return 1.0
        return 1.0 / (self.a * (tau - self.b) + 1.0)


_BY_NAME: dict[str, Callable[[], StalenessFn]] = {
    "constant": Constant,
    "polynomial": Polynomial,
    "hinge": Hinge,
}


def resolve_staleness(staleness: StalenessFn | str | None, default: StalenessFn) -> StalenessFn:
    """Return ``staleness`` as a callable: ``None`` means ``default``, a name means its defaults."""
    if staleness is None:
        return default
    if isinstance(staleness, str):
        try:
            return _BY_NAME[staleness]()
        except KeyError:
            raise ValueError(
                f"unknown staleness weight {staleness!r}; allowed: {sorted(_BY_NAME)} "
                "or any callable tau -> float"
            ) from None
    if not callable(staleness):
        raise TypeError(
            f"staleness must be a callable tau -> float or one of {sorted(_BY_NAME)}, "
            f"got {staleness!r}"
        )
    return staleness
