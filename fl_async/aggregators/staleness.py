"""Staleness weights ``s(tau)`` shared by every rule (docs/algorithms.md, Staleness weights)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fl_async.validation import InvalidArgument, check_choice, check_int, check_number

StalenessFn = Callable[[int], float]
"""Any callable mapping staleness ``tau`` (server steps, >= 0) to a weight >= 0."""


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
        check_number("Polynomial a", self.a, minimum=0)

    def __call__(self, tau: int) -> float:
        return float((1.0 + tau) ** -self.a)


@dataclass(frozen=True)
class Hinge:
    """``s(tau) = 1`` if ``tau <= b`` else ``1 / (a * (tau - b) + 1)`` (FedAsync's hinge weight)."""

    a: float = 10.0
    b: int = 4

    def __post_init__(self) -> None:
        check_number("Hinge a", self.a, minimum=0)
        check_int("Hinge b", self.b, minimum=0)

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
        return _BY_NAME[check_choice("staleness", staleness, _BY_NAME)]()
    if not callable(staleness):
        raise InvalidArgument(
            f"staleness must be a callable tau -> float or one of {sorted(_BY_NAME)}, "
            f"got {staleness!r}"
        )
    return staleness
