"""Every rule in plain numpy: the readable statement its fast kernel is held equal to.

One module per rule (``asgd``, ``ca2fl``, ``dcasgd``, ``fadas``, ``fedasync``, ``fedbuff``,
``fedcompass``, ``gsgm``, ``mifa``, ``odsgd``, ``ssgd``, ``trend_smooth``), each with
``init(params, ...)`` (the rule's state for a model: ``w`` and its accumulators, by the names
docs/algorithms.md gives them) and ``update(state, update, ...) -> (state, status)`` (one
accepted client update, written in the order of the rule's equation in docs/algorithms.md; the
barrier rules add ``flush``).
They take the rule's hyperparameters as keywords, work on arrays of any floating dtype (float64
for the plain rule, float32 to compare with a kernel bit for bit), never change the state they
are given, and leave validation to the aggregator: they see only updates it accepts. The server
optimizers they step with are the shared ones (``fl_async.aggregators.optimizers``).

The tests feed each rule and its reference the same random updates (hypothesis), on every branch
of the kernel (docs/algorithms.md, References and the shared server optimizers).
"""

from typing import Any

import numpy as np

from fl_async.aggregators.staleness import Constant, Polynomial

State = dict[str, Any]
"""A rule's state: ``w`` and its accumulators (lists of arrays), caches and counters."""


CONSTANT = Constant()
"""``s(tau) = 1``: the default weight of most rules."""
POLYNOMIAL = Polynomial(a=0.5)
"""``s(tau) = (1 + tau)^-0.5``: FedAsync's and FedBuff's default weight."""


def copy(params: Any) -> list[np.ndarray]:
    """Copies of ``params``, each in its own floating dtype."""
    return [np.array(p, copy=True) for p in params]


def zeros(params: Any) -> list[np.ndarray]:
    """A zero array shaped and typed like each of ``params``."""
    return [np.zeros_like(p) for p in params]


def weight_of(staleness: Any, tau: int) -> float:
    """``s(tau)`` as a double, as the aggregator takes it."""
    return float(staleness(int(tau)))
