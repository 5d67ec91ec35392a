"""The declarations of GSGM's descendants, ``fl_async.strategies.descendants``: MIFA, CA2FL
and FADAS, each with fully asynchronous dispatch (docs/algorithms.md)."""

from __future__ import annotations

from fl_async.hyperparameters.declaration import Declaration, Hyper
from fl_async.hyperparameters.presets import AUTO, CACHE_DIR, CACHE_MEMORY, MAX_STALENESS

MIFA = Declaration(
    name="mifa",
    preset="MIFA",
    aggregator="MIFA",
    dispatch="asynchronous",
    auto="`1 / N`",
    hypers=(
        Hyper("lr", AUTO, '"auto": 1/N'),
        Hyper("warmup", False, "true: no step until every node has reported once"),
        Hyper(
            "lr_schedule", "constant", '"constant", or "inverse": `lr / (t + 1)` at server step t'
        ),
        MAX_STALENESS,
        CACHE_MEMORY,
        CACHE_DIR,
    ),
)

CA2FL = Declaration(
    name="ca2fl",
    preset="CA2FL",
    aggregator="CA2FL",
    dispatch="asynchronous",
    auto="`buffer_size = min(10, N)`",
    hypers=(
        Hyper("buffer_size", AUTO, 'updates per step; "auto": min(10, N)'),
        Hyper("lr", 1.0, "the server step"),
        MAX_STALENESS,
        CACHE_MEMORY,
        CACHE_DIR,
    ),
)

FADAS = Declaration(
    name="fadas",
    preset="FADAS",
    aggregator="FADAS",
    dispatch="asynchronous",
    auto="`buffer_size = min(5, N)` (`lr = 1e-3`)",
    hypers=(
        Hyper("buffer_size", AUTO, 'updates per step; "auto": min(5, N)'),
        Hyper("lr", 1e-3, "the server step"),
        Hyper("beta1", 0.9, "AMSGrad's first-moment decay, in [0, 1)"),
        Hyper("beta2", 0.99, "AMSGrad's second-moment decay, in [0, 1)"),
        Hyper("eps", 1e-8, "AMSGrad's epsilon, > 0"),
        Hyper("tau_c", 1, "the staleness past which the delay rule acts"),
        Hyper(
            "delay_rule",
            "inverse",
            '"inverse": `lr / tau_max` past `tau_c`; "capped": `min(lr, 1 / tau_max)`; "none"',
        ),
        Hyper("bias_correction", False, "true: the moments' bias correction, as the authors' code"),
        MAX_STALENESS,
    ),
)

DECLARED: tuple[Declaration, ...] = (MIFA, CA2FL, FADAS)
"""This module's rules, in the order the presets are listed."""
