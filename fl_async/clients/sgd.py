"""``LocalSGD``: the update ``torch.optim.SGD`` applies, through torch's own functional
``torch.optim.sgd.sgd`` (what ``SGD.step`` calls), without the optimizer class.

Constructing any ``torch.optim`` optimizer imports ``torch._dynamo`` (its methods carry
``torch._disable_dynamo``), about a second of CPU in every process that trains: each Ray actor
of a simulation on its first task, and on a device every task, which Flower runs in a fresh
``flwr-clientapp`` process. The arithmetic is the same call with the same arguments
(``SGD``'s defaults: no dampening, no Nesterov, not maximised, foreach and fused left to torch),
so the weights are bit for bit those of ``torch.optim.SGD``; ``tests/test_training.py`` checks it.
"""

from __future__ import annotations

import torch
from torch.optim.sgd import sgd

from fl_async.validation import check_number


class LocalSGD:
    """SGD with optional momentum and weight decay over ``params``, as ``torch.optim.SGD``."""

    def __init__(
        self, params: list[torch.Tensor], *, lr: float, momentum: float, weight_decay: float
    ) -> None:
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            check_number(name, value, minimum=0, finite=False)
        self.params = list(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self._buffers: dict[int, torch.Tensor | None] = {}  # by position in params

    def zero_grad(self) -> None:
        """Drop every gradient (``set_to_none=True``, ``torch.optim``'s default)."""
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of the parameters that have a gradient; momentum buffers start at the
        first gradient, as ``torch.optim.SGD``'s do."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in live]
        grads = [p.grad for p in params]
        buffers = [self._buffers.get(i) for i in live] if self.momentum != 0 else []
        sgd(
            params,
            grads,
            buffers,
            has_sparse_grad=any(g.is_sparse for g in grads),
            weight_decay=self.weight_decay,
            momentum=self.momentum,
            lr=self.lr,
            dampening=0.0,
            nesterov=False,
            maximize=False,
        )
        if self.momentum != 0:
            self._buffers.update(zip(live, buffers, strict=True))
