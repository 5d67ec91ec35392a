"""Tables of ``attacks.py``'s result: each attack's effect on each strategy against its honest run
of the same seed, which attacks the guard defends, and its false refusals on honest runs."""

from __future__ import annotations

from statistics import mean

from ._format import labelled_caption

BENCHMARK = "attacks"
BOUNDS = {"sign-flip": 0.05, "ipm": 0.05, "alie": 0.05}
"""Issue 69's bound on an attack's accuracy loss: 0.05 for the colluders, 0.03 otherwise."""
DEFAULT_BOUND = 0.03
TARGET = 0.01
"""The false-refusal rate issue 69 allows on every split."""
NAMES = {
    "gsgm": "GSGM",
    "asgd": "ASGD",
    "fedbuff": "FedBuff",
    "ssgd": "SSGD",
    "mifa": "MIFA",
    "ca2fl": "CA2FL",
}


def _spread(values: list[float], signed: bool = True) -> str:
    """Mean and range, in points: ``+0.1 (−0.3 to +0.5)``."""
    form = "{:+.1f}" if signed else "{:.1f}"
    points = [100 * v for v in values]
    low, high = form.format(min(points)), form.format(max(points))
    return f"{form.format(mean(points))} ({low} to {high})"


def _changes(runs: dict, attack: str) -> list[float]:
    """The attacked run's accuracy less the honest run's, seed by seed."""
    return [r[attack]["accuracy"] - r["honest"]["accuracy"] for r in runs.values()]


def defended(runs: dict, attack: str) -> bool:
    """Whether no seed lost more than the attack's bound, and no honest update was refused."""
    bound = BOUNDS.get(attack, DEFAULT_BOUND)
    return all(c >= -bound for c in _changes(runs, attack)) and not any(
        r[attack]["honest-refused"] for r in runs.values()
    )


def _effects(result: dict, attacks: list[str]) -> list[str]:
    strategies = list(result["attacks"])
    lines = [
        "| attack | " + " | ".join(NAMES.get(s, s) for s in strategies) + " |",
        "|---|" + "---|" * len(strategies),
        "| honest accuracy % | "
        + " | ".join(
            _spread([r["honest"]["accuracy"] for r in result["attacks"][s].values()], False)
            for s in strategies
        )
        + " |",
    ]
    for attack in attacks:
        cells = []
        for s in strategies:
            runs = result["attacks"][s]
            mark = "" if defended(runs, attack) else " **not defended**"
            cells.append(_spread(_changes(runs, attack)) + mark)
        lines.append(f"| {attack} | " + " | ".join(cells) + " |")
    return lines


def _counted(result: dict) -> str:
    """What the honest-refusal counts hold: the guard's refusals, or (the first result) every
    honest update not applied."""
    return "refused by the guard" if result.get("honest-counted") == "guard" else "not applied"


def _counts(result: dict, attacks: list[str]) -> list[str]:
    counted = _counted(result)
    lines = [
        f"| attack | bound (points) | honest updates {counted} | attackers' updates accepted "
        "| updates clipped | faults |",
        "|---|---|---|---|---|---|",
    ]
    for attack in attacks:
        runs = [r[attack] for s in result["attacks"].values() for r in s.values()]
        faults: dict[str, int] = {}
        for r in runs:
            for key, count in r["faults"].items():
                faults[key] = faults.get(key, 0) + count
        said = ", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"
        accepted = sum(r["attacker-accepted"] for r in runs)
        sent = sum(r["attacker-updates"] for r in runs)
        lines.append(
            f"| {attack} | {100 * BOUNDS.get(attack, DEFAULT_BOUND):.0f} | "
            f"{sum(r['honest-refused'] for r in runs)} of {sum(r['updates'] for r in runs)} | "
            f"{accepted} of {sent} | {sum(r['clipped'] for r in runs)} | {said} |"
        )
    return lines


def _refusals(result: dict) -> list[str]:
    own = {s: {k: r["honest"] for k, r in runs.items()} for s, runs in result["attacks"].items()}
    splits = {"dirichlet-0.3": own}
    splits.update(result["honest"])
    lines = [
        "| split | nodes | runs | honest updates | refused | rate % (worst run) | clipped "
        f"| at most {100 * TARGET:.0f} % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for split, by_strategy in splits.items():
        runs = [r for seeds in by_strategy.values() for r in seeds.values()]
        refused = sum(r["guard-refused"] for r in runs)
        updates = sum(r["updates"] for r in runs)
        worst = max(r["guard-refused"] / r["updates"] for r in runs)
        nodes = result["splits"].get(split, {}).get("num-nodes", result["nodes"])
        lines.append(
            f"| {split} | {nodes} | {len(runs)} | {updates} | {refused} | "
            f"{100 * refused / updates:.2f} ({100 * worst:.2f}) | "
            f"{sum(r['clipped'] for r in runs)} | {'yes' if worst <= TARGET else 'no'} |"
        )
    return lines


def table(result: dict) -> str:
    """The attacks' effects (mean and range over seeds, in accuracy points), their counts, and
    the false refusals of every split's honest runs."""
    attacks = result["attack-names"]
    seeds = ", ".join(str(s) for s in result["seeds"])
    budgets = result.get("budgets")
    horizon = (
        f"Budgets (virtual time, by seed): {', '.join(f'{t:.0f}' for t in budgets.values())}. "
        if budgets
        else f"Budget: virtual time {result['setting']['max-virtual-time']:.0f}. "
    )
    return "\n".join(
        [
            labelled_caption(result, "python benchmarks/attacks.py"),
            "",
            f"Accuracy: the mean central test accuracy over the second half of the run's "
            f"virtual-time grid ({result['grid']} points); each cell the attacked run's less the "
            f"honest run's of the same seed, in points, the mean and the range over seeds "
            f"{seeds}; **not defended** where a seed lost more than the bound or an honest "
            f"update was {_counted(result)}. {horizon}ALIE's z: {result['alie-z']}.",
            "",
            *_effects(result, attacks),
            "",
            "Over every strategy and seed:",
            "",
            *_counts(result, attacks),
            "",
            "False refusals: the update guard's refusals (no-update, too-large, "
            "wrong-direction) in honest runs, every strategy and seed.",
            "",
            *_refusals(result),
        ]
    )
