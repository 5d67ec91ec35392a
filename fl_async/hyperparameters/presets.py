"""The declarations of the presets of ``fl_async.strategies.presets``: GSGM, the asynchronous
baselines and the synchronous ones (docs/algorithms.md states every rule)."""

from __future__ import annotations

from fl_async.hyperparameters.declaration import Declaration, Hyper

AUTO = "auto"
"""A default resolved at start from N, the number of nodes (docs/algorithms.md, Safe defaults
for presets)."""
TUNED_LR = 0.2
"""DCASGD's and TrendSmooth(sgd)'s default ``lr``: the point the claims study's sweep chose (10
MNIST nodes, Dirichlet(0.1)), which beat ``"auto"`` on its evaluation seeds."""

STALENESS = Hyper(
    "staleness", None, "the staleness weight: constant, polynomial or hinge; default: the rule's"
)
"""The staleness weight every rule with one takes."""
MAX_STALENESS = Hyper(
    "max_staleness", None, "refuse updates staler than this many server steps; default: no bound"
)
"""The bound every rule takes: staler updates are refused."""
CACHE_MEMORY = Hyper(
    "cache_memory",
    None,
    "bytes of cached gradients held in memory, the rest in a memory-mapped file; default: no limit",
)
"""GSGM's gradient cache's memory budget (MIFA and CA2FL share the cache)."""
CACHE_DIR = Hyper(
    "cache_dir", None, "the directory of that file; default: the system's temporary directory"
)
"""Where the cache's memory-mapped file goes."""
COMBINE = Hyper(
    "combine",
    "mean",
    '"mean"; "median" or "trimmed-mean": coordinate-wise, robust to a few bad updates',
)
TRIM = Hyper("trim", 0.2, "the share the trimmed mean cuts from each end, in [0, 0.5)")

GSGM = Declaration(
    name="gsgm",
    preset="GSGM",
    aggregator="GSGM",
    dispatch='white list (`slack`); `schedule="buffer"`: asynchronous',
    auto="`(1 - momentum) / N`; sgd `1/N`, adam `0.01`",
    hypers=(
        Hyper(
            "lr", AUTO, 'the server step; "auto": momentum `(1 - momentum)/N`, sgd `1/N`, adam 0.01'
        ),
        Hyper("momentum", 0.9, "the global momentum, in [0, 1)"),
        Hyper(
            "average_weight", 0.5, "the weight of the cached average against the update, in [0, 1]"
        ),
        STALENESS,
        MAX_STALENESS,
        Hyper("slack", 0, "the white list's bound: how far a node may run ahead of the slowest"),
        Hyper("server_optimizer", "momentum", '"momentum", "sgd" or "adam"'),
        Hyper("momentum_rule", "update", '"update", "cycle" (once per cycle) or "implicit"'),
        Hyper("beta1", 0.9, "Adam's first-moment decay, in [0, 1)"),
        Hyper("beta2", 0.999, "Adam's second-moment decay, in [0, 1)"),
        Hyper("eps", 1e-8, "Adam's epsilon, > 0"),
        Hyper(
            "schedule", "block", '"block": the white list at dispatch; "buffer": in the aggregator'
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
        Hyper("lr", AUTO, '"auto": 1/N'),
        STALENESS,
        MAX_STALENESS,
        Hyper(
            "slack", None, "an integer k: GSGM's white list `WhiteList(k)`; default: asynchronous"
        ),
    ),
)

TRENDSMOOTH = Declaration(
    name="trendsmooth",
    preset="TrendSmooth",
    aggregator="TrendSmooth",
    dispatch="asynchronous",
    auto='sgd `1/N`, momentum `(1 - beta)/N`, adam `0.01`; default: sgd `0.2`, the others `"auto"`',
    hypers=(
        Hyper("lr", None, 'default: 0.2 with the sgd base, "auto" with the others'),
        Hyper("base", "sgd", 'the base optimizer: "sgd", "momentum" or "adam"'),
        Hyper("beta", 0.9, "the momentum base's decay, in [0, 1)"),
        Hyper("beta1", 0.9, "Adam's first-moment decay, in [0, 1)"),
        Hyper("beta2", 0.999, "Adam's second-moment decay, in [0, 1)"),
        Hyper("eps", 1e-8, "Adam's epsilon, > 0"),
        Hyper("trend_decay", 0.9, "the decay of the trend of past steps, in [0, 1]"),
        Hyper("shrink", 0.5, "the factor on a step's coordinates that oppose the trend, in [0, 1]"),
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
        Hyper("alpha", 0.6, "the mixing weight, in (0, 1]"),
        STALENESS,
        MAX_STALENESS,
        Hyper("proximal_mu", 0.0, "the clients' proximal term, >= 0"),
    ),
)

FEDBUFF = Declaration(
    name="fedbuff",
    preset="FedBuff",
    aggregator="FedBuff",
    dispatch="asynchronous",
    auto="`buffer_size = min(10, N)` (`lr = 2`)",
    hypers=(
        Hyper("buffer_size", AUTO, 'updates per step; "auto": min(10, N)'),
        Hyper("lr", 2.0, "the server step (the claims study's tuned point)"),
        Hyper("server_momentum", 0.0, "the server's momentum, in [0, 1)"),
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
        Hyper("lr", TUNED_LR, '"auto": 1/N'),
        Hyper("lam", 0.04, "the delay compensation's weight, >= 0"),
        Hyper(
            "adaptive", False, "true: `lam0 / sqrt(M)` replaces `lam`, M the updates' mean square"
        ),
        Hyper("lam0", 2.0, "the adaptive weight's numerator, >= 0"),
        Hyper("ms_decay", 0.95, "the mean square's decay, in [0, 1)"),
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
    hypers=(Hyper("lr", 1.0, "the server step; 1: FedAvg"), COMBINE, TRIM),
)

ODSGD = Declaration(
    name="odsgd",
    preset="ODSGD",
    aggregator="ODSGD",
    dispatch="one-step delay",
    auto="`local_lr = lr / N`",
    hypers=(
        Hyper("lr", 1.0, "the server step"),
        Hyper("local_lr", AUTO, 'the compensation\'s rate; "auto": lr/N'),
        Hyper("warmup_steps", 0, "the first steps, run as plain SSGD"),
    ),
)

ASP = Declaration(
    name="asp",
    preset="ASP",
    aggregator="ASGD",
    dispatch="adaptive synchronous parallel",
    auto="`1 / N`",
    hypers=(
        Hyper("lr", AUTO, '"auto": 1/N'),
        STALENESS,
        MAX_STALENESS,
        Hyper("staleness_bound", 2, "SSP's bound within the synchronous group"),
        Hyper("p_min", 0.5, "the least relative speed of the synchronous group, in (0, 1]"),
        Hyper("period", None, "finished tasks between regroupings; default: the number of nodes"),
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
