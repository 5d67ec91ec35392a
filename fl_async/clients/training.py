"""Local training and evaluation of a model on part of an ``ImageSet`` or a ``FeatureSet``; metrics
as plain numbers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional

from fl_async.clients.sgd import LocalSGD
from fl_async.data import Examples, Indices, as_index, iter_batches
from fl_async.validation import InvalidArgument

if TYPE_CHECKING:
    from fl_async.config import TrainSpec


def train(
    model: nn.Module,
    data: Examples,
    indices: Indices | None = None,
    *,
    epochs: int | None = None,
    steps: int | None = None,
    batch_size: int = 32,
    lr: float = 0.05,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    proximal_mu: float = 0.0,
    device: torch.device | str | None = None,
    seed: int = 0,
) -> dict[str, float | int]:
    """Train ``model`` in place with SGD on ``data[indices]`` for ``epochs`` passes or ``steps``
    batches (exactly one), in an order fixed by ``seed`` alone; returns the metrics of docs/data.md.

    ``proximal_mu`` > 0 adds ``(mu/2)·||w − w_start||²`` over the parameters (FedProx, FedAsync).
    The model ends on ``device`` (default: where its parameters already are).
    """
    _check_budget(epochs, steps, proximal_mu)
    index = as_index(indices, len(data))
    if len(index) == 0:
        raise InvalidArgument("cannot train on an empty partition")
    device = _device_of(model) if device is None else torch.device(device)
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params] if proximal_mu > 0 else []
    optimizer = LocalSGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    # A private generator: the order depends on ``seed`` only, never on torch's global state.
    generator = torch.Generator().manual_seed(seed)
    batches = _schedule(data, index, epochs, steps, batch_size, generator, device)
    loss, accuracy, processed, taken = _fit(
        model, batches, optimizer, (params, start, proximal_mu), device
    )
    return {
        "train-loss": loss,
        "train-accuracy": accuracy,
        "num-examples": len(index),
        "examples-processed": processed,
        "steps": taken,
    }


def _check_budget(epochs: int | None, steps: int | None, proximal_mu: float) -> None:
    """Exactly one of ``epochs`` and ``steps``, at least 1; ``proximal_mu`` >= 0."""
    if (epochs is None) == (steps is None):
        raise InvalidArgument("give exactly one of epochs and steps")
    if (epochs if epochs is not None else steps) < 1:
        raise InvalidArgument(
            f"epochs/steps must be at least 1, got epochs={epochs}, steps={steps}"
        )
    if proximal_mu < 0:
        raise InvalidArgument(f"proximal_mu must be non-negative, got {proximal_mu}")


def _fit(
    model: nn.Module,
    batches: Iterator,
    optimizer: LocalSGD,
    proximal: tuple[list, list, float],
    device: torch.device,
) -> tuple[float, float, int, int]:
    """One optimizer step per batch; the mean training loss and accuracy over all of them, the
    examples processed and the steps taken.

    ``proximal`` is ``(params, start, mu)``: ``(mu/2)·||w − w_start||²`` joins the objective
    when ``start`` is not empty.
    """
    params, start, proximal_mu = proximal
    # Sums stay on the device; reading them once at the end avoids a sync per step on a GPU.
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    processed = taken = 0
    for x, y in batches:
        logits = model(x)
        loss = functional.cross_entropy(logits, y)
        objective = loss + _proximal(params, start, proximal_mu) if start else loss
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
        loss_sum += loss.detach() * len(y)
        correct += (logits.argmax(dim=1) == y).sum()
        processed += len(y)
        taken += 1
    return float(loss_sum) / processed, int(correct) / processed, processed, taken


def train_task(
    model: nn.Module,
    data: Examples,
    indices: Indices | None,
    spec: TrainSpec,
    *,
    device: torch.device | str | None,
    seed: int,
) -> dict[str, float | int]:
    """``train`` with one task's settings ``spec``, as a node trains its task (and the server
    its root set's reference update)."""
    return train(
        model,
        data,
        indices,
        epochs=spec.epochs,
        steps=spec.steps,
        batch_size=spec.batch_size,
        lr=spec.lr,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        proximal_mu=spec.proximal_mu,
        device=device,
        seed=seed,
    )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Examples,
    indices: Indices | None = None,
    *,
    batch_size: int = 256,
    device: torch.device | str | None = None,
) -> dict[str, float | int]:
    """Mean cross-entropy ``loss``, ``accuracy`` and ``num-examples`` of ``model`` on
    ``data[indices]`` (all of ``data`` when None), in eval mode; the model's mode is restored."""
    index = as_index(indices, len(data))
    if len(index) == 0:
        raise InvalidArgument("cannot evaluate on no examples")
    device = _device_of(model) if device is None else torch.device(device)
    was_training = model.training
    model.to(device).eval()
    loss_sum = torch.zeros((), device=device)  # float32: MPS has no float64
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for x, y in iter_batches(data, index, batch_size=batch_size, device=device):
        logits = model(x)
        loss_sum += functional.cross_entropy(logits, y, reduction="sum")
        correct += (logits.argmax(dim=1) == y).sum()
    model.train(was_training)
    return {
        "loss": float(loss_sum) / len(index),
        "accuracy": int(correct) / len(index),
        "num-examples": len(index),
    }


def _schedule(
    data: Examples,
    index: torch.Tensor,
    epochs: int | None,
    steps: int | None,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    # ``steps`` may span several reshuffled passes and end inside one.
    passes = range(epochs) if epochs is not None else itertools.count()
    taken = 0
    for _ in passes:
        for batch in iter_batches(
            data, index, batch_size=batch_size, generator=generator, device=device
        ):
            yield batch
            taken += 1
            if taken == steps:
                return


def _proximal(params: list[torch.Tensor], start: list[torch.Tensor], mu: float) -> torch.Tensor:
    return mu / 2 * sum((p - p0).square().sum() for p, p0 in zip(params, start, strict=True))


def _device_of(model: nn.Module) -> torch.device:
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    return torch.device("cpu") if tensor is None else tensor.device
