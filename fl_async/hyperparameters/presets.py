"""The declarations of the presets of ``fl_async.strategies.presets``: GSGM, the asynchronous
baselines and the synchronous ones (docs/algorithms.md states every rule).

The choices are the aggregators' own (``fl_async.aggregators``), stated here as data so that the
ClientApp, which reads the run config, imports no aggregator; tests hold them equal.
"""

from __future__ import annotations

from fl_async.hyperparameters.declaration import (
    AUTO,
    FLAG,
    INTEGER,
    INTEGER_OR_AUTO,
    NUMBER,
    NUMBER_OR_AUTO,
    TEXT,
    Declaration,
    Hyper,
    choice,
)

TUNED_LR = 0.2
"""DCASGD's and TrendSmooth(sgd)'s default ``lr``: the point the claims study's sweep chose (10
MNIST nodes, Dirichlet(0.1)), which beat ``"auto"`` on its evaluation seeds."""

STALENESS = Hyper(
    "staleness",
    None,
    choice("constant", "polynomial", "hinge"),
    "the staleness weight `s(tau)`; default: the rule's",
)
"""The staleness weight every rule with one takes (``aggregators.staleness``' names)."""
MAX_STALENESS = Hyper(
    "max_staleness", None, INTEGER, "updates staler than this are refused; default: no bound"
)
"""The bound every rule takes: staler updates are refused."""
BUFFER_SIZE = Hyper(
    "buffer_size", AUTO, INTEGER_OR_AUTO, 'updates per step, >= 1; "auto": `min(10, N)`'
)
"""The buffer of FedBuff and CA2FL: how many updates make a step."""
CACHE_MEMORY = Hyper(
    "cache_memory",
    None,
    NUMBER,
    "bytes of cached gradients held in memory, the rest in a memory-mapped file; default: no limit",
)
"""GSGM's gradient cache's memory budget (MIFA and CA2FL share the cache)."""
CACHE_DIR = Hyper(
    "cache_dir",
    None,
    TEXT,
    "an existing directory for that file; default: the system's temporary directory",
)
"""Where the cache's memory-mapped file goes."""
COMBINE = Hyper(
    "combine",
    "mean",
    choice("mean", "median", "trimmed-mean"),
    "how the updates are combined: median and trimmed mean coordinate-wise, robust to a few "
    "bad updates",
)
"""A buffered rule's combiner (``aggregators.robust.COMBINES``)."""
TRIM = Hyper("trim", 0.2, NUMBER, "the share the trimmed mean cuts from each end, in [0, 0.5)")
"""What the trimmed mean cuts."""
BETA1 = Hyper("beta1", 0.9, NUMBER, "Adam's first-moment decay, in [0, 1)")
"""The Adam server optimizer's settings, which GSGM and Trend-Smooth share."""
BETA2 = Hyper("beta2", 0.999, NUMBER, "Adam's second-moment decay, in [0, 1)")
"""As ``BETA1``."""
EPS = Hyper("eps", 1e-8, NUMBER, "Adam's epsilon, > 0")
"""As ``BETA1``."""
BASES = ("sgd", "momentum", "adam")
"""GSGM's server optimizers and Trend-Smooth's bases (``aggregators.gsgm.SERVER_OPTIMIZERS``,
``aggregators.trend_smooth.BASES``)."""

GSGM = Declaration(
    name="gsgm",
    preset="GSGM",
    aggregator="GSGM",
    dispatch='white list (`slack`); `schedule="buffer"`: asynchronous',
    auto="`(1 - momentum) / N`; sgd `1/N`, adam `0.01`",
    hypers=(
        Hyper(
            "lr",
            AUTO,
            NUMBER_OR_AUTO,
            'the server step, >= 0; "auto": momentum `(1 - momentum)/N`, sgd `1/N`, adam 0.01',
        ),
        Hyper("momentum", 0.9, NUMBER, "the global momentum, in [0, 1)"),
        Hyper("average_weight", 0.5, NUMBER, "the cached average's weight in the step, in [0, 1]"),
        STALENESS,
        MAX_STALENESS,
        Hyper("slack", 0, INTEGER, "the white list's bound (0: every node once per cycle)"),
        Hyper("server_optimizer", "momentum", choice(*BASES), "the step's rule"),
        Hyper(
            "momentum_rule",
            "update",
            choice("update", "cycle", "implicit"),
            "momentum on every update, once per cycle, or less the momentum asynchrony implies",
        ),
        BETA1,
        BETA2,
        EPS,
        Hyper(
            "schedule",
            "block",
            choice("block", "buffer"),
            "the white list held at dispatch, or by the aggregator",
        ),
        CACHE_MEMORY,
        CACHE_DIR,
    ),
)

ASGD = Declaration(
    name="asgd",
    preset="ASGD",
    aggregator="ASGD",
    dispatch="asynchronous; `slack=k`: `WhiteList(k)` (ASGD paced as GSGM, a control)",
    auto="`1 / N`",
    hypers=(
        Hyper("lr", AUTO, NUMBER_OR_AUTO, 'the server step, >= 0; "auto": `1/N`'),
        STALENESS,
        MAX_STALENESS,
        Hyper("slack", None, INTEGER, "k: GSGM's white list `WhiteList(k)`; default: asynchronous"),
    ),
)

TRENDSMOOTH = Declaration(
    name="trendsmooth",
    preset="TrendSmooth",
    aggregator="TrendSmooth",
    dispatch="asynchronous",
    auto='sgd `1/N`, momentum `(1 - beta)/N`, adam `0.01`; default: sgd `0.2`, the others `"auto"`',
    hypers=(
        Hyper(
            "lr",
            None,
            NUMBER_OR_AUTO,
            'default: 0.2 with the sgd base, "auto" with the others; "auto": sgd `1/N`, '
            "momentum `(1 - beta)/N`, adam 0.01",
        ),
        Hyper("base", "sgd", choice(*BASES), "the base optimizer"),
        Hyper("beta", 0.9, NUMBER, "the momentum base's decay, in [0, 1)"),
        BETA1,
        BETA2,
        EPS,
        Hyper("trend_decay", 0.9, NUMBER, "the decay of the trend of past steps, in [0, 1]"),
        Hyper("shrink", 0.5, NUMBER, "the factor on a step's coordinates against the trend"),
        STALENESS,
        MAX_STALENESS,
    ),
)

FEDASYNC = Declaration(
    name="fedasync",
    preset="FedAsync",
    aggregator="FedAsync",
    dispatch="asynchronous",
    auto="(a convex mix)",
    hypers=(
        Hyper("alpha", 0.6, NUMBER, "the mixing weight, in (0, 1]"),
        STALENESS,
        MAX_STALENESS,
        Hyper("proximal_mu", 0.0, NUMBER, "the clients' proximal term, >= 0"),
    ),
)

FEDBUFF = Declaration(
    name="fedbuff",
    preset="FedBuff",
    aggregator="FedBuff",
    dispatch="asynchronous",
    auto="`buffer_size = min(10, N)` (`lr = 2`)",
    hypers=(
        BUFFER_SIZE,
        Hyper("lr", 2.0, NUMBER, "the server step (the claims study's tuned point)"),
        Hyper("server_momentum", 0.0, NUMBER, "the server's momentum, in [0, 1)"),
        STALENESS,
        MAX_STALENESS,
        COMBINE,
        TRIM,
    ),
)

DCASGD = Declaration(
    name="dcasgd",
    preset="DCASGD",
    aggregator="DCASGD",
    dispatch="asynchronous",
    auto="`1 / N`; default: `lr = 0.2`",
    hypers=(
        Hyper(
            "lr",
            TUNED_LR,
            NUMBER_OR_AUTO,
            'the server step (the claims study\'s tuned point); "auto": `1/N`',
        ),
        Hyper("lam", 0.04, NUMBER, "the delay compensation's weight, >= 0"),
        Hyper("adaptive", False, FLAG, "true: `lam0 / sqrt(M)` replaces `lam`, M a mean square"),
        Hyper("lam0", 2.0, NUMBER, "the adaptive weight's numerator, >= 0"),
        Hyper("ms_decay", 0.95, NUMBER, "the mean square's decay, in [0, 1)"),
        STALENESS,
        MAX_STALENESS,
    ),
)

SSGD = Declaration(
    name="ssgd",
    preset="SSGD",
    aggregator="SSGD",
    dispatch="barrier",
    auto="`lr = 1` is FedAvg",
    hypers=(Hyper("lr", 1.0, NUMBER, "the server step (1: FedAvg)"), COMBINE, TRIM),
)

ODSGD = Declaration(
    name="odsgd",
    preset="ODSGD",
    aggregator="ODSGD",
    dispatch="one-step delay",
    auto="`local_lr = lr / N`",
    hypers=(
        Hyper("lr", 1.0, NUMBER, "the server step"),
        Hyper("local_lr", AUTO, NUMBER_OR_AUTO, 'the compensation\'s rate, >= 0; "auto": `lr/N`'),
        Hyper("warmup_steps", 0, INTEGER, "the first steps, run as plain SSGD"),
    ),
)

ASP = Declaration(
    name="asp",
    preset="ASP",
    aggregator="ASGD",
    dispatch="adaptive synchronous parallel",
    auto="`1 / N`",
    hypers=(
        Hyper("lr", AUTO, NUMBER_OR_AUTO, 'the server step, >= 0; "auto": `1/N`'),
        STALENESS,
        MAX_STALENESS,
        Hyper("staleness_bound", 2, INTEGER, "SSP's bound within the synchronous group"),
        Hyper("p_min", 0.5, NUMBER, "the synchronous group's least relative speed, in (0, 1]"),
        Hyper("period", None, INTEGER, "tasks between regroupings; default: the number of nodes"),
    ),
)

DECLARED: tuple[Declaration, ...] = (
    GSGM,
    ASGD,
    TRENDSMOOTH,
    FEDASYNC,
    FEDBUFF,
    DCASGD,
    SSGD,
    ODSGD,
    ASP,
)
"""This module's rules, in the order the presets are listed."""
