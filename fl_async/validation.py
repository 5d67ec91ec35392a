"""Argument checks shared by every layer: each names the bad value and what is allowed.

Every check raises ``InvalidArgument``, which is both a ``ValueError`` and a ``TypeError`` (as
numpy's ``AxisError`` is both a ``ValueError`` and an ``IndexError``): one type to catch for any
bad setting, whether its type or its value is wrong, and ``except ValueError`` still works.
Booleans are refused where a number is asked for (``True`` is not a count); numpy scalars are
accepted and returned as Python ``int`` / ``float``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


class InvalidArgument(ValueError, TypeError):
    """A setting or argument outside what is allowed; the message names it and the rule."""


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    return _is_int(value) or isinstance(value, (float, np.floating))


def _bounds(minimum: Any, maximum: Any, min_open: bool, max_open: bool) -> str:
    """``>= 0``, ``> 0``, ``<= 1``, or an interval such as ``in [0, 1)``."""
    if minimum is not None and maximum is not None:
        return f"in {'(' if min_open else '['}{minimum:g}, {maximum:g}{')' if max_open else ']'}"
    if minimum is not None:
        return f"{'>' if min_open else '>='} {minimum:g}"
    if maximum is not None:
        return f"{'<' if max_open else '<='} {maximum:g}"
    return ""


def _fail(name: str, kind: str, rule: str, value: Any, allow_none: bool) -> InvalidArgument:
    allowed = f"{kind} {rule}".strip() + (" or None" if allow_none else "")
    return InvalidArgument(f"{name} must be {allowed}, got {value!r}")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    allow_none: bool = False,
) -> Any:
    """``value`` as an ``int`` within ``[minimum, maximum]`` (or None when allowed)."""
    if value is None and allow_none:
        return None
    rule = _bounds(minimum, maximum, False, False)
    if not _is_int(value):
        raise _fail(name, "an integer", rule, value, allow_none)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _fail(name, "an integer", rule, value, allow_none)
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    finite: bool = True,
    allow_none: bool = False,
) -> Any:
    """``value`` as a ``float`` within the bounds (``min_open``/``max_open``: strict); ``inf``
    only when not ``finite``; never NaN."""
    if value is None and allow_none:
        return None
    kind = "a finite number" if finite else "a number (inf allowed)"
    rule = _bounds(minimum, maximum, min_open, max_open)
    if not _is_real(value) or math.isnan(value) or (finite and math.isinf(value)):
        raise _fail(name, kind, rule, value, allow_none)
    low = minimum is not None and (value < minimum or (min_open and value == minimum))
    high = maximum is not None and (value > maximum or (max_open and value == maximum))
    if low or high:
        raise _fail(name, kind, rule, value, allow_none)
    return float(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices`` (strings)."""
    allowed = list(choices)
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(repr(c) for c in allowed)
        raise InvalidArgument(f"{name} must be one of {listed}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a Python ``bool`` if it is ``True`` or ``False`` (numpy's too)."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgument(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_seed(name: str, value: Any) -> int:
    """A seed: an integer >= 0 (one seed reproduces a whole run; None would not)."""
    return check_int(name, value, minimum=0)
