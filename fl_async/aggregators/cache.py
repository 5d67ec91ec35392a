"""Where GSGM, MIFA and CA2FL keep every node's latest pseudo-gradient ``G[k]``: in memory up to a
budget, and beyond it in a memory-mapped file on disk (docs/algorithms.md, GSGM, The cache under a
memory budget).

Both tiers hold float32 arrays that the rule reads and writes with the same element-wise numpy
operations, so where a gradient lives never changes a result, bit for bit.
"""

from __future__ import annotations

import errno
import heapq
import math
import mmap
import os
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fl_async.aggregators.kernels import Arrays
from fl_async.validation import InvalidArgument, check_number

Shape = tuple[int, ...]


def check_cache_memory(name: str, value: Any) -> int | None:
    """A cache budget: None (no limit) or a number of bytes >= 0 (fractions of a byte dropped)."""
    budget = check_number(name, value, minimum=0, allow_none=True)
    return None if budget is None else int(budget)


def check_cache_dir(name: str, value: Any) -> str | None:
    """None (the system's temporary directory) or an existing directory, as a string."""
    if value is None:
        return None
    if (
        not isinstance(value, (str, os.PathLike))
        or not os.fspath(value)
        or not Path(value).is_dir()
    ):
        raise InvalidArgument(f"{name} must be an existing directory or None, got {value!r}")
    return os.fspath(value)


@dataclass(frozen=True)
class CacheUsage:
    """What a ``GradientCache`` holds, and where."""

    nodes_in_memory: int
    nodes_on_disk: int
    memory_bytes: int
    """The bytes of the gradients held in memory (what counts against the budget)."""
    disk_bytes: int
    """The size of the file on disk (its rows, used or free; 0 before anything spills)."""


class GradientCache:
    """Node id -> its cached gradient (float32 arrays of fixed shapes), in the order nodes were
    first stored.

    A node is placed when it is first stored: in memory while the gradients in memory, this one
    included, fit ``memory`` bytes (None: no limit), otherwise in a row of a file on disk. It stays
    there until ``discard``. The file is created in ``directory`` (None: the system's temporary
    directory) when the first node spills, and has no name: it is removed as it is created, and
    its space returns to the file system when the cache is closed, garbage-collected, or the
    process ends however it ends. A discarded node's row is reused (the lowest free row first);
    the file grows only when every row is taken, by a quarter (at least one row).
    """

    def __init__(self, *, memory: int | None = None, directory: str | None = None) -> None:
        self.memory = check_cache_memory("memory", memory)
        self.directory = check_cache_dir("directory", directory)
        self._shapes: tuple[Shape, ...] = ()
        self._order: dict[int, None] = {}  # every cached node, in the order first stored
        self._in_memory: dict[int, Arrays] = {}
        self._rows: dict[int, int] = {}  # node -> its row in the file
        self._file: _RowFile | None = None

    def reset(self, shapes: Sequence[Sequence[int]]) -> None:
        """Drop every gradient and release the file; the gradients to come have ``shapes``."""
        self.close()
        self._shapes = tuple(tuple(int(n) for n in shape) for shape in shapes)

    def close(self) -> None:
        """Drop every gradient and release the file now (its space returns to the disk)."""
        self._order.clear()
        self._in_memory.clear()
        self._rows.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def node_bytes(self) -> int:
        """The bytes of one node's gradient."""
        return 4 * sum(math.prod(shape) for shape in self._shapes)

    @property
    def usage(self) -> CacheUsage:
        """How many nodes each tier holds, and their bytes."""
        return CacheUsage(
            nodes_in_memory=len(self._in_memory),
            nodes_on_disk=len(self._rows),
            memory_bytes=len(self._in_memory) * self.node_bytes,
            disk_bytes=0 if self._file is None else self._file.nbytes,
        )

    def on_disk(self, node: int) -> bool:
        """Whether ``node``'s gradient lives in the file."""
        return node in self._rows

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, node: object) -> bool:
        return node in self._order

    def get(self, node: int) -> Arrays | None:
        """``node``'s gradient (the stored arrays themselves, or views of its row), or None."""
        if node in self._in_memory:
            return self._in_memory[node]
        if node in self._rows:
            return self._file.view(self._rows[node])
        return None

    def items(self) -> Iterator[tuple[int, Arrays]]:
        """``(node, gradient)`` in the order nodes were first stored."""
        for node in list(self._order):
            yield node, self.get(node)

    def slot(self, node: int) -> Arrays:
        """Arrays to write ``node``'s gradient into, in place: its own, or for a node not cached
        yet new storage, placed now (values undefined until written)."""
        cached = self.get(node)
        if cached is not None:
            return cached
        if self._fits_in_memory():
            arrays = [np.empty(shape, np.float32) for shape in self._shapes]
            self._in_memory[node] = arrays
        else:
            self._rows[node] = self._disk().take()
            arrays = self._file.view(self._rows[node])
        self._order[node] = None
        return arrays

    def put(self, node: int, arrays: Arrays) -> Arrays | None:
        """Make ``arrays`` (float32, C order, the cache's shapes) ``node``'s gradient, and return
        arrays the caller may reuse as scratch: in memory the cache keeps ``arrays`` themselves
        and returns the node's previous arrays (None for a node new to memory); on disk it copies
        them into the node's row and returns ``arrays``."""
        if node in self._in_memory:
            previous, self._in_memory[node] = self._in_memory[node], arrays
            return previous
        if node not in self._rows and self._fits_in_memory():
            self._in_memory[node] = arrays
            self._order[node] = None
            return None
        for row, a in zip(self.slot(node), arrays, strict=True):
            np.copyto(row, a)
        return arrays

    def make_room(self) -> None:
        """Grow the file now if a node new to the cache would need a row and none is free, so
        that storing it later cannot fail (a full disk raises ``OSError`` here)."""
        if not self._fits_in_memory():
            self._disk().reserve()

    def discard(self, node: int) -> None:
        """Forget ``node``'s gradient (nothing if it has none); its memory or row is freed."""
        self._order.pop(node, None)
        self._in_memory.pop(node, None)
        row = self._rows.pop(node, None)
        if row is not None:
            self._file.give_back(row)

    def _fits_in_memory(self) -> bool:
        """Whether one more node's gradient fits the budget in memory."""
        return self.memory is None or (len(self._in_memory) + 1) * self.node_bytes <= self.memory

    def _disk(self) -> _RowFile:
        if self._file is None:
            self._file = _RowFile(self._shapes, self.directory)
        return self._file


class _RowFile:
    """A file of equal rows, each one gradient (its arrays one after another, the row padded to
    whole pages), mapped into memory; free rows are tracked and reused, lowest first."""

    def __init__(self, shapes: Sequence[Shape], directory: str | None) -> None:
        self._layout: list[tuple[int, int, Shape]] = []
        offset = 0
        for shape in shapes:
            size = math.prod(shape)
            self._layout.append((offset, size, shape))
            offset += size
        page = mmap.PAGESIZE // 4
        self._row_size = max(1, -(-offset // page)) * page
        self._directory = directory
        self._file: BinaryIO = tempfile.TemporaryFile(dir=directory, prefix="fl-async-cache-")
        # Closes the file when the cache is garbage-collected, without a ResourceWarning.
        self._closer = weakref.finalize(self, self._file.close)
        self._map: np.memmap | None = None
        self._table: np.ndarray | None = None  # the mapped rows as a plain array
        self._capacity = 0
        self._free: list[int] = []  # a heap of free rows

    @property
    def nbytes(self) -> int:
        """The file's size."""
        return self._capacity * self._row_size * 4

    def view(self, row: int) -> Arrays:
        """The arrays of ``row`` (views into the mapped file)."""
        data = self._table[row]
        return [data[start : start + size].reshape(shape) for start, size, shape in self._layout]

    def take(self) -> int:
        """A free row (the lowest), growing the file if none is left."""
        self.reserve()
        return heapq.heappop(self._free)

    def give_back(self, row: int) -> None:
        """Free ``row`` for reuse."""
        heapq.heappush(self._free, row)

    def reserve(self) -> None:
        """Grow the file by a quarter (at least one row) if no row is free."""
        if self._free:
            return
        capacity = max(self._capacity + 1, self._capacity + self._capacity // 4)
        old, new = self.nbytes, capacity * self._row_size * 4
        try:
            _allocate(self._file.fileno(), old, new - old)
        except OSError as error:
            where = self._directory or tempfile.gettempdir()
            raise OSError(
                error.errno,
                f"the gradient cache could not grow its file in {where} to {new} bytes "
                f"({error.strerror}): free space there, choose another cache_dir, or raise "
                "cache_memory",
            ) from error
        # Views handed out before stay valid: the old mapping is of the same file, never shrunk.
        self._map = np.memmap(
            self._file, dtype=np.float32, mode="r+", shape=(capacity, self._row_size)
        )
        self._table = self._map.view(np.ndarray)
        for row in range(self._capacity, capacity):
            heapq.heappush(self._free, row)
        self._capacity = capacity

    def close(self) -> None:
        """Unmap and close the file (its space is then released)."""
        self._table = self._map = None
        self._capacity, self._free = 0, []
        self._closer()


def _allocate(fd: int, offset: int, length: int) -> None:
    """Extend the file by ``length`` bytes with its blocks allocated now, so that a full disk
    raises ``OSError`` here instead of a fault when a mapped page is first written."""
    try:
        os.posix_fallocate(fd, offset, length)
    except (AttributeError, OSError) as error:  # no posix_fallocate, or the file system lacks it
        if isinstance(error, OSError) and error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, offset + length)
