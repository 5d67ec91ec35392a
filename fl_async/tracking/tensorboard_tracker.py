"""``TensorBoardTracker``: a run as TensorBoard event files (``pip install 'fl-async[tracking]'``).

Scalars are TensorBoard's (32-bit floats); the parameters go to the HParams dashboard, with the
summary's metrics as its metrics, and the texts to the Text dashboard.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fl_async.tracking.base import Param


class TensorBoardTracker:
    """Writes one run's event files into ``log_dir`` (``tensorboard --logdir`` a folder above
    it shows several runs side by side)."""

    def __init__(self, *, log_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))
        self._params: dict[str, Param] = {}

    def __repr__(self) -> str:
        """Where it writes."""
        return f"TensorBoardTracker(log_dir={str(self.log_dir)!r})"

    def log_params(self, params: Mapping[str, Param]) -> None:
        """Keep ``params`` for the HParams dashboard (written with the summary) and show them
        as a table in the Text dashboard."""
        self._params = dict(params)
        rows = "\n".join(f"| {key} | {value} |" for key, value in sorted(params.items()))
        self._writer.add_text("params", "| parameter | value |\n|---|---|\n" + rows)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """One scalar per metric at ``step``."""
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)

    def log_summary(self, metrics: Mapping[str, float], texts: Mapping[str, str]) -> None:
        """The final numbers as scalars at step 0 and HParams metrics, the texts as text."""
        from torch.utils.tensorboard.summary import hparams

        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=0)
        for key, text in texts.items():
            self._writer.add_text(f"summary/{key}", text or "-")
        # Written into this run's own folder (SummaryWriter.add_hparams would open another).
        for event in hparams(self._params, dict(metrics)):
            self._writer.file_writer.add_summary(event)

    def close(self) -> None:
        """Flush the event file and close it."""
        self._writer.close()
