"""Lease holder ids, and whether the process behind one has exited.

A lease holds its unit until it expires or is released: from another host, a paused holder
and a dead one look the same, so only time can free the unit. On the holder's own host they
do not: a holder id made by :func:`new_holder` names its host and process (``host:pid:tag``;
a worker's default name is ``host:pid``; an Airflow try's ``host:pid:airflow:...``), and a
process that no longer exists (or is a zombie waiting to be reaped) holds nothing. Its lease
is then free at once, so a rerun right after a ``kill -9`` or an OOM kill takes the unit over
instead of waiting out the lease (300 s by default). The takeover is the same as after expiry:
the earlier attempt's outcome becomes unknown and is reconciled first, and fencing refuses any
write made under the earlier token.

A wrong "exited" (another PID namespace behind the same host name) is safe for the same
reason: the earlier holder's writes are fenced. Holder ids in any other form (a name given
to a worker) are never judged exited.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from datetime import datetime
from pathlib import Path

from twice.core import processes

# ``host:pid:tag`` (new_holder), ``host:pid`` (a worker's default name) or ``host:pid:...``
# (an Airflow try: ``host:pid:airflow:dag.task:run:try-N``)
_HOLDER = re.compile(r"(?P<host>[^:]+):(?P<pid>[0-9]+)(?::.+)?")


def process_holder() -> str:
    """``host:pid``: this process, readable in the ledger (a worker's default name)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def new_holder() -> str:
    """A holder id unique across hosts, processes and executors: ``host:pid:tag``."""
    return f"{process_holder()}:{uuid.uuid4().hex[:8]}"


def _other_local_pid(holder: str) -> int | None:
    """The pid ``holder`` names when it is another process of this host, else None (another
    host, this process, or a holder id of no ``host:pid`` form)."""
    found = _HOLDER.fullmatch(holder)
    if found is None or found["host"] != socket.gethostname():
        return None
    pid = int(found["pid"])
    return None if pid == os.getpid() else pid


def running_elsewhere(holder: str, since: datetime | None = None, *,
                      proc: Path = processes.PROC) -> int | None:
    """The pid of ``holder`` when it names ANOTHER process of this host that still exists
    (running or stopped), else None. Such a holder may still act on what it began, lease or
    no lease: a paused process resumes where it stopped. ``since``: when the holder began
    that work; a process with its pid that started later is another process (the pid was
    reused), so it is not the holder."""
    pid = _other_local_pid(holder)
    if pid is None or processes.gone(pid, proc=proc):
        return None
    started = processes.started_at(pid, proc=proc)
    if since is not None and started is not None and started > since.timestamp() + 1:
        return None  # a later process: the holder itself is gone
    return pid


def exited(holder: str, *, proc: Path = processes.PROC) -> bool:
    """Whether ``holder`` names a process of this host that no longer runs."""
    pid = _other_local_pid(holder)
    return pid is not None and processes.gone(pid, proc=proc)
