"""Stopping a server process the tests started in its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys


def stop_process_group(process: subprocess.Popen[bytes], *, timeout: float = 30) -> None:
    """SIGTERM the group's leader and wait for it, then SIGKILL the rest of its group.

    SIGTERM, not SIGINT: a shell starts background jobs with SIGINT ignored (CI launched
    with `&` does), and Python keeps it ignored, so a Ctrl-C never arrives; jupyter-server
    and JupyterHub both stop cleanly on SIGTERM.
    """
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"process {process.pid} ignored SIGTERM for {timeout} s: killed", file=sys.stderr)
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
