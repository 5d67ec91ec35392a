"""Chunked, multi-threaded array passes shared by every rule.

A rule runs all its passes on one chunk of every array while the chunk is in cache, and spreads
the chunks over a few threads (numpy releases the GIL inside its kernels). Chunks are
independent, so results are bit-identical for any chunk size and any number of threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

Arrays = list[np.ndarray]

CHUNK = 1 << 17
"""Elements per chunk: a rule runs all its passes on one chunk while it is in L2 cache. Smaller
chunks fit L1 no better (a rule touches 5-10 arrays) and pay for a GIL hand-off per ufunc call,
which outweighs the second core (benchmarks/PERFORMANCE.md, "The chunks")."""

THREADS = max(1, min(4, os.cpu_count() or 1))
"""Threads a rule's chunks are spread over (numpy releases the GIL inside its kernels)."""

THREADED_MIN = CHUNK
"""Elements below which a pass runs its parts one after another in the calling thread: handing a
few thousand values to a pool thread and back (a model of several small arrays is several
chunks) cost more than the arithmetic, on every kernel call of every update."""

IN_PLACE_LIMIT = 1e30
"""Bound on every array below which a rule may update its state in place: far from float32's
3.4e38, so rounding in the running bounds cannot matter."""

_pool: ThreadPoolExecutor | None = None
_local = threading.local()


def chunked(*lists: Sequence[np.ndarray]) -> Iterator[tuple[np.ndarray, ...]]:
    """Aligned flat chunks of lists of same-shaped arrays (views; outputs must be contiguous)."""
    for arrays in zip(*lists, strict=True):
        flats = [a.reshape(-1) for a in arrays]
        for start in range(0, flats[0].size, CHUNK):
            yield tuple(f[start : start + CHUNK] for f in flats)


def _run_part(
    kernel: Callable[..., float], chunks: list[tuple[np.ndarray, ...]], scratch: int
) -> float:
    buffers = getattr(_local, "buffers", [])
    if any(b.size < CHUNK for b in buffers):  # CHUNK was raised since one of them was made
        buffers = []
    while len(buffers) < scratch:  # per-thread chunk scratch stays in cache, never in DRAM
        buffers.append(np.empty(CHUNK, dtype=np.float32))
    _local.buffers = buffers
    total = 0.0
    with np.errstate(all="ignore"):  # errstate is per thread; results are probed instead
        for c in chunks:
            n = c[0].size
            total += kernel(*c, *(b[:n] for b in buffers[:scratch]))
    return total


def run_chunked(
    kernel: Callable[..., float], *lists: Sequence[np.ndarray], scratch: int = 0
) -> float:
    """Run ``kernel`` on every aligned chunk of ``lists`` across threads; sum what it returns.

    ``kernel`` also gets ``scratch`` float32 chunk-sized buffers of its own. Each chunk's
    passes run while it is in cache, and chunks are independent, so the result is
    bit-identical for any number of threads.
    """
    global _pool
    chunks = list(chunked(*lists))
    threads = min(THREADS, len(chunks))
    if threads <= 1:
        return _run_part(kernel, chunks, scratch)
    parts = [chunks[i::threads] for i in range(threads)]
    if sum(c[0].size for c in chunks) < THREADED_MIN:
        # The same parts summed in the same order as with threads: the same bits.
        first = _run_part(kernel, parts[0], scratch)
        return first + sum(_run_part(kernel, part, scratch) for part in parts[1:])
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="fl-async-agg")
    futures = [_pool.submit(_run_part, kernel, part, scratch) for part in parts[1:]]
    return _run_part(kernel, parts[0], scratch) + sum(f.result() for f in futures)


def probe(chunk: np.ndarray) -> float:
    """A cheap finiteness probe: non-finite whenever ``chunk`` holds NaN or Inf (one BLAS dot)."""
    return float(np.dot(chunk, chunk))


def squared_norm(arrays: Sequence[np.ndarray]) -> float:
    """``sum(a**2)`` over every array (chunked BLAS dots): NaN/Inf when any value is, and also
    Inf when the float32 sum overflows on finite values (confirm with ``all_finite``)."""
    return run_chunked(probe, arrays)


def all_finite(arrays: Sequence[np.ndarray]) -> bool:
    """Whether every value of every array is finite (one fast reduction per array)."""
    for a in arrays:
        if a.dtype.kind != "f":
            continue
        # A sum is NaN/Inf whenever any element is; it can also overflow on finite data, so a
        # non-finite sum is confirmed element-wise (rare) instead of trusted.
        with np.errstate(all="ignore"):
            total = a.sum()
        if not np.isfinite(total) and not np.isfinite(a).all():
            return False
    return True


def max_abs(arrays: Sequence[np.ndarray] | None) -> float:
    """The largest magnitude in ``arrays`` (0 for none): where running bounds start."""
    return max((float(np.max(np.abs(a))) for a in arrays or [] if a.size), default=0.0)


def subtract_scaled(out: np.ndarray, a: np.ndarray, scale: float, x: np.ndarray) -> None:
    """``out = a - scale * x`` without temporaries (``out`` may not alias ``a``)."""
    if scale == 1.0:  # 1.0 * x == x exactly: skip a pass
        np.subtract(a, x, out=out)
    else:
        np.multiply(x, scale, out=out)
        np.subtract(a, out, out=out)


def within_limit(bounds: dict[str, float]) -> bool:
    """Whether every running bound is below ``IN_PLACE_LIMIT``: the step may then run in place."""
    return all(bound < IN_PLACE_LIMIT for bound in bounds.values())
