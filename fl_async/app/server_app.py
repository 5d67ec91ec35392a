"""The ServerApp that ``flwr run .`` starts: it runs ``server_run.run`` with the run config.

This module stays light (no torch, no strategies): Flower's simulation imports the ServerApp
and the ClientApp under one lock before it starts Ray, so what they import at the top holds
Ray's start back. The run's own imports come with its first call, beside Ray's start.
"""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the strategy that the run config names, then write the results; with ``study-dir``
    set, run that study's runs instead (``fl_async.app.study_server``)."""
    from fl_async.app.config import STUDY_DIR, parse_run_config

    run_config = dict(context.run_config)
    study = str(run_config.pop(STUDY_DIR, ""))
    if study:
        from pathlib import Path

        from fl_async.app.study_server import serve

        serve(grid, Path(study))
        return
    from fl_async.app.server_run import run_alone

    run_alone(grid, parse_run_config(run_config))
