"""Every paper's claims, judged on records by the claims study's rules (issue 26's protocol).

Each claim is a set of checks, each a paired comparison of two runs over every seed of a split
(``paired``: exact figures from counts of correct test examples, rounded as
printed before a threshold applies). A check on a split where either run lacks a seed the split's
SSGD has is "incomplete", never judged on fewer seeds. docs/bench.md, "The claims study", states
every rule; the constants below are its thresholds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fl_async.bench.scenarios import BASELINE
from fl_async.bench.table import estimate_text

from . import paired
from .paired import Run

MARGIN = -1.0
"""Accuracy "not lower": the difference's interval must have its lower end at or above this."""
STABILITY = 0.20
"""GSGM's stability claim: a σ_acc gain of at least 20%, with its interval above 0."""
ONLY_CONVERGES = 0.4
"""GSGM's 30-node claim is refuted by a baseline converging on more than 40% of the seeds."""
LARGE = 30
"""Splits with this many nodes or more test the claims made at 30 nodes and under large delays."""
ASYNC_BASELINES = ("asgd", "trendsmooth", "fedasync", "fedbuff", "dcasgd")
"""The asynchronous baselines of the GSGM paper's claims."""
HOLDS, FAILS = "holds", "fails"


@dataclass(frozen=True)
class Split:
    """One split of one records folder, as the claims read it."""

    folder: str
    name: str
    dataset: str
    nodes: int
    alpha: float | None
    """Dirichlet concentration; None for another scheme."""
    runs: Mapping[str, Mapping[int, Run]]
    """Run name -> seed -> finished run."""
    seeds: tuple[int, ...]
    """Every seed of the split (those of its SSGD records, finished or not): each check pairs
    all of them or is incomplete."""

    @property
    def link(self) -> str:
        """A Markdown link to the heading above the split's generated table."""
        # the heading's anchor as GitHub and MkDocs make it: a dot (claims-alpha0.05) is dropped
        anchor = re.sub(r"[^\w\- ]", "", f"{self.folder}-{self.name}".lower()).replace(" ", "-")
        return f"[{self.folder}, {self.name}](#{anchor})"


@dataclass(frozen=True)
class Check:
    """One comparison's figure (printed), its seeds and its verdict (None: incomplete)."""

    what: str
    figure: str
    seeds: int
    verdict: bool | None


def _complete(split: Split, *names: str) -> int | None:
    """Paired seeds of ``names`` on ``split`` when every one has all of the split's seeds."""
    wanted = set(split.seeds)
    if not wanted or any(not wanted <= set(split.runs.get(n, {})) for n in names):
        return None
    return len(wanted)


def _judged(
    split: Split, end: float | None, names: Sequence[str], rule: Callable[[float], bool]
) -> bool | None:
    """``rule`` on an interval's ``end``; None when a run lacks a seed or there is no interval."""
    return None if end is None or _complete(split, *names) is None else bool(rule(end))


def _by_low(
    split: Split,
    mine: str,
    theirs: str,
    estimate: paired.stats.Estimate,
    rule: Callable[[float], bool],
    what: str,
) -> Check:
    """``mine`` − ``theirs`` judged by ``rule`` on its interval's lower end."""
    verdict = _judged(split, estimate.low, (mine, theirs), rule)
    return Check(f"{mine} − {theirs}, {what}", _points(estimate), estimate.seeds, verdict)


def not_lower(split: Split, mine: str, theirs: str) -> Check:
    """Final accuracy not lower: the difference's interval starts at or above ``MARGIN``."""
    estimate = paired.accuracy_difference(split.runs[mine], split.runs[theirs])
    what = f"final acc. (pts): not lower (interval from {MARGIN:+.1f})"
    return _by_low(split, mine, theirs, estimate, lambda low: low >= MARGIN, what)


def higher(split: Split, mine: str, theirs: str) -> Check:
    """Final accuracy higher: the difference's interval lies above 0."""
    estimate = paired.accuracy_difference(split.runs[mine], split.runs[theirs])
    what = "final acc. (pts): higher (interval above 0)"
    return _by_low(split, mine, theirs, estimate, lambda low: low > 0, what)


def faster_curve(split: Split, mine: str, theirs: str) -> Check:
    """Higher accuracy along the whole budget: the grid-mean difference's interval above 0."""
    estimate = paired.curve_difference(split.runs[mine], split.runs[theirs])
    what = "mean grid acc. (pts): higher (interval above 0)"
    return _by_low(split, mine, theirs, estimate, lambda low: low > 0, what)


def sooner(split: Split, mine: str, theirs: str) -> Check:
    """Reaches 90% of SSGD's final accuracy at fewer grid points: the interval below 0."""
    ssgd = split.runs[BASELINE]
    estimate = paired.reach_difference(split.runs[mine], split.runs[theirs], ssgd)
    verdict = _judged(split, estimate.high, (mine, theirs, BASELINE), lambda high: high < 0)
    what = f"{mine} − {theirs}, grid points to 90% of SSGD's final acc.: fewer (interval below 0)"
    return Check(what, _points(estimate), estimate.seeds, verdict)


def steadier(split: Split, mine: str, theirs: str) -> Check:
    """GSGM's rule: σ_acc gain ≥ 20% with its interval above 0, and the accuracy difference
    ≥ 0 with its interval's lower end ≥ ``MARGIN``."""
    gain = paired.stability_gain(split.runs[mine], split.runs[theirs])
    accuracy = paired.accuracy_difference(split.runs[mine], split.runs[theirs])
    verdict = None
    if _complete(split, mine, theirs) is not None and None not in (gain.value, gain.low):
        verdict = bool(
            gain.value >= STABILITY
            and gain.low > 0
            and accuracy.value >= 0
            and accuracy.low >= MARGIN
        )
    figure = f"σ_acc gain {_percent(gain)}; final acc. {_points(accuracy)}"
    what = f"{mine} against {theirs}: σ_acc gain, final acc. difference (pts)"
    return Check(what, figure, gain.seeds, verdict)


def converges_alone(split: Split, mine: str = "gsgm") -> Check:
    """GSGM's 30-node rule: it converged on every seed and each asynchronous baseline on at most
    40% of them. One baseline above 40% refutes it, so it fails without the others. Its seeds:
    the fewest judged of the runs compared (every run needs every seed to hold)."""
    ssgd = split.runs[BASELINE]
    counts = {
        n: paired.converged_count(split.runs[n], ssgd)
        for n in (mine, *ASYNC_BASELINES)
        if n in split.runs
    }
    figure = ", ".join(f"{n} {done}/{judged}" for n, (done, judged) in counts.items())
    everyone = len(split.seeds)
    done, judged = counts.get(mine, (0, 0))
    refuted = [
        n for n in ASYNC_BASELINES if n in counts and counts[n][0] > ONLY_CONVERGES * everyone
    ]
    verdict: bool | None = None
    if judged == everyone and (done < everyone or refuted):
        verdict = False
    elif judged == everyone and all(counts.get(n, (0, 0))[1] == everyone for n in ASYNC_BASELINES):
        verdict = True
    seeds = min((judged for _, judged in counts.values()), default=0)
    return Check(f"{mine} converged alone (seeds converged)", figure, seeds, verdict)


def converges_always(split: Split, mine: str) -> Check:
    """Converged on every seed of the split."""
    done, judged = paired.converged_count(split.runs[mine], split.runs[BASELINE])
    verdict = None if judged < len(split.seeds) else done == judged
    return Check(f"{mine} converged (seeds)", f"{done}/{judged}", judged, verdict)


def _points(estimate: paired.stats.Estimate) -> str:
    return estimate_text(estimate, scale=1.0, digits=paired.POINT_DIGITS)


def _percent(estimate: paired.stats.Estimate) -> str:
    return estimate_text(estimate, scale=100.0, digits=0, unit="%")


Checks = Callable[[Split], list[Check]]


@dataclass(frozen=True)
class Claim:
    """A paper's claim: the checks it makes on a split, and which splits test it."""

    key: str
    paper: str
    text: str
    checks: Checks
    needs: tuple[str, ...]
    """The runs a split must hold to test the claim."""
    large_only: bool = False
    """Tested only on splits of ``LARGE`` nodes or more."""

    def tested_on(self, split: Split) -> bool:
        """Whether ``split`` tests the claim: it holds SSGD and the runs, and is large when need
        be."""
        if self.large_only and split.nodes < LARGE:
            return False
        return all(name in split.runs for name in (BASELINE, *self.needs))


def _pairs(test: Callable[[Split, str, str], Check], mine: str, *theirs: str) -> Checks:
    return lambda split: [test(split, mine, other) for other in theirs]


BUFFERED = ("fedbuff", "fedasync")
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "G1",
        "GSGM",
        "at least 20% steadier than each asynchronous baseline, accuracy not lower",
        _pairs(steadier, "gsgm", *ASYNC_BASELINES),
        ("gsgm", *ASYNC_BASELINES),
    ),
    Claim(
        "G2",
        "GSGM",
        "the only method that converges at 30 nodes",
        lambda s: [converges_alone(s)],
        ("gsgm", "asgd"),
        large_only=True,
    ),
    Claim(
        "T1",
        "Trend-Smooth",
        "faster than ASGD at the same iterations",
        _pairs(faster_curve, "trendsmooth", "asgd"),
        ("trendsmooth", "asgd"),
    ),
    Claim(
        "T2",
        "Trend-Smooth",
        "accuracy near SSGD's",
        _pairs(not_lower, "trendsmooth", BASELINE),
        ("trendsmooth",),
    ),
    Claim("O1", "OD-SGD", "accuracy like SSGD's", _pairs(not_lower, "odsgd", BASELINE), ("odsgd",)),
    Claim("O2", "OD-SGD", "faster than ASGD", _pairs(sooner, "odsgd", "asgd"), ("odsgd", "asgd")),
    Claim(
        "P1",
        "ASP",
        "accuracy not lower than the synchronous (SSGD) and stale-synchronous (SSP) baselines'",
        _pairs(not_lower, "asp", BASELINE, "ssp"),
        ("asp", "ssp"),
    ),
    Claim(
        "P2",
        "ASP",
        "converges faster than SSGD and SSP",
        _pairs(sooner, "asp", BASELINE, "ssp"),
        ("asp", "ssp"),
    ),
    Claim(
        "M1",
        "MIFA",
        "higher accuracy than FedBuff and FedAsync",
        _pairs(higher, "mifa", *BUFFERED),
        ("mifa", *BUFFERED),
    ),
    Claim(
        "C1",
        "CA2FL",
        "higher accuracy than FedBuff and FedAsync under strong non-IID",
        _pairs(higher, "ca2fl", *BUFFERED),
        ("ca2fl", *BUFFERED),
    ),
    Claim(
        "C2",
        "CA2FL",
        "reaches a target faster than FedBuff and FedAsync",
        _pairs(sooner, "ca2fl", *BUFFERED),
        ("ca2fl", *BUFFERED),
    ),
    Claim(
        "F1",
        "FADAS",
        "higher accuracy than FedBuff and FedAsync",
        _pairs(higher, "fadas", *BUFFERED),
        ("fadas", *BUFFERED),
    ),
    Claim(
        "F2",
        "FADAS",
        "stable under large delays: converges on every seed at 30 nodes or more",
        lambda s: [converges_always(s, "fadas")],
        ("fadas",),
        large_only=True,
    ),
)
"""The claims, in the order of the claims table."""


def robust_to_non_iid(splits: Sequence[Split]) -> Check | None:
    """GSGM's claim 3 (G3): G1's rule against ASGD holds on every 10-node MNIST Dirichlet split
    (two alphas or more); None when the splits hold fewer than two alphas."""
    chosen = [
        s
        for s in splits
        if s.alpha is not None
        and s.nodes == 10
        and s.dataset == "mnist"
        and "gsgm" in s.runs
        and "asgd" in s.runs
    ]
    alphas = sorted({s.alpha for s in chosen})
    if len(alphas) < 2:
        return None
    chosen.sort(key=lambda s: s.alpha)
    checks = [steadier(s, "gsgm", "asgd") for s in chosen]
    verdicts = [c.verdict for c in checks]
    verdict = None if None in verdicts else all(verdicts)
    pairs = zip(chosen, checks, strict=True)
    shown = "; ".join(f"α {split.alpha:g}: {word(check.verdict)}" for split, check in pairs)
    return Check("gsgm against asgd at every alpha", shown, min(c.seeds for c in checks), verdict)


def word(verdict: bool | None) -> str:
    """A check's verdict as the tables print it: holds, fails or incomplete."""
    return {True: HOLDS, False: FAILS, None: "incomplete"}[verdict]


def judged(claim: Claim, splits: Sequence[Split]) -> list[tuple[Split, list[Check]]]:
    """The claim's checks on every split that tests it."""
    return [(split, claim.checks(split)) for split in splits if claim.tested_on(split)]


def overall(results: Sequence[tuple[Split, Sequence[Check]]]) -> str:
    """A claim's verdict over its splits: holds on all, fails on all, or on how many."""
    if not results:
        return "not tested"
    per_split = [
        None if None in (v := [c.verdict for c in checks]) else all(v) for _, checks in results
    ]
    if None in per_split:
        return f"incomplete ({per_split.count(None)} of {len(per_split)} splits)"
    held = sum(per_split)
    if held == len(per_split):
        return f"{HOLDS} (all {held} splits)" if held > 1 else HOLDS
    return FAILS if held == 0 else f"holds on {held} of {len(per_split)} splits"
