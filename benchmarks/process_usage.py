"""CPU and memory of a process tree, read from ``/proc`` (Linux): the instruments with which
``runtime.py``, ``floor.py`` and ``app_memory.py`` watch a simulation and its Ray processes."""

from __future__ import annotations

import os
from typing import Any


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def process_tree(root: int | None = None) -> list[int]:
    """``root`` (default: this process) and all its descendants (Ray's GCS, raylet, workers)."""
    root = os.getpid() if root is None else root
    children = _children_map()
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def tree_cpu() -> dict[str, list]:
    """Per process of the tree: [group, user + system CPU seconds so far] by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in process_tree():
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        name = process_group(pid, head.split("(", 1)[1])
        found[str(pid)] = [name, (int(fields[11]) + int(fields[12])) / tick]  # utime, stime
    return found


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used (busy time summed over cores)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of the process tree so far (processes alive now)."""
    return sum(cpu for _, cpu in tree_cpu().values())


def process_group(pid: int, name: str) -> str:
    """Which part of the simulation a process of the tree is."""
    if pid == os.getpid():
        return "server process"
    if name.startswith("ray::ClientApp"):
        return "Ray actors"
    return "Ray services"


def tree_memory(root: int | None = None) -> dict[str, Any]:
    """Summed RSS and PSS (shared pages split between sharers) of the tree under ``root``
    (default: this process), in bytes, also per process group."""
    total = {"rss": 0, "pss": 0, "processes": 0}
    groups: dict[str, dict[str, int]] = {}
    for pid in process_tree(root):
        values = {"rss": 0, "pss": 0}
        try:
            with open(f"/proc/{pid}/stat") as f:
                name = f.read().split("(", 1)[1].rsplit(")", 1)[0]
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        values["rss"] = int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        values["pss"] = int(line.split()[1]) * 1024
        except OSError:
            continue
        group = groups.setdefault(process_group(pid, name), {"rss": 0, "pss": 0, "processes": 0})
        for key in ("rss", "pss"):
            group[key] += values[key]
            total[key] += values[key]
        group["processes"] += 1
        total["processes"] += 1
    return {**total, "groups": groups}
