"""Idle destination connections kept for the next unit of this process (PostgreSQL, SQLite).

A new connection is a fifth of a small unit's time or more: for PostgreSQL a TCP (or socket)
handshake, authentication and a backend start, about 12 ms here, twice a unit (the write,
then its verification); for SQLite the file's open, its schema parsed again and a cold page
cache, about 1 ms of a 4 ms unit. A destination hands its connection back here when it is
closed, and the next destination of the same key (server, database and user; the database
file) in this process takes it instead of connecting again.

A connection is kept only when nothing of its last user can still be on it:

- it is handed back by ``close()`` of the destination that held it, which runs in the thread
  that used it (a ``with`` block around the write or the check), and only when it is idle:
  no transaction open or failed (an abandoned or interrupted write closes it instead);
- it is taken only in the process that opened it (a forked child connects on its own);
- it is dropped, not reused, when it has been idle longer than ``MAX_IDLE_SECONDS`` or the
  engine's ``fresh`` check says it can no longer serve: for PostgreSQL, the server spoke on it
  while idle (a terminated backend's goodbye, an EOF); for SQLite, the file at the path is no
  longer the file it opened (see ``twice.destinations.sqlite``);
- at most ``MAX_IDLE_PER_KEY`` per key and ``max_total`` in all are kept, the oldest closed
  first: a process that writes many files or databases keeps a bounded number open.
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
"""Idle connections kept per key; more are closed (a process's workers)."""
MAX_IDLE_TOTAL = 32
"""Idle connections kept in all, by default; past it the oldest is closed."""


class IdleConnections(Generic[C]):
    """Idle connections by key, for this process only (see the module doc).

    ``fresh(conn)`` says whether a connection idle since it was handed back can still serve;
    ``close(conn)`` closes it for good.
    """

    def __init__(self, fresh: Callable[[C], bool], close: Callable[[C], None], *,
                 max_total: int = MAX_IDLE_TOTAL) -> None:
        self._fresh = fresh
        self._close = close
        self.max_total = max_total
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._idle: dict[str, list[tuple[float, C]]] = {}

    def take(self, key: str) -> C | None:
        """The most recently returned fresh connection for ``key``, or None."""
        while True:
            with self._lock:
                if self._pid != os.getpid():  # a forked child: its parent's files are not its
                    self._pid, self._idle = os.getpid(), {}
                    return None
                stack = self._idle.get(key)
                if not stack:
                    return None
                since, conn = stack.pop()
                if not stack:
                    del self._idle[key]
            if time.monotonic() - since <= MAX_IDLE_SECONDS and self._fresh(conn):
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
            evicted = self._over_total()
        for old in evicted:
            self._discard(old)
        return True

    def clear(self) -> None:
        """Close every idle connection of this process (tests; a process about to exit)."""
        with self._lock:
            kept = [conn for stack in self._idle.values() for _, conn in stack] \
                if self._pid == os.getpid() else []
            self._idle = {}
        for conn in kept:
            self._discard(conn)

    def _over_total(self) -> list[C]:
        """Take the oldest idle connections out past ``max_total`` (the lock is held)."""
        count = sum(len(stack) for stack in self._idle.values())
        evicted: list[C] = []
        while count > self.max_total:
            key = min(self._idle, key=lambda k: self._idle[k][0][0])
            _, conn = self._idle[key].pop(0)
            if not self._idle[key]:
                del self._idle[key]
            evicted.append(conn)
            count -= 1
        return evicted

    def _discard(self, conn: C) -> None:
        try:
            self._close(conn)
        except Exception:  # closing a connection the server already dropped
            pass


def quiet_socket(socket: Callable[[C], int]) -> Callable[[C], bool]:
    """A ``fresh`` check for a network connection: nothing to read on its idle socket (the
    server has not closed or ended it); ``socket(conn)`` gives its file descriptor."""
    def fresh(conn: C) -> bool:
        try:
            readable, _, _ = select.select([socket(conn)], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    return fresh
