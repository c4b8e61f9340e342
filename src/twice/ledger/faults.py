"""Which database failures are worth retrying, which are the storage's fault, and what to say.

A ledger write that fails because another process holds the SQLite write lock, or because the
PostgreSQL connection was cut, a serialization failure or a deadlock, did not happen: it can be
run again from the start (``Ledger`` retries it with capped exponential backoff and jitter). A
write refused because the disk is full or the file system is read-only will be refused again:
it becomes a ``LedgerStorageError`` at once, naming the ledger and what to fix. Anything else
(a constraint violation, a ``LedgerError``) is not a fault of the storage and is left alone.

One case is neither: a PostgreSQL connection lost *while committing*. The server may have
committed before the connection went, so running the write again could record it twice; it is
reported as ``LedgerUnavailableError`` saying the write may or may not have been recorded.
"""

from __future__ import annotations

import random
import re
import sqlite3
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import exc as sa_exc

from twice.ledger.lock_holders import holders_advice

#: ``refused``: the server answered and refused this connection (no such database or role, a
#: wrong password): not retried, and not the storage's fault either.
FaultKind = Literal["transient", "storage", "refused"]

#: Where in a transaction an exception was raised: "connect", "commit" (else: the body).
PHASE_ATTRIBUTE = "_twice_phase"

# SQLite primary result codes (extended codes carry them in the low byte).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_READONLY = 8
_SQLITE_IOERR = 10
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_CANTOPEN = 14

_PG_TRANSIENT = {
    "40001": "serialization failure",
    "40P01": "deadlock detected",
    "55P03": "lock not available",
    "53300": "too many connections",
    "57P01": "connection terminated by an administrator",
    "57P02": "server crash shutdown",
    "57P03": "server starting up or shutting down",
}
_PG_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03"})
_PG_STORAGE = {
    "53100": "the database server's disk is full",
    "58030": "I/O error on the database server",
    "25006": "the database server is read-only (a standby, or default_transaction_read_only)",
}

#: libpq's refusals of a connection (no SQLSTATE reaches the client): what is missing or wrong,
#: and the name the server gave.
_PG_REFUSED = (
    (re.compile(r'database "([^"]*)" does not exist'), "database"),
    (re.compile(r'role "([^"]*)" does not exist'), "role"),
    (re.compile(r'(?:password|SCRAM) authentication failed for user "([^"]*)"'), "password"),
    (re.compile(r"(no password supplied)"), "password"),
    (re.compile(r'permission denied for database "([^"]*)"'), "permission"),
)

# Backoff between tries: capped exponential with jitter ("equal jitter": half fixed, half
# random), so workers that failed together do not come back together.
FIRST_DELAY_SECONDS = 0.05
MAX_DELAY_SECONDS = 2.0
DEFAULT_RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class Fault:
    """A failure attributed to the storage: ``transient`` (retry) or ``storage`` (do not)."""

    kind: FaultKind
    cause: str
    original: BaseException
    connection_lost: bool = False
    disk_full: bool = False
    read_only: bool = False
    corrupt: bool = False
    refused: str | None = None  # kind "refused": "database", "role", "password", "permission"


def mark_phase(exc: BaseException, phase: str) -> None:
    """Remember that ``exc`` was raised while connecting or committing."""
    try:
        setattr(exc, PHASE_ATTRIBUTE, phase)
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass


def phase_of(exc: BaseException) -> str | None:
    return getattr(exc, PHASE_ATTRIBUTE, None)


def _driver_error(exc: BaseException) -> BaseException:
    if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:
        return exc.orig
    return exc


def _is_failed_rollback(exc: BaseException) -> bool:
    return "cannot rollback" in str(_driver_error(exc)).lower()


def root_failure(exc: BaseException) -> BaseException:
    """The failure itself, not SQLite's "cannot rollback - no transaction is active" that may
    follow it (SQLite rolls back by itself after a disk-full error, so the rollback that the
    error handler then asks for fails and would hide the real cause)."""
    seen = 0
    while _is_failed_rollback(exc) and seen < 10:
        context = exc.__cause__ or exc.__context__
        while context is not None and _driver_error(context) is _driver_error(exc):
            context = context.__cause__ or context.__context__
        if context is None:
            break
        exc, seen = context, seen + 1
    return exc


def first_line(exc: BaseException) -> str:
    """The driver's first message line (SQLAlchemy appends the statement and its parameters)."""
    original = _driver_error(exc)
    lines = str(original).strip().splitlines()
    return lines[0].strip() if lines else type(original).__name__


def _sqlite_fault(exc: BaseException, original: BaseException) -> Fault | None:
    code = getattr(original, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    message = str(original).lower()
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED) or (
        primary is None and ("database is locked" in message or "database is busy" in message
                             or "database table is locked" in message)
    ):
        return Fault("transient", "database is locked by another connection", exc)
    if primary == _SQLITE_FULL or "database or disk is full" in message:
        return Fault("storage", "database or disk is full", exc, disk_full=True)
    if primary == _SQLITE_READONLY or "readonly database" in message:
        return Fault("storage", "the database file or its folder is read-only", exc,
                     read_only=True)
    if primary == _SQLITE_IOERR or "disk i/o error" in message:
        return Fault("storage", f"I/O error ({first_line(original)})", exc)
    # (SQLITE_NOTADB, "file is not a database", is left alone: --ledger named another file,
    # which is bad input, refused while opening)
    if primary == _SQLITE_CORRUPT or "disk image is malformed" in message:
        return Fault("storage", f"the ledger file is damaged ({first_line(original)})", exc,
                     corrupt=True)
    if primary == _SQLITE_CANTOPEN:
        return Fault("storage", "cannot open the database file (missing folder, permissions, "
                     "or a read-only file system)", exc, read_only=True)
    return None


_REFUSALS = {
    "database": "the server refused the connection: the database does not exist",
    "role": "the server refused the connection: the role (user) does not exist",
    "password": "the server refused the connection: password authentication failed",
    "permission": "the server refused the connection: the role may not connect to the database",
}


def _postgres_fault(exc: BaseException, original: BaseException) -> Fault | None:
    sqlstate = getattr(original, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        if sqlstate in _PG_STORAGE:
            return Fault("storage", _PG_STORAGE[sqlstate], exc, disk_full=sqlstate == "53100",
                         read_only=sqlstate == "25006")
        if sqlstate in _PG_TRANSIENT:
            return Fault("transient", _PG_TRANSIENT[sqlstate], exc,
                         connection_lost=sqlstate in _PG_CONNECTION_LOST)
        if sqlstate.startswith("08"):
            return Fault("transient", f"connection lost ({first_line(original)})", exc,
                         connection_lost=True)
        return None
    # No SQLSTATE: libpq's own connection errors (refused, closed, server gone away).
    names = {cls.__name__ for cls in type(original).__mro__}
    if "OperationalError" in names:
        message = str(original)
        for pattern, refused in _PG_REFUSED:
            if pattern.search(message):
                return Fault("refused", _REFUSALS[refused], exc, refused=refused)
    if names & {"OperationalError", "InterfaceError"}:
        return Fault("transient", f"connection lost ({first_line(original)})", exc,
                     connection_lost=True)
    return None


def classify(exc: BaseException) -> Fault | None:
    """Whether ``exc`` is a transient or a storage fault; None for anything else."""
    exc = root_failure(exc)
    original = _driver_error(exc)
    if isinstance(original, sqlite3.Error) or hasattr(original, "sqlite_errorcode"):
        return _sqlite_fault(exc, original)
    if type(original).__module__.startswith("psycopg"):
        found = _postgres_fault(exc, original)
        if found is not None:
            return found
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return Fault("transient", f"connection lost ({first_line(exc)})", exc,
                     connection_lost=True)
    if isinstance(exc, sa_exc.DisconnectionError):
        return Fault("transient", "connection lost", exc, connection_lost=True)
    if isinstance(exc, sa_exc.TimeoutError):
        return Fault("transient", "no free connection in the pool", exc)
    return None


def refusal_advice(fault: Fault, *, host: str, port: int | None, database: str,
                   user: str) -> str:
    """What to do about a PostgreSQL server refusing the connection, naming the database and
    user (never the password)."""
    where = f"-h {host or '127.0.0.1'}" + (f" -p {port}" if port else "")
    if fault.refused == "database":
        return (f"create database {database} (`createdb {where} -U {user} {database}` as a "
                f"role that may create databases, or CREATE DATABASE {database}), or point "
                "--ledger (or $TWICE_LEDGER) at a database that exists")
    if fault.refused == "role":
        return (f"create role {user} on the server (CREATE ROLE {user} LOGIN PASSWORD ...), "
                "or connect as a user that exists")
    if fault.refused == "permission":
        return f"grant role {user} CONNECT on database {database}, or connect as another user"
    return (f"check the password of user {user} for database {database} (in PGPASSWORD, "
            "~/.pgpass or the URL); twice never prints it")


class Backoff:
    """Capped exponential delays with jitter (the caller keeps the total time budget)."""

    def __init__(self, first: float = FIRST_DELAY_SECONDS, cap: float = MAX_DELAY_SECONDS) -> None:
        self._next = first
        self._cap = cap

    def delay(self) -> float:
        """The next pause: between half and all of the current step, which then doubles."""
        step = self._next
        self._next = min(self._next * 2, self._cap)
        return random.uniform(step / 2, step)


def advice(fault: Fault, *, dialect: str, path: str | None) -> str:
    """What the operator can do about ``fault`` (:func:`refusal_advice` for a refusal)."""
    if fault.disk_full:
        if dialect == "postgresql":
            return ("ask the database administrator to free space on the PostgreSQL server; "
                    "nothing of this write was recorded, the ledger is intact")
        where = f"the volume holding {path}" if path else "the ledger's volume"
        return (f"free space on {where} (check with `df -h`), then run the command again; "
                "nothing of this write was recorded, the ledger is intact")
    if fault.read_only:
        if dialect == "postgresql":
            return "point --ledger at the primary server, or make the database writable"
        return ("the ledger is read-only here (read-only mount, or no write permission on the "
                "file or its folder, which must hold the -wal and -shm files): reading it still "
                "works; to record, copy it to writable storage or fix the mount/permissions")
    if fault.corrupt:
        where = path or "the ledger file"
        return (f"stop every twice process using {where} and restore it from a backup, or "
                f"salvage it (`sqlite3 {where} .recover`) into a new file; twice records "
                "nothing in a damaged ledger")
    if fault.kind == "storage":
        return "check the storage and the database server's log; retrying will not help"
    if dialect == "postgresql":
        return ("check that the PostgreSQL server is up and reachable (e.g. `pg_isready`), "
                "then run the command again")
    return ("another process holds the ledger's write lock (a long transaction, a stopped "
            "process, or a tool such as sqlite3 with the file open): find it with `fuser` or "
            "`lsof` on the file and let it finish, then run the command again."
            + holders_advice(path))
