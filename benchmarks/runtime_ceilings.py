"""The ceilings of ``runtime.py``: the same client work in plain Python loops (no Flower, no
Ray, no server), and the calibration of the ``spin`` workload."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import runtime_apps as apps
from process_usage import machine_busy_seconds


def _loop_worker(args: tuple[int, str, float, int, float]) -> tuple[int, float, float]:
    params, work, seconds, units, duration = args
    _, model = apps.make_model(params)
    done, start, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < duration:
        apps.client_work(model, work, seconds, units)
        done += 1
    return done, time.perf_counter() - start, time.thread_time() - cpu


def plain_loop_rate(
    params: int, work: str, seconds: float, units: int, *, concurrency: int, duration: float
) -> dict[str, float]:
    """Updates/s of ``concurrency`` plain loops calling ``client_work`` on the model, and
    the cores other processes of the machine used meanwhile.

    ``spin`` loops run in processes (one per core they may use), ``sleep`` loops in threads
    (sleep and numpy release the GIL).
    """
    jobs = [(params, work, seconds, units, duration)] * concurrency
    busy, start = machine_busy_seconds(), time.perf_counter()
    if work == "spin":
        with multiprocessing.get_context("fork").Pool(concurrency) as pool:
            parts = pool.map(_loop_worker, jobs)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            parts = list(pool.map(_loop_worker, jobs))
    elapsed = time.perf_counter() - start
    own = sum(cpu for _, _, cpu in parts)
    return {
        "rate": sum(done / spent for done, spent, _ in parts),
        "external_cores_used": (machine_busy_seconds() - busy - own) / elapsed,
    }


def calibrate_spin(seconds: float) -> int:
    """Loop iterations that take ``seconds`` of CPU here (median of 5 timings)."""
    units = 200_000
    times = []
    for _ in range(5):
        start = time.process_time()
        apps.spin(units)
        times.append(time.process_time() - start)
    return int(units * seconds / statistics.median(times))


def ceiling(args: argparse.Namespace, work: str, spin_units: int, duration: float) -> dict:
    """The plain loop's updates/s for ``work``: ``actors`` sleeping threads, or one spinning
    process per core the actors can use (``min(actors, cores)``)."""
    if work == "sleep":
        loop = plain_loop_rate(
            args.params, "sleep", args.task_seconds, 0, concurrency=args.actors, duration=duration
        )
        return {**loop, "loops": args.actors, "nominal": args.actors / args.task_seconds}
    loops = min(args.actors, os.cpu_count() or 1)
    loop = plain_loop_rate(
        args.params, "spin", 0.0, spin_units, concurrency=loops, duration=duration
    )
    return {**loop, "loops": loops, "nominal": loops / args.task_seconds}
