"""The ServerApp: one fl_async strategy in real-time mode (replies applied in arrival order).

It runs in its own process under ``flwr run``, so it reports through files named in the run
config: ``progress-path`` (rewritten after every server step) and ``result-path`` (the final
result, or the error that stopped the run). With ``watch-path`` the run stops
``updates-after-fault`` server steps after a fault that names what that file lists (written by a
test once it has killed a SuperNode): the run goes on without the node, and need not run on
to its wall time to show it. With ``checkpoint-dir`` the strategy checkpoints there
(every ``checkpoint-every`` server steps and at the end), and a run started with the same
``checkpoint-dir`` resumes from it.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from deployapp.task import DIM, loss
from fl_async.strategies import ASGD, DCASGD, GSGM, FedAsync, FedBuff, TrendSmooth

app = ServerApp()

STRATEGIES = {
    "asgd": ASGD,
    "dcasgd": DCASGD,
    "fedasync": FedAsync,
    "fedbuff": FedBuff,
    "gsgm": GSGM,
    "trendsmooth": TrendSmooth,
}


class _FaultLog(logging.Handler):
    """Keep the strategy's ``fault (...)`` warnings with their wall-clock time."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.faults: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("fault ("):
            self.faults.append({"time": record.created, "message": message})


def _write_json(path: str, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically (a reader never sees half a file)."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, target)


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    result_path = str(cfg.get("result-path", ""))
    progress_path = str(cfg.get("progress-path", ""))
    num_partitions = int(cfg["min-nodes"])
    started = time.time()
    fault_log = _FaultLog()
    logging.getLogger("flwr").addHandler(fault_log)

    def evaluate(step: int, arrays: ArrayRecord) -> MetricRecord:
        value = loss(arrays.to_numpy_ndarrays()[0], num_partitions)
        _write_json(
            progress_path,
            {"server-step": step, "loss": value, "elapsed": time.time() - started},
        )
        return MetricRecord({"loss": value})

    try:
        strategy = _strategy(cfg)
        initial = ArrayRecord([np.zeros(DIM, np.float32)])
        result = strategy.start(
            grid,
            initial,
            num_rounds=10**6,  # the budgets below stop the run
            timeout=float(cfg["timeout"]),
            train_config=ConfigRecord(
                {"local-steps": int(cfg["local-steps"]), "pause": float(cfg["task-pause"])}
            ),
            evaluate_fn=evaluate,
            should_stop=_after_fault(cfg, fault_log),
            max_updates=int(cfg["num-updates"]),
            max_wall_time=float(cfg["max-wall-time"]),
        )
    except BaseException as err:  # report, then let Flower mark the run as failed
        _write_json(
            result_path,
            {
                "error": repr(err),
                "traceback": traceback.format_exc(),
                "fault-log": fault_log.faults,
            },
        )
        raise
    finally:
        logging.getLogger("flwr").removeHandler(fault_log)
    _write_json(result_path, _summary(strategy, result, num_partitions, started, fault_log))


def _after_fault(cfg: dict[str, Any], fault_log: _FaultLog) -> Any:
    """``should_stop``: True ``updates-after-fault`` server steps after the first fault logged
    after the time in ``watch-path`` and naming one of its ``names`` (None without the file)."""
    watch = str(cfg.get("watch-path", ""))
    if not watch:
        return None
    after = int(cfg.get("updates-after-fault", 3))
    seen_at: list[int] = []

    def should_stop(step: int, _result: Any) -> bool:
        if not seen_at:
            try:
                wanted = json.loads(Path(watch).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return False  # not written yet (or half written: it is replaced atomically)
            names = wanted["names"]
            late = [f["message"] for f in fault_log.faults if f["time"] > wanted["after"]]
            if any(name in message for message in late for name in names):
                seen_at.append(step)
        return bool(seen_at) and step >= seen_at[0] + after

    return should_stop


def _strategy(cfg: dict[str, Any]) -> Any:
    """The run config's strategy, evaluating every step, checkpointing where asked."""
    checkpoint_dir = str(cfg.get("checkpoint-dir", "")) or None
    checkpoint_every = int(cfg.get("checkpoint-every", 0)) or None
    return STRATEGIES[str(cfg["strategy"])](
        min_nodes=int(cfg["min-nodes"]),
        eval_every=1,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every if checkpoint_dir else None,
        poll_interval=float(cfg["poll-interval"]),
    )


def _summary(
    strategy: Any, result: Any, num_partitions: int, started: float, fault_log: _FaultLog
) -> dict[str, Any]:
    """What the tests read of a finished run."""
    arrays = result.arrays.to_numpy_ndarrays()
    return {
        "strategy": type(strategy).__name__,
        "finite": bool(all(np.all(np.isfinite(a)) for a in arrays)),
        "final-loss": loss(arrays[0], num_partitions),
        "initial-loss": loss(np.zeros(DIM, np.float32), num_partitions),
        "model": [float(x) for x in arrays[0]],
        "num-updates": result.num_updates,
        "server-steps": result.server_steps,
        "faults": result.faults,
        "rejected": result.rejected,
        "stopped-by": result.stopped_by,
        "wall-time": result.wall_time,
        "replies": len(result.train_metrics_clientapp),
        "updates": [
            {"index": index, **dict(record)}
            for index, record in sorted(result.train_metrics_clientapp.items())
        ],
        "started": started,
        "fault-log": fault_log.faults,
    }
