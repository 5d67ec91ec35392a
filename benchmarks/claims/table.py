"""The claims table (``<!-- generated claims from FOLDER ... -->``): a row per paper's claim with
its verdict, then every check behind it, the defaults' decision, and the budget rule's check on
each split's SSGD."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fl_async.bench.records import Records, any_record, dirichlet_alpha
from fl_async.bench.scenarios import BASELINE

from . import paired
from .checks import (
    CLAIMS,
    Check,
    Split,
    higher,
    judged,
    not_lower,
    overall,
    robust_to_non_iid,
    word,
)

FLAT = 1.0
"""The budget rule: SSGD's last grid quarter is at most this many points above its third."""
DEFAULT_SUFFIX = "-default"
"""``<preset>-default``: the preset at its default settings, beside the preset at its tuned ones."""


def read_splits(
    folder: str, records: Mapping[str, Records], planned: Mapping[str, object] | None = None
) -> list[Split]:
    """The splits of one records folder (named ``folder`` in links), as the claims read them.

    ``planned`` is the suite's settings (its ``suite.json``): the runs and seeds it was started
    with count on every split, finished or not, so a suite still running shows its checks as
    incomplete, never as judged on the seeds done so far nor as not tested.
    """
    planned = planned or {}
    splits = []
    for name, by_run in sorted(records.items()):
        record = any_record(by_run)
        config = record["config"]
        runs = paired.read_runs(by_run)
        for run in planned.get("strategies", ()):
            runs.setdefault(str(run), {})
        seeds = planned.get("seeds") or sorted(by_run.get(BASELINE, {}))
        splits.append(
            Split(
                folder,
                name,
                str(config.get("dataset", "mnist")),
                int(record["run"]["num-nodes"]),
                dirichlet_alpha(config),
                runs,
                tuple(int(seed) for seed in seeds),
            )
        )
    return splits


def claims_lines(splits: Sequence[Split]) -> list[str]:
    """The Markdown of a claims block: the summary, the checks, the defaults' decision (where
    the records hold a ``<preset>-default``), the budget rule."""
    rows = [(claim, judged(claim, splits)) for claim in CLAIMS]
    g3 = robust_to_non_iid(splits)
    lines = ["| claim | paper | what it says | verdict | tested on |", "|---|---|---|---|---|"]
    for claim, results in rows:
        where = ", ".join(split.link for split, _ in results) or "–"
        lines.append(
            f"| {claim.key} | {claim.paper} | {claim.text} | {overall(results)} | {where} |"
        )
        if claim.key == "G2":
            lines.append(_g3_row(g3, splits))
    lines += [
        "",
        "| claim | split | check | figure [95% CI] | seeds | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for claim, results in rows:
        for split, checks in results:
            lines += [_check_row(claim.key, split.link, check) for check in checks]
        if claim.key == "G2" and g3 is not None:
            lines.append(_check_row("G3", "the 10-node MNIST Dirichlet splits", g3))
    return [*lines, "", *defaults_lines(splits), *budget_lines(splits)]


def defaults_lines(splits: Sequence[Split]) -> list[str]:
    """The defaults' decision: each preset run beside ``<preset>-default`` changes its default
    to the tuned point when it is not lower on every split and higher on at least one."""
    presets = sorted(
        {
            n.removesuffix(DEFAULT_SUFFIX)
            for s in splits
            for n in s.runs
            if n.endswith(DEFAULT_SUFFIX)
        }
    )
    if not presets:
        return []
    lines = [
        "| preset | split | check | figure [95% CI] | seeds | verdict |",
        "|---|---|---|---|---|---|",
    ]
    decisions = []
    for preset in presets:
        default = preset + DEFAULT_SUFFIX
        tested = [s for s in splits if preset in s.runs and default in s.runs]
        kept = [(not_lower(s, preset, default), higher(s, preset, default)) for s in tested]
        for split, (floor, above) in zip(tested, kept, strict=True):
            lines += [_check_row(preset, split.link, floor), _check_row(preset, split.link, above)]
        floors, aboves = [k[0].verdict for k in kept], [k[1].verdict for k in kept]
        if None in floors or None in aboves:
            decision = "incomplete"
        else:
            decision = "yes" if all(floors) and any(aboves) else "no"
        decisions.append(f"{preset} {decision}")
    return [
        "Defaults: a preset's default changes to its tuned point when the tuned point's final "
        "accuracy is not lower than the default's on every split and higher on at least one. "
        f"Change the default: {'; '.join(decisions)}.",
        "",
        *lines,
        "",
    ]


def _g3_row(g3: Check | None, splits: Sequence[Split]) -> str:
    verdict = "not tested (it needs two alphas or more)"
    if g3 is not None:
        verdict = word(g3.verdict)
    text = "robust to the degree of non-IID: G1's rule against ASGD at every Dirichlet alpha"
    where = ", ".join(s.link for s in splits if s.alpha is not None and s.nodes == 10) or "–"
    return f"| G3 | GSGM | {text} | {verdict} | {where} |"


def _check_row(key: str, where: str, check: Check) -> str:
    verdict = word(check.verdict)
    return f"| {key} | {where} | {check.what} | {check.figure} | {check.seeds} | {verdict} |"


def budget_lines(splits: Sequence[Split]) -> list[str]:
    """Per split: SSGD's last-quarter minus third-quarter grid accuracy, and the rule's check."""
    lines = [
        f"Budget rule: SSGD's mean grid accuracy over the last quarter of the budget minus the "
        f"third quarter's (its flatness), averaged over the seeds with a negative one counted as "
        f"0, is at most {FLAT:.1f} point.",
        "",
        "| split | SSGD's flatness (pts): rule's mean [min, max] | seeds at most "
        f"{FLAT:.1f} | seeds | rule |",
        "|---|---|---|---|---|",
    ]
    for split in splits:
        runs = list(split.runs.get(BASELINE, {}).values())
        if not runs:
            lines.append(f"| {split.link} | – | – | 0 | no SSGD run |")
            continue
        values = [paired.flatness(run) for run in runs]
        mean = paired.climbing(values)
        rule = "holds" if mean <= FLAT else "fails"
        if len(values) < len(split.seeds):  # judged on every seed or not at all, as the claims
            rule = f"incomplete ({len(values)} of {len(split.seeds)} seeds)"
        flat = sum(value <= FLAT for value in values)
        lines.append(
            f"| {split.link} | {mean:+.1f} [{min(values):+.1f}, {max(values):+.1f}] "
            f"| {flat} | {len(values)} | {rule} |"
        )
    return lines
