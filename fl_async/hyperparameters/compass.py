"""The declaration of FedCompass, ``fl_async.strategies.fedcompass``: the Compass policy's
per-task local steps and the FedCompass aggregator's group step (docs/algorithms.md)."""

from __future__ import annotations

from fl_async.hyperparameters.declaration import (
    AUTO,
    INTEGER_OR_AUTO,
    NUMBER,
    Declaration,
    Hyper,
)
from fl_async.hyperparameters.presets import MAX_STALENESS, STALENESS

FEDCOMPASS = Declaration(
    name="fedcompass",
    preset="FedCompass",
    aggregator="FedCompass",
    dispatch="Compass: local steps from measured speeds, arrival groups",
    auto="`Q_max` = the run's `local-steps` (100 when it trains by epochs), "
    "`Q_min = max(floor(0.2 Q_max), 1)`",
    hypers=(
        Hyper("alpha", 0.9, NUMBER, "the server rate of `alpha s(tau) / N`, > 0"),
        STALENESS,
        MAX_STALENESS,
        Hyper("min_local_steps", AUTO, INTEGER_OR_AUTO, "`Q_min`, a task's fewest steps, >= 1"),
        Hyper(
            "max_local_steps",
            AUTO,
            INTEGER_OR_AUTO,
            "`Q_max`, a task's most steps (a node's first task's), >= `Q_min`; a task's steps "
            "replace the run's `local-steps` / `local-epochs`",
        ),
        Hyper("speed_momentum", 0.9, NUMBER, "the weight of a new speed sample, in (0, 1]"),
        Hyper(
            "latest_time_factor",
            1.5,
            NUMBER,
            "how long past its expected arrival a group waits (`lambda`), >= 1",
        ),
    ),
)

DECLARED: tuple[Declaration, ...] = (FEDCOMPASS,)
"""This module's rules, in the order the presets are listed."""
