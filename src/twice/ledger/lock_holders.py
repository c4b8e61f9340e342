"""Who has a SQLite ledger file open, and which of them are stopped.

SQLite does not say which connection holds its write lock. When a write gives up waiting for
it, the operator's first question is which process to look at; a process stopped inside a
write transaction (SIGSTOP, Ctrl-Z, a debugger) holds the lock until it is resumed or ended,
and no timeout on the waiting side changes that. So the error names the processes that have
the file (or its ``-wal``/``-shm``) open, read from Linux's ``/proc`` (elsewhere from ``lsof``
where installed); without permission to look, it names none. Only the process id, its state
and its program name are reported (:mod:`twice.core.processes`), never its command line.
"""

from __future__ import annotations

import os
from pathlib import Path

from twice.core import processes

#: Processes looked at, at most (the scan runs once, when a write has already given up).
MAX_PROCESSES = 10_000


def holders(path: str, *, proc: Path = processes.PROC) -> list[processes.Process]:
    """Other processes with ``path``, its WAL or its shared-memory file open, by pid."""
    real = os.path.realpath(path)
    pids = processes.having_open([real, real + "-wal", real + "-shm"], proc=proc,
                                 limit=MAX_PROCESSES)
    return [processes.look(pid, proc=proc) for pid in pids]


def holders_advice(path: str | None) -> str:
    """The sentence naming who has ``path`` open ("" when nobody can be named)."""
    if not path:
        return ""
    found = holders(path)
    stopped = [h for h in found if h.stopped]
    if stopped:
        pids = " ".join(str(h.pid) for h in stopped)
        return (
            f" Stopped with the ledger open: {', '.join(h.describe() for h in stopped)}. A "
            "process stopped inside a write holds the lock until it is resumed "
            f"(`kill -CONT {pids}`) or ended."
        )
    if found:
        return f" Processes with the ledger open: {', '.join(h.describe() for h in found)}."
    return ""
