"""Table of ``synthetic.py``'s result: the parts of loading a Synthetic split, timed."""

from __future__ import annotations

from ._format import caption

BENCHMARK = "synthetic"
PARTS = {
    "sizes": "every device's sample count (its first draw; no sample drawn)",
    "preflight": "what `python -m fl_async.app` checks first: every train label and owner",
    "server": "the ServerApp's data (`load_run_data`) and its natural split",
    "full": "`load_dataset('synthetic')`: every device's features in memory",
}
"""What each timed part does, as the table says it."""


def table(result: dict) -> str:
    """A line on the data, then one row per part (seconds and peak traced MiB)."""
    data, parts, node = result["data"], result["parts"], result["parts"]["node"]
    spec = result["synthetic"]
    lines = [
        caption(result, f"python benchmarks/synthetic.py --nodes {data['devices']}"),
        "",
        f"Synthetic({spec['alpha']:g}, {spec['beta']:g}), seed {spec['seed']}: "
        f"{data['devices']:,} devices = nodes, {data['samples']:,} samples "
        f"({data['train_examples']:,} train, {data['test_examples']:,} test); a device's median "
        f"{data['median_device']:g} samples, the largest {data['largest_device']:,}. Peak resident "
        f"set of the process: {result['peak_rss_mib']:,.0f} MiB.",
        "",
        "| part | what it does | seconds | peak MiB |",
        "|---|---|---|---|",
    ]
    for name in ("sizes", "preflight", "server"):
        lines.append(
            f"| {name} | {PARTS[name]} | {parts[name]['seconds']:.2f} | "
            f"{parts[name]['peak_mib']:.1f} |"
        )
    lines += [
        f"| node, cold | one ClientApp call of `load_node_data`, {result['sampled_nodes']} random "
        f"nodes | mean {node['mean_seconds'] * 1e3:.2f} ms, median "
        f"{node['median_seconds'] * 1e3:.2f} ms | |",
        f"| node, largest | the same for the node with {node['largest_train_examples']:,} train "
        f"samples | {node['largest_seconds']:.2f} | {node['largest_peak_mib']:.1f} |",
    ]
    if "full" in parts:
        lines.append(
            f"| full | {PARTS['full']} | {parts['full']['seconds']:.2f} | "
            f"{parts['full']['peak_mib']:.1f} |"
        )
    return "\n".join(lines)
