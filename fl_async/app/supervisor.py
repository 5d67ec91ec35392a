"""Processes that die with the launcher: a small supervisor that the kernel tells when the
launcher dies, even when it is killed outright (SIGKILL), which gives it no chance to stop them.

On Linux a command runs under ``SUPERVISOR``, which asks the kernel for SIGTERM when its parent
dies (``PR_SET_PDEATHSIG``). On SIGTERM it passes one SIGTERM on to the command (however many
it gets: Ray's handler is not reentrant, and a second SIGTERM while it runs left ``ray start``
waiting on its own lock for good) and kills its whole process group ``grace`` seconds later.
The launcher starts it in a session of its own, so that group is the command and what it left.
Elsewhere the command runs as it is. The Ray head (``local_ray``) and the SuperLink
(``superlink``) run under it.
"""

from __future__ import annotations

import os
import subprocess
import sys

SUPERVISOR = """\
import ctypes, os, signal, subprocess, sys, time
asked = []
signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(time.monotonic()))
ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]) or asked:  # the launcher died, or stops the head, already
    sys.exit(1)
head = subprocess.Popen(sys.argv[3:])
while head.poll() is None and not asked:
    time.sleep(0.1)
if asked:
    head.send_signal(signal.SIGTERM)  # once, however many came: Ray's handler is not reentrant
    while head.poll() is None and time.monotonic() < asked[0] + float(sys.argv[2]):
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)  # what the head left in this group, and this process with it
sys.exit(head.returncode if head.returncode >= 0 else 128 - head.returncode)
"""
"""Run ``argv[3:]`` and stop it (SIGTERM once, then SIGKILL to this process group ``argv[2]``
seconds later) when this process gets SIGTERM, as it does when the process ``argv[1]`` (its
parent) dies."""


def dying_with_this_process(command: list[str], grace: float) -> list[str]:
    """``command`` (an absolute executable first) run by ``SUPERVISOR`` for this process, with
    ``grace`` seconds to stop, on Linux; elsewhere as it is. Popen must run it from a thread
    that lives as long as the command should (the kernel's signal follows the thread that
    started it), in a session of its own."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", SUPERVISOR, str(os.getpid()), str(grace), *command]


def is_supervised(process: subprocess.Popen) -> bool:
    """Whether ``process`` is a ``SUPERVISOR`` (its command runs below it)."""
    args = process.args
    return isinstance(args, list) and len(args) > 2 and args[2] == SUPERVISOR
