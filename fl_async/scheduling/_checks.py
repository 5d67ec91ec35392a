"""Argument checks for the scheduling layer: each error names the value and what is allowed."""

from __future__ import annotations

import math

import numpy as np


def check_int(name: str, value: int, *, minimum: int) -> int:
    """Validate an integer ``value >= minimum`` (numpy integers too) or raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_number(
    name: str, value: float, *, minimum: float = 0.0, strict: bool = False, finite: bool = True
) -> float:
    """Validate a real ``value >= minimum`` (``>`` if ``strict``; ``inf`` unless ``finite``)."""
    op = ">" if strict else ">="
    kind = "a finite number" if finite else "a number (inf allowed)"
    allowed = f"{kind} {op} {minimum:g}"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or math.isnan(value)
        or (finite and math.isinf(value))
    ):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)
