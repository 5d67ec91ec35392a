"""Follow ``flwr run --stream`` for the launcher: echo its output, note the run id it reports,
and watch for the file the ServerApp writes last (a run's ``run-status.json``, a study's
``ended.json``).

That file, not a line of the log, says the ServerApp is done: once it exists the results are
written, and the launcher may stop ``flwr run`` without waiting for Flower and Ray to shut down.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

POLL = 0.1
"""Seconds between two looks for the done file (and at ``flwr run``)."""
ECHO_GRACE = 5.0
"""Seconds the echo of ``flwr run``'s last lines may take once it has ended."""
_STARTED_RUN = re.compile(r"Successfully started run (\d+)")


class Echo(threading.Thread):
    """Copies a stream's lines to stdout as they come and notes the run id among them."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(name="fl-async-flwr-echo", daemon=True)
        self.stream = stream
        self.run_id: int | None = None

    def run(self) -> None:
        """Echo every line until the stream ends."""
        for line in self.stream:
            sys.stdout.write(line)
            sys.stdout.flush()
            found = _STARTED_RUN.search(line)
            if found:
                self.run_id = int(found.group(1))


def wait_for(process: subprocess.Popen, done_file: Path) -> bool:
    """Wait until ``done_file`` exists (True) or ``process`` ends without it (False)."""
    while process.poll() is None:
        if done_file.exists():
            return True
        time.sleep(POLL)
    return done_file.exists()
