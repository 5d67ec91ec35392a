"""FADAS: federated adaptive asynchronous optimization (Wang, Wang, Lu, Chen, ICML 2024;
docs/algorithms.md, FADAS).

A buffer of ``M`` updates; at each step AMSGrad on their mean, with a rate cut by the largest
staleness in the buffer (the delay-adaptive rate). ``fadas_reference`` states the rule in plain
numpy; ``FADAS`` runs each update as one fused chunk kernel into scratch, checked and then
published (as FedBuff does). AMSGrad is the shared server optimizer
(``fl_async.aggregators.optimizers``); ``fl_async.aggregators.reference.fadas`` is the plain rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.aggregators.base import HELD, MODEL, STEPPED, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, probe
from fl_async.aggregators.optimizers import AMSGrad, descend_chunk
from fl_async.aggregators.updates import ClientUpdate
from fl_async.validation import check_bool, check_choice, check_int, check_number

DELAY_RULES = ("inverse", "capped", "none")
"""Past ``tau_c``: ``lr / tau_max`` (``inverse``, the authors' code), ``min(lr, 1 / tau_max)``
(``capped``), or ``lr`` always (``none``: plain FedAMS)."""


def delay_adaptive_lr(lr: float, tau_max: int, *, tau_c: int, delay_rule: str) -> float:
    """The step's rate ``lr_t`` given the largest staleness ``tau_max`` in the buffer."""
    if tau_max <= tau_c or delay_rule == "none":
        return lr
    return lr / tau_max if delay_rule == "inverse" else min(lr, 1.0 / tau_max)


class FADAS(Aggregator):
    """Buffered AMSGrad with a delay-adaptive rate.

    On each update: ``B <- B + delta``; ``c <- c + 1``; ``tau_max <- max(tau_max, tau)``. When
    ``c = buffer_size``: ``g = B / M``; ``m <- beta1 m + (1 - beta1) g``; ``q <- beta2 q +
    (1 - beta2) g g``; ``q_max <- max(q_max, q)``; ``w <- w - lr_t m / (sqrt(q_max) + eps)``
    with ``lr_t = delay_adaptive_lr(...)``; then ``B``, ``c`` and ``tau_max`` restart.
    ``bias_correction=True`` divides ``lr_t`` by ``1 - beta1^t`` and ``sqrt(q_max)`` by
    ``sqrt(1 - beta2^t)`` (as the authors' code). No staleness weight. The AMSGrad step is the
    shared ``optimizers.AMSGrad``.
    """

    name = "FADAS"

    def __init__(
        self,
        *,
        buffer_size: int = 5,
        lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.99,
        eps: float = 1e-8,
        tau_c: int = 1,
        delay_rule: str = "inverse",
        bias_correction: bool = False,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=None, max_staleness=max_staleness)
        self.buffer_size = check_int("buffer_size", buffer_size, minimum=1)
        self.lr = check_number("lr", lr, minimum=0)
        self.beta1 = check_number("beta1", beta1, minimum=0, maximum=1, max_open=True)
        self.beta2 = check_number("beta2", beta2, minimum=0, maximum=1, max_open=True)
        self.eps = check_number("eps", eps, minimum=0, min_open=True)
        self.tau_c = check_int("tau_c", tau_c, minimum=0)
        self.delay_rule = check_choice("delay_rule", delay_rule, DELAY_RULES)
        self.bias_correction = check_bool("bias_correction", bias_correction)
        self.optimizer = AMSGrad(
            beta1=self.beta1, beta2=self.beta2, eps=self.eps, bias_correction=self.bias_correction
        )
        """The server optimizer of every step."""

    @property
    def count(self) -> int:
        """Updates held in the buffer since the last step."""
        return self._count

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "buffer_size": self.buffer_size,
            "lr": self.lr,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "tau_c": self.tau_c,
            "delay_rule": self.delay_rule,
            "bias_correction": self.bias_correction,
            **super().hyperparameters(),
        }

    def _init_state(self) -> None:
        for name in ("B", "m", "q", "q_max"):
            self._acc[name] = self._zeros()
        self._count, self._tau_max, self._t = 0, 0, 0

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        tau_max = max(self._tau_max, int(update.staleness))
        if self._count + 1 < self.buffer_size:
            self._advance(_add, ["B"], [delta], delta=delta, base=base)
            self._count, self._tau_max = self._count + 1, tau_max
            return HELD
        t = self._t + 1
        lr_t = delay_adaptive_lr(self.lr, tau_max, tau_c=self.tau_c, delay_rule=self.delay_rule)
        kernel = _step_kernel(self.optimizer, buffer_size=self.buffer_size, lr=lr_t, t=t)
        names = ["B", "m", "q", "q_max", MODEL]
        self._advance(kernel, names, [delta], delta=delta, base=base, scratch=1)
        for b in self._acc["B"]:  # B / M was published as B: the buffer starts empty
            b.fill(0.0)
        self._count, self._tau_max, self._t = 0, 0, t
        return STEPPED

    def _rule_state(self) -> dict[str, Any]:
        acc = self._acc
        return {
            "buffer": self._copy_arrays(acc["B"]),
            "m": self._copy_arrays(acc["m"]),
            "q": self._copy_arrays(acc["q"]),
            "q_max": self._copy_arrays(acc["q_max"]),
            "count": self._count,
            "tau_max": self._tau_max,
            "t": self._t,
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        for name, key in (("B", "buffer"), ("m", "m"), ("q", "q"), ("q_max", "q_max")):
            self._acc[name] = self._copy_arrays(state[key])
        self._count, self._tau_max = int(state["count"]), int(state["tau_max"])
        self._t = int(state["t"])


def _add(nb, b, d) -> float:
    """``B <- B + delta`` on one chunk."""
    np.add(b, d, out=nb)
    return probe(nb)


def _step_kernel(
    optimizer: AMSGrad, *, buffer_size: int, lr: float, t: int
) -> Callable[..., float]:
    """The last update of a buffer, and AMSGrad's step with ``B / M``, on one chunk."""

    def kernel(ng, b, nm, m, nq, q, nv, v, out, w, d, tmp) -> float:
        np.add(b, d, out=ng)
        np.divide(ng, buffer_size, out=ng)  # g = B / M
        x = optimizer.direction_chunk(
            new=(nm, nq, nv), old=(m, q, v), terms=((ng, 1.0),), tmp=tmp, lr=lr, t=t
        )
        descend_chunk(out, w, x, tmp)  # w - lr_t m / (sqrt(q_max) + eps)
        # q_max reaches w through a division that hides Inf: probe every output
        return probe(ng) + probe(nm) + probe(nq) + probe(nv) + probe(out)

    return kernel
