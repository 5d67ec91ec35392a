"""The declarations of GSGM's descendants, ``fl_async.strategies.descendants``: MIFA, CA2FL
and FADAS, each with fully asynchronous dispatch (docs/algorithms.md)."""

from __future__ import annotations

from fl_async.hyperparameters.declaration import (
    AUTO,
    FLAG,
    INTEGER,
    INTEGER_OR_AUTO,
    NUMBER,
    NUMBER_OR_AUTO,
    Declaration,
    Hyper,
    choice,
)
from fl_async.hyperparameters.presets import BUFFER_SIZE, CACHE_DIR, CACHE_MEMORY, MAX_STALENESS

MIFA = Declaration(
    name="mifa",
    preset="MIFA",
    aggregator="MIFA",
    dispatch="asynchronous",
    auto="`1 / N`",
    hypers=(
        Hyper("lr", AUTO, NUMBER_OR_AUTO, 'the server step, >= 0; "auto": `1/N`'),
        Hyper("warmup", False, FLAG, "true: no step until every node has reported once"),
        Hyper(
            "lr_schedule",
            "constant",
            choice("constant", "inverse"),
            "`lr` at every step, or `lr / (t + 1)` at server step t",
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
        BUFFER_SIZE,
        Hyper("lr", 1.0, NUMBER, "the server step"),
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
        Hyper("buffer_size", AUTO, INTEGER_OR_AUTO, 'updates per step, >= 1; "auto": `min(5, N)`'),
        Hyper("lr", 1e-3, NUMBER, "the server step"),
        Hyper("beta1", 0.9, NUMBER, "AMSGrad's first-moment decay, in [0, 1)"),
        Hyper("beta2", 0.99, NUMBER, "AMSGrad's second-moment decay, in [0, 1)"),
        Hyper("eps", 1e-8, NUMBER, "AMSGrad's epsilon, > 0"),
        Hyper("tau_c", 1, INTEGER, "the staleness past which the delay rule acts"),
        Hyper(
            "delay_rule",
            "inverse",
            choice("inverse", "capped", "none"),
            "the step's rate past `tau_c`: `lr / tau_max`, `min(lr, 1 / tau_max)`, or `lr`",
        ),
        Hyper("bias_correction", False, FLAG, "true: the moments' bias correction"),
        MAX_STALENESS,
    ),
)

DECLARED: tuple[Declaration, ...] = (MIFA, CA2FL, FADAS)
"""This module's rules, in the order the presets are listed."""
