"""The virtual clock: reproducible task durations per node (docs/algorithms.md, Virtual clock).

Units: seconds, examples and bytes. A task of node ``k`` lasts

    duration = examples * t_sample_k + bytes_down / bw_down_k + bytes_up / bw_up_k + latency_k

times ``exp(jitter * z)`` when ``jitter > 0`` (a lognormal factor with median 1). Every draw comes
from its own generator, so results never depend on the order of calls:

- node ``k``'s ``t_sample``: ``numpy.random.default_rng([seed, k, 0])``;
- the jitter ``z`` of node ``k``'s task ``i``: ``numpy.random.default_rng([seed, k, 1, i])``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from fl_async.scheduling.speeds import SPEED_MODELS, LogNormal, SpeedModel, Trace
from fl_async.scheduling.traces import FedScaleTrace, load_fedscale_trace
from fl_async.validation import InvalidArgument, check_choice, check_int, check_number, check_seed

PROFILE_STREAM = 0
"""Third seed word of a node's profile generator ``[seed, stable_id, PROFILE_STREAM]``."""
JITTER_STREAM = 1
"""Third seed word of a task's jitter generator ``[seed, stable_id, JITTER_STREAM, task_index]``."""


@dataclass(frozen=True)
class NodeProfile:
    """A node's fixed characteristics, drawn once.

    ``t_sample`` in seconds per example, ``bw_down`` / ``bw_up`` in bytes per second (``inf``:
    transfers take no time), ``latency`` in seconds per task.
    """

    t_sample: float
    bw_down: float
    bw_up: float
    latency: float


def _resolve_speed(
    speed: str | SpeedModel, sigma: float, median: float, trace: str | os.PathLike[str] | None
) -> SpeedModel:
    custom_lognormal = sigma != 1.0 or median != 1.0
    if trace is not None:
        if not (isinstance(speed, str) and speed in ("lognormal", "trace")):
            raise InvalidArgument(f"trace= sets the speed model; do not also pass speed={speed!r}")
        speed = "trace"
    if isinstance(speed, str):
        speed = check_choice("speed", speed, SPEED_MODELS)
        if speed == "lognormal":
            return LogNormal(sigma=sigma, median=median)
        if custom_lognormal:
            raise InvalidArgument(
                f"sigma and median apply to speed='lognormal', not {speed!r}; got sigma={sigma!r}, "
                f"median={median!r}"
            )
        if speed == "trace":
            if trace is None:
                raise InvalidArgument(
                    "speed='trace' needs trace=<path of a FedScale device-capacity pickle>"
                )
            return Trace(trace)
        return SPEED_MODELS[speed]()
    if not isinstance(speed, tuple(SPEED_MODELS.values())):
        raise InvalidArgument(
            f"speed must be one of {', '.join(map(repr, SPEED_MODELS))} or a LogNormal, Uniform, "
            f"Pareto or Trace object, got {speed!r}"
        )
    if custom_lognormal:
        raise InvalidArgument(
            f"sigma and median apply to speed='lognormal'; set them on the {speed.name} model "
            f"instead, got sigma={sigma!r}, median={median!r}"
        )
    return speed


def _check_ranking(ranking: Sequence[int] | None) -> tuple[int, ...]:
    if ranking is None:
        return ()
    ids = tuple(check_int("ranking entry", k, minimum=0) for k in ranking)
    if len(set(ids)) != len(ids):
        repeated = sorted({k for k in ids if ids.count(k) > 1})
        raise InvalidArgument(f"ranking must list each stable id once; repeated: {repeated}")
    return ids


class VirtualClock:
    """Simulated time (docs/algorithms.md, Virtual clock): each node's task duration, reproducibly.

    ``speed`` draws ``t_sample`` (seconds per example): ``"lognormal"`` (``sigma``, ``median``),
    ``"uniform"``, ``"pareto"``, ``"trace"`` (with ``trace=``) or a model object. ``bandwidth_down``
    and ``bandwidth_up`` (bytes/s) default to the trace's figure, else unlimited; ``latency``
    (seconds per task) defaults to 0. ``ranking`` lists stable ids from fastest to slowest: their
    drawn profiles are re-assigned so that the ``i``-th id gets the ``i``-th smallest ``t_sample``.
    """

    name: ClassVar[str] = "VirtualClock"

    def __init__(
        self,
        *,
        seed: int = 0,
        speed: str | SpeedModel = "lognormal",
        sigma: float = 1.0,
        median: float = 1.0,
        jitter: float = 0.0,
        bandwidth_down: float | None = None,
        bandwidth_up: float | None = None,
        latency: float = 0.0,
        trace: str | os.PathLike[str] | None = None,
        ranking: Sequence[int] | None = None,
    ) -> None:
        self.seed = check_seed("seed", seed)
        self.speed = _resolve_speed(speed, sigma, median, trace)
        self.jitter = check_number("jitter", jitter, minimum=0)
        self.bandwidth_down = self._check_bandwidth("bandwidth_down", bandwidth_down)
        self.bandwidth_up = self._check_bandwidth("bandwidth_up", bandwidth_up)
        self.latency = check_number("latency", latency, minimum=0)
        self.ranking = _check_ranking(ranking)
        self._trace: FedScaleTrace | None = None
        if isinstance(self.speed, Trace):
            self._trace = load_fedscale_trace(self.speed.path)
        self._profiles: dict[int, NodeProfile] = {}
        self._assign_ranking()

    # ----------------------------------------------------------------------------- public API
    def profile(self, stable_id: int) -> NodeProfile:
        """Node ``stable_id``'s profile (drawn on first use, then cached)."""
        stable_id = check_int("stable_id", stable_id, minimum=0)
        found = self._profiles.get(stable_id)
        if found is None:
            found = self._profiles[stable_id] = self._draw(stable_id)
        return found

    def duration(
        self, stable_id: int, task_index: int, *, examples: int, bytes_down: int, bytes_up: int
    ) -> float:
        """Seconds that node ``stable_id`` takes for its task ``task_index`` (formula above)."""
        p = self.profile(stable_id)
        task_index = check_int("task_index", task_index, minimum=0)
        examples = check_int("examples", examples, minimum=0)
        bytes_down = check_int("bytes_down", bytes_down, minimum=0)
        bytes_up = check_int("bytes_up", bytes_up, minimum=0)
        seconds = examples * p.t_sample + bytes_down / p.bw_down + bytes_up / p.bw_up + p.latency
        if self.jitter > 0.0:
            rng = np.random.default_rng([self.seed, stable_id, JITTER_STREAM, task_index])
            seconds *= math.exp(self.jitter * float(rng.standard_normal()))
        return seconds

    def hyperparameters(self) -> dict[str, Any]:
        """Everything the draws depend on, as plain values (the trace by its SHA-256)."""
        speed = {"model": self.speed.name}
        speed.update({f.name: getattr(self.speed, f.name) for f in fields(self.speed)})
        if self._trace is not None:
            speed["path"] = os.fspath(speed["path"])
            speed["sha256"] = self._trace.sha256
        return {
            "seed": self.seed,
            "speed": speed,
            "jitter": self.jitter,
            "bandwidth_down": self.bandwidth_down,
            "bandwidth_up": self.bandwidth_up,
            "latency": self.latency,
            "ranking": list(self.ranking),
        }

    def state_dict(self) -> dict[str, Any]:
        """The configuration and every profile drawn so far, as plain values."""
        return {
            "name": self.name,
            "hyperparameters": self.hyperparameters(),
            "profiles": {
                k: [p.t_sample, p.bw_down, p.bw_up, p.latency] for k, p in self._profiles.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` on a clock built with the same configuration."""
        if state.get("name") != self.name:
            raise ValueError(f"state_dict is for {state.get('name')!r}, not {self.name!r}")
        saved = _comparable(state.get("hyperparameters"))
        mine = _comparable(self.hyperparameters())
        if saved != mine:
            differ = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
            raise ValueError(
                f"state_dict was saved by a clock configured differently in {differ}: saved "
                f"{[saved.get(k) for k in differ]}, this clock {[mine.get(k) for k in differ]}"
            )
        self._profiles = {int(k): NodeProfile(*map(float, p)) for k, p in state["profiles"].items()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"VirtualClock({args})"

    # ------------------------------------------------------------------------- internals
    @staticmethod
    def _check_bandwidth(name: str, value: float | None) -> float | None:
        return check_number(name, value, minimum=0, min_open=True, finite=False, allow_none=True)

    def _draw(self, stable_id: int) -> NodeProfile:
        if self._trace is not None:
            _, capacity = self._trace.entry(stable_id)
            t_sample = capacity.t_sample(self.speed.augmentation_factor)
            default_bandwidth = capacity.bandwidth()
        else:
            rng = np.random.default_rng([self.seed, stable_id, PROFILE_STREAM])
            t_sample = self.speed.draw(rng)
            default_bandwidth = math.inf
        return NodeProfile(
            t_sample=t_sample,
            bw_down=default_bandwidth if self.bandwidth_down is None else self.bandwidth_down,
            bw_up=default_bandwidth if self.bandwidth_up is None else self.bandwidth_up,
            latency=self.latency,
        )

    def _assign_ranking(self) -> None:
        drawn = [self._draw(k) for k in self.ranking]
        # Profiles move whole (a trace's device keeps its bandwidth); ties go to the smaller id.
        order = sorted(range(len(drawn)), key=lambda i: (drawn[i].t_sample, self.ranking[i]))
        for k, i in zip(self.ranking, order, strict=True):
            self._profiles[k] = drawn[i]


def _comparable(config: Any) -> dict[str, Any]:
    """The configuration without the trace's path: a moved trace file is the same trace."""
    if not isinstance(config, dict):
        return {}
    out = dict(config)
    speed = dict(out.get("speed") or {})
    speed.pop("path", None)
    out["speed"] = speed
    return out
