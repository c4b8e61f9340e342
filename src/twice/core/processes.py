"""Other processes of this host, as Linux's ``/proc`` shows them: whether one still exists,
its state, its program name.

The one place twice looks at other processes: to free a lease whose holder has exited
(``twice.ledger.lease_holders``) and to name who holds a file lock, and whether it is stopped
(``twice.ledger.lock_holders``, the DuckDB destination). Read-only and best effort: where
``/proc`` is missing or not ours to read, the answer is None ("cannot tell") and callers do
what they would do without it. Never the command line, which may hold a password.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def state(pid: int, *, proc: Path = PROC) -> str | None:
    """The process's state letter (``R``, ``S``, ``T`` stopped, ``t`` traced, ``Z`` zombie),
    or None when it cannot be read."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 1:].split()  # "pid (comm) S ...": comm may hold ")"
    return fields[0] if fields else None


def program(pid: int, *, proc: Path = PROC) -> str:
    """The process's program name (``comm``, at most 15 characters), or ``?``."""
    try:
        return (proc / str(pid) / "comm").read_text().strip() or "?"
    except OSError:
        return "?"


def started_at(pid: int, *, proc: Path = PROC) -> float | None:
    """When the process started, as a POSIX timestamp (to the clock tick), or None when it
    cannot be read: a pid can be reused, and a process that started after a holder began its
    work is not that holder."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        boot = next(line for line in (proc / "stat").read_text().splitlines()
                    if line.startswith("btime "))
        ticks = int(stat[stat.rfind(")") + 1:].split()[19])  # field 22: starttime
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def stopped(pid: int, *, proc: Path = PROC) -> bool:
    """Stopped by a signal (SIGSTOP, Ctrl-Z) or a debugger: it holds what it holds until it
    is resumed or ended."""
    return state(pid, proc=proc) in ("T", "t")


def gone(pid: int, *, proc: Path = PROC) -> bool:
    """No such process, or one that has exited and waits to be reaped (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # not ours to signal: it exists
        return False
    return state(pid, proc=proc) in ("Z", "X")


@dataclass(frozen=True)
class Process:
    """What an error may say of another process: its id, program name and whether stopped."""

    pid: int
    program: str
    stopped: bool

    def describe(self) -> str:
        """``PID program``, with ``(stopped)`` when it is."""
        return f"{self.pid} {self.program}{' (stopped)' if self.stopped else ''}"


def look(pid: int, *, proc: Path = PROC) -> Process:
    """The process as ``/proc`` shows it now."""
    return Process(pid, program(pid, proc=proc), stopped(pid, proc=proc))
