"""The strategy and the virtual clock a run config asks for: what the ServerApp runs, built
the same way by the launcher's checks (``preflight``), which import no torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_async.aggregators.guard_root import Reference
from fl_async.app.config import AppConfig
from fl_async.scheduling import VirtualClock, ranking_by_classes
from fl_async.strategies import PRESETS, AsyncStrategy, UpdateGuard
from fl_async.strategies.nodes import AT_ONCE


def make_clock(config: AppConfig, counts: np.ndarray) -> VirtualClock | None:
    """The virtual clock of ``config`` (None for ``clock = "real"``).

    ``correlate`` ranks node speeds by the classes each partition holds (row ``i`` of
    ``counts`` is partition ``i``, which is the node's stable id).
    """
    if config.clock == "real":
        return None
    ranking = None
    if config.correlate != "none":
        ranking = ranking_by_classes(counts, fast=config.correlate.split("-")[0])
    # sigma belongs to the lognormal model only; VirtualClock rejects it for the others.
    sigma = {"sigma": config.clock_sigma} if config.clock_speed == "lognormal" else {}
    return VirtualClock(
        seed=config.seed,
        speed=config.clock_speed,
        **sigma,
        jitter=config.clock_jitter,
        trace=config.clock_trace or None,
        ranking=ranking,
    )


def build_strategy(
    config: AppConfig,
    *,
    clock: VirtualClock | None,
    output: Path | None = None,
    reference: Reference | None = None,
) -> AsyncStrategy:
    """The preset ``config.strategy`` with its hyperparameters and the run's settings; its
    guard judges updates by ``reference`` where given (the root dataset's, ``root_reference``)."""
    checkpoint_dir = None
    if config.checkpoint_every is not None:
        if output is None:
            raise ValueError("checkpoint-every needs an output directory")
        checkpoint_dir = output / "checkpoint"
    try:
        return PRESETS[config.strategy](
            **config.hyperparameters,
            clock=clock,
            min_nodes=config.num_nodes,
            max_in_flight=config.max_in_flight,
            eval_every=config.eval_every,
            eval_grid=config.eval_grid,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=config.checkpoint_every,
            federated_evaluation=config.federated_evaluation,
            seed=config.seed,
            guard=_guard(config, reference),
            weight_cap=float(config.values["weight-cap"]) or None,
            send_ahead=int(config.values["send-ahead"]) or None,
            identify_nodes=AT_ONCE,  # fl-async's own ClientApp answers the query
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"run config for strategy {config.strategy!r}: {error}") from error


def _guard(config: AppConfig, reference: Reference | None) -> UpdateGuard:
    """The update guard of the ``guard.*`` keys (``guard.factor = 0``: off)."""
    values = config.values
    return UpdateGuard(
        factor=float(values["guard.factor"]),
        mode=str(values["guard.mode"]),
        window=int(values["guard.window"]),
        quorum=int(values["guard.quorum"]),
        direction=float(values["guard.direction"]),
        reference=reference,
        trust=float(values["guard.trust"]),
    )
