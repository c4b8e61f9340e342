"""Connections and transactions of one ledger, and the retrying of transient faults.

Every store of the ledger reads and writes through ``Session.read()`` / ``Session.write()``:
each opens its own short transaction, or joins the thread's ``transaction()`` or
``snapshot()`` when one is open, so a public ``Ledger`` method that writes several tables
still commits them at once. ``retrying`` runs a whole transaction again on a transient fault
(see ``twice.ledger.store`` for the rules); storage faults and exhausted retries become typed
``LedgerError``\\ s naming the ledger, with the password scrubbed from what the driver said.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Engine
from sqlalchemy.engine import Connection, RootTransaction

from twice.core.secrets import redact_url
from twice.ledger.checks import aware
from twice.ledger.engine import begin
from twice.ledger.errors import (
    LedgerCommitUnknownError,
    LedgerError,
    LedgerStorageError,
    LedgerUnavailableError,
)
from twice.ledger.faults import (
    DEFAULT_RETRY_SECONDS,
    Backoff,
    Fault,
    advice,
    classify,
    first_line,
    mark_phase,
    phase_of,
    refusal_advice,
    root_failure,
)

Clock = Callable[[], datetime]
T = TypeVar("T")


def system_clock() -> datetime:
    return datetime.now(UTC)


def transaction_memo(conn: Connection, name: str, empty: Callable[[], Any]) -> Any:
    """What this connection's current transaction keeps under ``name``: what a store read or
    wrote earlier in the same transaction and need not read again (a pooled connection keeps
    ``info`` across transactions, so the memo is tied to the transaction object; without a
    transaction, a fresh one that is not kept)."""
    transaction = conn.get_transaction()
    if transaction is None:
        return empty()
    kept = conn.info.get(name)
    if kept is None or kept[0] is not transaction:
        kept = (transaction, empty())
        conn.info[name] = kept
    return kept[1]


class Session:
    """The engine, clock and per-thread transaction state of one open ledger."""

    def __init__(
        self,
        engine: Engine,
        *,
        label: str,
        clock: Clock,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        read_only: str | None = None,
        path: str | None = None,
    ) -> None:
        self.engine = engine
        self.label = label
        self.clock = clock
        self.retry_seconds = retry_seconds
        self.read_only = read_only  # why the ledger is read-only; None when writable
        self.path = path
        self._file: tuple[int, int] | None = None  # (device, inode) of the file opened
        self.password: str | None = None
        self._local = threading.local()
        self._closed = False

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def now(self) -> datetime:
        return aware(self.clock(), "clock()")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.dispose()

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """See ``Ledger.transaction``."""
        with self._block("transaction()", read_only=False):
            yield

    def atomic(self, fn: Callable[[], T], *, what: str) -> T:
        """See ``Ledger.atomic``."""
        if self.current() is not None:
            return fn()

        def once() -> T:
            with self.transaction():
                return fn()

        return self.retrying(once, what=what)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """See ``Ledger.snapshot``."""
        with self._block("snapshot()", read_only=True,
                         note="its reads were interrupted; run them again"):
            yield

    @contextmanager
    def _block(self, what: str, *, read_only: bool, **note: str) -> Iterator[None]:
        """One transaction for the caller's block, which the thread's reads and writes join;
        inside another block it joins that one. Starting it is retried, faults in the block
        become typed errors (``typed``)."""
        if self.current() is not None:
            yield
            return
        self.check_open()
        if not read_only:
            self.check_writable(what)
        isolation = "REPEATABLE READ" if read_only and self.dialect == "postgresql" else None
        with self._translated(what, **note), self.scope(
            read_only=read_only, isolation=isolation, retry_start=True, what=what
        ) as conn, self._joined(conn, read_only=read_only):
            yield

    @contextmanager
    def _joined(self, conn: Connection, *, read_only: bool) -> Iterator[None]:
        """Make ``conn`` the thread's current transaction for the block."""
        self._local.conn = conn
        self._local.read_only = read_only
        try:
            yield
        finally:
            self._local.conn = None
            self._local.read_only = False

    @contextmanager
    def _translated(self, what: str, **note: str) -> Iterator[None]:
        """Faults in a block the ledger cannot run again become typed errors (outside a retry
        loop, which translates them itself)."""
        translate = not self.in_retry()
        try:
            yield
        except Exception as exc:
            typed = self.typed(exc, what=what, **note) if translate else None
            if typed is None:
                raise
            raise typed from None

    def current(self) -> Connection | None:
        return cast(Connection | None, getattr(self._local, "conn", None))

    def check_open(self) -> None:
        if self._closed:
            raise LedgerError(f"ledger {self.label} is closed")

    def check_writable(self, what: str) -> None:
        if self.read_only is not None:
            raise LedgerStorageError(
                f"ledger {self.label} is read-only ({self.read_only}): {what} cannot be "
                "recorded in it. To record, open it where it can be written (a writable copy, "
                "or fix the mount or permissions); reading it works as it is"
            )

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A connection to write with: the thread's transaction, or a new one for the block."""
        current = self.current()
        if current is not None:
            if getattr(self._local, "read_only", False):
                raise LedgerError("cannot write to the ledger inside a read-only snapshot()")
            yield current
            return
        self.check_open()
        self.check_writable("a write")
        with self.scope(read_only=False) as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection to read with: the thread's transaction, or a read-only one."""
        current = self.current()
        if current is not None:
            yield current
            return
        self.check_open()
        with self.scope(read_only=True) as conn:
            yield conn

    def _start(
        self, *, read_only: bool, isolation: str | None = None
    ) -> tuple[Connection, RootTransaction]:
        """A connection with its transaction begun (SQLite: BEGIN IMMEDIATE for writes).

        A read on PostgreSQL with no isolation asked for (``read()``, not ``snapshot()``) runs
        in autocommit when the server's default isolation is READ COMMITTED (PostgreSQL's
        own default), which these reads had: every statement then takes its own snapshot
        anyway, so a read-only transaction adds nothing but its BEGIN and COMMIT, a round trip
        each (issue 38). A consistent view of several statements is ``snapshot()``'s."""
        try:
            conn = self.engine.connect()
        except BaseException as exc:
            mark_phase(exc, "connect")
            raise
        try:
            if not read_only:
                self._check_same_file()
            if read_only and isolation is None and self.dialect == "postgresql" and \
                    self.engine.dialect.default_isolation_level == "READ COMMITTED":
                isolation = "AUTOCOMMIT"
            if isolation is not None:
                conn.execution_options(isolation_level=isolation)
            # a read-only ledger's SQLite connections cannot take the write lock
            return conn, begin(conn, read_only=read_only or self.read_only is not None)
        except BaseException:
            _close_quietly(conn)
            raise

    def _check_same_file(self) -> None:
        """A SQLite ledger's path still names the file this ledger opened: one deleted or
        replaced while in use would take every later write into a file nobody will read
        again (the open connection keeps writing to it), and the run would say "all
        recorded". ``LedgerStorageError`` instead, before anything is written."""
        if self.path is None:
            return
        try:
            found = os.stat(self.path)
            now: tuple[int, int] | None = (found.st_dev, found.st_ino)
        except OSError:
            now = None
        if self._file is None:
            self._file = now
            return
        if now != self._file:
            raise LedgerStorageError(
                f"ledger {self.label}: the file {self.path} was "
                f"{'deleted' if now is None else 'replaced'} while this process used it, so "
                "nothing more is recorded (what it recorded since is in no file you can read). "
                "What to do: stop every twice process using it, put back the right file (or "
                "keep the new one), and run again: the outcomes of owned writes it lost are "
                "settled from the destinations' commit records"
            )

    @contextmanager
    def scope(
        self, *, read_only: bool, isolation: str | None = None, retry_start: bool = False,
        what: str = "",
    ) -> Iterator[Connection]:
        """One transaction on its own connection: committed if the block returns, rolled back
        if it raises. A rollback that fails (SQLite has often rolled back by itself after a
        disk-full error) never replaces the error that caused it; a failed commit is marked,
        since on PostgreSQL a connection lost while committing leaves the outcome unknown."""
        if retry_start:
            conn, trans = self.retrying(
                lambda: self._start(read_only=read_only, isolation=isolation), what=what
            )
        else:
            conn, trans = self._start(read_only=read_only, isolation=isolation)
        try:
            try:
                yield conn
            except BaseException:
                _rollback_quietly(trans)
                raise
            try:
                trans.commit()
            except BaseException as exc:
                if not read_only:  # a read recorded nothing: its lost COMMIT is not ambiguous
                    mark_phase(exc, "commit")
                _rollback_quietly(trans)
                raise
            if not read_only:
                self._local.commits = self._commits() + 1
        finally:
            _close_quietly(conn)

    # -- retrying transient faults ------------------------------------------------------------

    def _commits(self) -> int:
        return int(getattr(self._local, "commits", 0))

    def in_retry(self) -> bool:
        return bool(getattr(self._local, "retrying", False))

    def retrying(self, fn: Callable[[], T], *, what: str, opening: bool = False) -> T:
        """``fn()``, run again on transient faults with capped exponential backoff and jitter
        for up to ``retry_seconds``; faults become ``LedgerUnavailableError`` or
        ``LedgerStorageError``, other errors pass unchanged.

        Not retried: a PostgreSQL connection lost while committing (the commit may have
        happened), a fault after ``fn`` already committed a transaction of its own (running it
        again would record that twice), and, when ``opening``, a PostgreSQL server that cannot
        be reached at all (a wrong host or port should not take a minute to report). Inside
        another retry loop it runs once: the outermost loop retries.
        """
        if self.in_retry():
            return fn()
        started = time.monotonic()
        backoff = Backoff()
        tries = 0
        self._local.retrying = True
        try:
            while True:
                tries += 1
                commits = self._commits()
                try:
                    return fn()
                except Exception as exc:
                    fault = classify(exc)
                    if fault is None:
                        raise
                    phase = phase_of(exc) or phase_of(fault.original)
                    if fault.kind == "refused":
                        raise self._refused_error(fault, what, opening=opening) from None
                    if fault.kind == "storage":
                        raise self._storage_error(fault, what, opening=opening) from None
                    if phase == "commit" and fault.connection_lost:
                        raise self._ambiguous_error(fault, what) from None
                    if self._commits() != commits:
                        raise self._unavailable_error(
                            fault, what, tries, time.monotonic() - started,
                            note="part of it was already committed, so it was not run again; "
                            "check what was recorded before repeating it",
                        ) from None
                    if opening and phase == "connect" and fault.connection_lost:
                        raise self._unavailable_error(fault, what, tries, 0.0,
                                                      opening=True) from None
                    elapsed = time.monotonic() - started
                    left = self.retry_seconds - elapsed
                    if left <= 0:
                        raise self._unavailable_error(fault, what, tries, elapsed,
                                                      opening=opening) from None
                    time.sleep(min(backoff.delay(), left))  # the last try at the deadline
        finally:
            self._local.retrying = False

    def typed(
        self, exc: Exception, *, what: str,
        note: str = "nothing in the block was recorded; run it again, or use Ledger.atomic(fn) "
        "to have it retried",
    ) -> LedgerError | None:
        """The typed error for a fault in a block the ledger cannot run again; None if
        ``exc`` is not a transient or storage fault."""
        fault = classify(exc)
        if fault is None:
            return None
        if fault.kind == "refused":
            return self._refused_error(fault, what)
        if fault.kind == "storage":
            return self._storage_error(fault, what)
        if (phase_of(exc) or phase_of(fault.original)) == "commit" and fault.connection_lost:
            return self._ambiguous_error(fault, what)
        return self._unavailable_error(fault, what, 1, 0.0, note=note)

    def scrub(self, text: str) -> str:
        """``text`` with the password masked: in a URL or ``password=`` pair it shows, and
        wherever it stands as a word of its own, except as the database's or user's name (a
        development password equal to the database name, ``twice``, must not hide which
        database the server says does not exist: that name is in the ledger's URL anyway)."""
        text = redact_url(text)
        if not self.password:
            return text
        url = self.engine.url
        if self.password in (url.database, url.username):
            return text
        return re.sub(rf"(?<![\w-]){re.escape(self.password)}(?![\w-])", "***", text)

    def _refused_error(self, fault: Fault, what: str, *, opening: bool = True) -> LedgerError:
        """The server refused the connection (no such database or role, a wrong password):
        not retried, a service that cannot be used (exit 1); names the database and user."""
        url = self.engine.url
        database, user = url.database or "(libpq default)", url.username or "(libpq default)"
        head = f"cannot open ledger {self.label}" if opening else f"ledger {self.label}"
        todo = refusal_advice(fault, host=url.host or "", port=url.port, database=database,
                              user=user)
        return LedgerUnavailableError(
            f"{head}: {fault.cause}{self._driver_says(fault)} (database {database}, user "
            f"{user}, server {url.host or 'local socket'}:{url.port or 5432}) during {what}: "
            f"nothing of it was recorded. What to do: {todo}",
            original=fault.original,
        )

    def _driver_says(self, fault: Fault) -> str:
        said = self.scrub(first_line(root_failure(fault.original)))
        return "" if said.lower() in fault.cause.lower() else f" ({said})"

    def _storage_error(self, fault: Fault, what: str, *, opening: bool = False) -> LedgerError:
        head = f"cannot open ledger {self.label}" if opening else f"ledger {self.label}"
        todo = advice(fault, dialect=self.dialect, path=self.path)
        return LedgerStorageError(
            f"{head}: {fault.cause}{self._driver_says(fault)} during {what}. What to do: {todo}",
            original=fault.original,
        )

    def _unavailable_error(
        self, fault: Fault, what: str, tries: int, elapsed: float, *, opening: bool = False,
        note: str = "nothing of it was recorded",
    ) -> LedgerError:
        head = f"cannot open ledger {self.label}" if opening else (
            f"ledger {self.label} is unavailable"
        )
        if tries > 1:
            gave_up = (f"gave up on {what} after {tries} tries in {elapsed:.1f} s "
                       f"(retry window {self.retry_seconds:g} s)")
        else:
            gave_up = f"during {what}"
        todo = advice(fault, dialect=self.dialect, path=self.path)
        return LedgerUnavailableError(
            f"{head}: {fault.cause}{self._driver_says(fault)}; {gave_up}: {note}. "
            f"What to do: {todo}",
            original=fault.original,
        )

    def _ambiguous_error(self, fault: Fault, what: str) -> LedgerError:
        return LedgerCommitUnknownError(
            f"ledger {self.label}: {fault.cause}{self._driver_says(fault)} while committing "
            f"{what}: it may or may not have been recorded, so it was not run again. Check what "
            "the ledger holds (twice explain UOW_ID) before repeating it",
            original=fault.original,
        )


def _rollback_quietly(trans: RootTransaction) -> None:
    """Roll back without letting a failed rollback hide the error being handled."""
    try:
        trans.rollback()
    except Exception:
        try:
            trans.connection.invalidate()  # its state is unknown: never reuse it
        except Exception:
            pass


def _close_quietly(conn: Connection) -> None:
    try:
        conn.close()
    except Exception:
        pass
