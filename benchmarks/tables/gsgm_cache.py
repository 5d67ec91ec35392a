"""Table of ``gsgm_cache.py``'s result: GSGM's time per update, cache on disk against in memory."""

from __future__ import annotations

from ._format import caption

BENCHMARK = "gsgm_cache"
ARMS = {"disk": "in the page cache", "cold": "cold (evicted)"}
"""The disk arm's two kinds of blocks, as the table names them."""


def _row(size: dict, arm: str) -> str:
    """One model size and kind of disk block: medians, ratios and page faults."""
    row = size[arm]
    low, high = row["ratio_quartiles"]
    faults = row["minor_faults_per_update"]
    node_mib = size["params"] * 4 / 2**20
    return (
        f"| {size['params']:,} ({node_mib:.2f} MiB a node) | {ARMS[arm]} | "
        f"{row['memory_ms_median']:.3f} | {row['disk_ms_median']:.3f} | "
        f"**{row['ratio_of_medians']:.2f}** | {row['ratio_median']:.2f} ({low:.2f} to "
        f"{high:.2f}) | {faults['memory']:.0f} / {faults['disk']:.0f} |"
    )


def table(result: dict) -> str:
    """One row per model size and kind of disk block."""
    sizes = result["results"]
    first = sizes[0]
    lines = [
        caption(result, "python benchmarks/gsgm_cache.py"),
        "",
        f"{first['nodes']:,} nodes round-robin; {result['rounds']} pairs of blocks of "
        f"{first['block']} updates per model size, the disk file in `{result['cache_dir']}`; "
        "both arms ended with the same model, bit for bit: "
        f"{'yes' if all(s['same_model'] for s in sizes) else 'NO'}.",
        "",
        "| values a node | disk rows | ms / update, memory | ms / update, disk | disk ÷ memory, "
        "medians of all updates | per pair of blocks: median (quartiles) | minor page faults "
        "per update (memory / disk) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_row(size, arm) for size in sizes for arm in ARMS]
    return "\n".join(lines)
