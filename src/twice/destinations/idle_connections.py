"""Idle destination connections kept for the next unit of this process (PostgreSQL).

A PostgreSQL connection costs a TCP (or socket) handshake, authentication and a backend
start: about 12 ms here, twice a unit (the write, then its verification), a fifth of a small
unit's whole time. A destination hands its connection back here when it is closed, and the
next destination of the same server, database and user in this process takes it instead of
connecting again.

A connection is kept only when nothing of its last user can still be on it:

- it is handed back by ``close()`` of the destination that held it, which runs in the thread
  that used it (a ``with`` block around the write or the check), and only when it is idle:
  no transaction open or failed (an abandoned or interrupted write closes it instead);
- it is taken only in the process that opened it (a forked child connects on its own);
- it is dropped, not reused, when it has been idle longer than ``MAX_IDLE_SECONDS`` or the
  server has spoken on it while idle (a terminated backend's goodbye, an EOF): reusing a
  connection the server closed would fail the next write for no reason of its own.

Everything a write sets on its connection is transaction-scoped (``SET LOCAL``,
``set_config(..., true)``, advisory transaction locks, ``ON COMMIT DROP`` tables), so an idle
connection carries nothing from one unit to the next.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")

MAX_IDLE_SECONDS = 30.0
"""An idle connection older than this is closed rather than reused (server-side idle
timeouts, firewalls dropping quiet flows)."""
MAX_IDLE_PER_KEY = 8
"""Idle connections kept per connection string; more are closed (a process's workers)."""


class IdleConnections(Generic[C]):
    """Idle connections by connection string, for this process only (see the module doc).

    ``socket(conn)`` gives the connection's file descriptor (to see whether the server spoke
    while it was idle); ``close(conn)`` closes it for good.
    """

    def __init__(self, socket: Callable[[C], int], close: Callable[[C], None]) -> None:
        self._socket = socket
        self._close = close
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._idle: dict[str, list[tuple[float, C]]] = {}

    def take(self, key: str) -> C | None:
        """The most recently returned live connection for ``key``, or None."""
        while True:
            with self._lock:
                if self._pid != os.getpid():  # a forked child: its parent's sockets are not its
                    self._pid, self._idle = os.getpid(), {}
                    return None
                stack = self._idle.get(key)
                if not stack:
                    return None
                since, conn = stack.pop()
            if time.monotonic() - since <= MAX_IDLE_SECONDS and self._quiet(conn):
                return conn
            self._discard(conn)

    def give(self, key: str, conn: C) -> bool:
        """Keep ``conn`` (idle, see the module doc) for the next ``take(key)``; False when it
        was not kept (the caller closes it)."""
        with self._lock:
            if self._pid != os.getpid():
                return False
            stack = self._idle.setdefault(key, [])
            if len(stack) >= MAX_IDLE_PER_KEY:
                return False
            stack.append((time.monotonic(), conn))
            return True

    def clear(self) -> None:
        """Close every idle connection of this process (tests; a process about to exit)."""
        with self._lock:
            kept = [conn for stack in self._idle.values() for _, conn in stack] \
                if self._pid == os.getpid() else []
            self._idle = {}
        for conn in kept:
            self._discard(conn)

    def _quiet(self, conn: C) -> bool:
        """Nothing to read on an idle connection: the server has not closed or ended it."""
        try:
            readable, _, _ = select.select([self._socket(conn)], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def _discard(self, conn: C) -> None:
        try:
            self._close(conn)
        except Exception:  # closing a connection the server already dropped
            pass
