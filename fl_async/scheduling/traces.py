"""FedScale's device-capacity trace, read and written in FedScale's own format.

The file (FedScale's ``benchmark/dataset/data/device_info/client_device_capacity``, documented in
that folder's README.md) is a pickle of a dict ``{client_id: {"computation": float,
"communication": float}}``. FedScale's runtime (``fedscale/cloud/internal/client_metadata.py``,
``get_completion_time``) reads the two numbers as:

- ``computation``: the device's inference latency in milliseconds per sample. FedScale charges a
  training sample three times that (``augmentation_factor = 3``: a backward pass costs about two
  forward passes), so training takes ``3 * samples * computation / 1000`` seconds.
- ``communication``: the bandwidth in kbit/s, one figure for both directions. FedScale sizes a model
  as ``len(pickle) / 1024 * 8`` kbit (``fedscale/cloud/aggregation/aggregator.py``), so one kbit
  is 1024 bits and the bandwidth in bytes per second is ``communication * 128``.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fl_async.validation import check_int

BYTES_PER_KBIT = 1024 / 8
"""FedScale's kbit: a model of ``b`` bytes is ``b / 1024 * 8`` kbit."""

# Numpy scalars pickle through these; nothing else may be loaded (a pickle can run any code).
_SAFE_GLOBALS = {
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "dtype"),
    ("collections", "OrderedDict"),
}


@dataclass(frozen=True)
class DeviceCapacity:
    """A trace entry: ``computation`` in ms per sample (inference), ``communication`` in kbit/s."""

    computation: float
    communication: float

    def t_sample(self, augmentation_factor: float = 3.0) -> float:
        """Seconds to train on one example: ``augmentation_factor * computation / 1000``."""
        return augmentation_factor * self.computation / 1000.0

    def bandwidth(self) -> float:
        """Bandwidth in bytes per second (both directions): ``communication * 128``."""
        return self.communication * BYTES_PER_KBIT


@dataclass(frozen=True)
class FedScaleTrace:
    """A loaded trace: entries sorted by client id, and the file's SHA-256 (for checkpoints)."""

    client_ids: tuple[int, ...]
    capacities: tuple[DeviceCapacity, ...]
    sha256: str

    def entry(self, stable_id: int) -> tuple[int, DeviceCapacity]:
        """The entry for ``stable_id``: the ``(stable_id mod n)``-th by sorted client id."""
        i = check_int("stable_id", stable_id, minimum=0) % len(self.client_ids)
        return self.client_ids[i], self.capacities[i]


class _TraceUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in _SAFE_GLOBALS:
            raise pickle.UnpicklingError(
                f"a device-capacity trace holds only dicts, ints, strings and numbers; "
                f"it refers to {module}.{name}"
            )
        return super().find_class(module, name)


def _capacity_value(path: Path, client_id: int, value: object, field: str) -> float:
    number = value.get(field) if isinstance(value, Mapping) else None
    if (
        isinstance(number, bool)
        or not isinstance(number, (int, float, np.integer, np.floating))
        or not math.isfinite(number)
        or number <= 0
    ):
        raise ValueError(
            f"trace {path}: client {client_id} needs {field!r} as a finite number > 0, "
            f"got entry {value!r}"
        )
    return float(number)


def load_fedscale_trace(path: str | os.PathLike[str]) -> FedScaleTrace:
    """Read a FedScale ``client_device_capacity`` pickle; errors name the file and the entry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"trace file {str(path)!r} does not exist; expected a FedScale device-capacity "
            "pickle {client_id: {'computation': ms/sample, 'communication': kbit/s}}"
        )
    raw = path.read_bytes()
    try:
        data = _TraceUnpickler(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise ValueError(f"trace {path} is not a readable FedScale pickle: {error}") from error
    if not isinstance(data, Mapping) or not data:
        raise ValueError(
            f"trace {path} must hold a non-empty dict {{client_id: {{'computation', "
            f"'communication'}}}}, got {type(data).__name__}"
        )
    entries = []
    for key, value in data.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
            raise ValueError(f"trace {path}: client ids must be integers, got {key!r}")
        capacity = DeviceCapacity(
            computation=_capacity_value(path, int(key), value, "computation"),
            communication=_capacity_value(path, int(key), value, "communication"),
        )
        entries.append((int(key), capacity))
    entries.sort(key=lambda item: item[0])
    return FedScaleTrace(
        client_ids=tuple(k for k, _ in entries),
        capacities=tuple(c for _, c in entries),
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def save_fedscale_trace(
    path: str | os.PathLike[str], capacities: Mapping[int, DeviceCapacity]
) -> None:
    """Write ``capacities`` as a FedScale device-capacity pickle (plain dicts of floats)."""
    data = {
        check_int("client id", k, minimum=0): {
            "computation": float(c.computation),
            "communication": float(c.communication),
        }
        for k, c in capacities.items()
    }
    Path(path).write_bytes(pickle.dumps(data))
