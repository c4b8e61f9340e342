"""Module-level callables for the process-timeout tests.

A 'spawn' child imports them by module name, so they live in a module of their own that imports
nothing heavy (not the test module, which would drag pytest and hypothesis into every child).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def add(a: int, b: int) -> int:
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


def busy_then_write(folder: str, seconds: float) -> str:
    """Record the start, spin the CPU for ``seconds``, then write a 'finished' marker."""
    Path(folder, "started").write_text(repr(time.time()))
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        pass
    Path(folder, "finished").write_text("the busy loop ran to the end")
    return "done"


def ignore_sigterm_and_sleep(seconds: float) -> None:
    """A child that shrugs off SIGTERM: only SIGKILL stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)


def exit_abruptly(code: int) -> None:
    os._exit(code)


def send_later(directory: str) -> None:
    """An attempt body that sends (writes ``sent``) 2 s after it started (writes its pid)."""
    Path(directory, "child.pid").write_text(str(os.getpid()))
    time.sleep(2)
    Path(directory, "sent").write_text("sent")
