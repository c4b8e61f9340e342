"""The ``Ledger``: durable record of units of work and everything that happened to them.

Every recording method is its own short, committed transaction (a crash right after it
returns loses nothing), unless it runs inside ``with ledger.transaction():``, which groups
several writes into one atomic commit. Query methods return frozen dataclasses from
``twice.ledger.records``. Times omitted by callers come from the ledger's clock (injectable,
so tests and the planner agree on "now"); all times are stored and returned as aware UTC.

Transient faults (the SQLite write lock still held after the busy timeout, a PostgreSQL
connection cut before commit, a serialization failure, a deadlock) do not reach callers: each
public method runs its whole transaction again, with capped exponential backoff and jitter,
for up to ``retry_seconds`` (``Ledger.open``), then raises ``LedgerUnavailableError``. The
methods are re-runnable because everything they write happens inside that one transaction
(values such as "now" and the next attempt number are recomputed on every run). Storage
faults (disk full, read-only) raise ``LedgerStorageError`` at once. A grouped
``with ledger.transaction():`` block cannot be run again by the ledger (the block is the
caller's code): only its start is retried; use ``ledger.atomic(fn)`` to have it all retried.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.engine import URL, Connection, RootTransaction, RowMapping
from sqlalchemy.exc import DBAPIError

from twice.core.outcomes import (
    ERROR_CLASSIFICATIONS,
    FINISH_OUTCOMES,
    AttemptOutcome,
    ErrorClassification,
)
from twice.core.unit import UnitOfWork
from twice.ledger import catalog
from twice.ledger import lease as leasing
from twice.ledger import migrations as schema_steps
from twice.ledger.engine import (
    READ_ONLY_OPTION,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    create_ledger_engine,
    insert_ignore,
    is_in_memory,
    lock_key,
    mask_url,
    read_only_reason,
    resolve_url,
    sqlite_path,
)
from twice.ledger.errors import (
    LedgerError,
    LedgerStorageError,
    LedgerUnavailableError,
    UnknownUnitError,
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
    root_failure,
)
from twice.ledger.journal import (
    append_event,
    decode_detail,
    encode_detail,
    insert_observation,
    observation_from_row,
)
from twice.ledger.migrations import check_readable, migrate, read_version
from twice.ledger.records import (
    DECISIONS,
    GENERATION_STATES,
    OPERATOR_SOURCE_PREFIX,
    RESOLUTION_OUTCOMES,
    RESOLUTION_STATES,
    RESOLVED_ATTEMPT_OUTCOME,
    AttemptRecord,
    DecisionName,
    DecisionRecord,
    ErrorRecord,
    FingerprintDiff,
    FingerprintRecord,
    GenerationState,
    IntermediateEvent,
    IntermediateRecord,
    IntermediateStatus,
    JobGenerationRecord,
    LeaseRecord,
    LeaseResult,
    NonfatalErrorRecord,
    ObservationRecord,
    PoolHolding,
    ResolutionOutcome,
    ResolutionRecord,
    TimelineEvent,
    UnitRecord,
    operator_source,
    resolution_outcome,
)
from twice.ledger.schema import (
    attempts,
    decisions,
    errors,
    events,
    fingerprints,
    job_generations,
    nonfatal_errors,
    observations,
    units,
)

Clock = Callable[[], datetime]
T = TypeVar("T")

# Which generation states may follow which: late evidence may show a job confirmed failed
# (e.g. after jobs.cancel) did finish, never the other way round.
_GENERATION_TRANSITIONS: dict[str, frozenset[str]] = {
    "active": frozenset({"active", "confirmed-failed", "succeeded"}),
    "confirmed-failed": frozenset({"confirmed-failed", "succeeded"}),
    "succeeded": frozenset({"succeeded"}),
}
_TERMINAL_OUTCOMES = frozenset({"succeeded", "failed-transient", "failed-permanent"})
#: Attempts an operator may resolve: twice could not settle how they ended.
_RESOLVABLE_OUTCOMES = frozenset({"unknown", "running"})
#: Longest operator name: ``operator:<name>`` must fit the observation's source column.
_MAX_OPERATOR_NAME = 150


def _system_clock() -> datetime:
    return datetime.now(UTC)


def _text(value: object, name: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty):
        raise LedgerError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _count(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LedgerError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _aware(value: object, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise LedgerError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise LedgerError(f"{name} {value.isoformat()} must be timezone-aware")
    return value.astimezone(UTC)


def _unit_from_row(row: RowMapping) -> UnitRecord:
    return UnitRecord(
        uow_id=row["uow_id"],
        pipeline=row["pipeline"],
        task=row["task"],
        interval_start=datetime.fromisoformat(row["interval_start"]),
        interval_end=datetime.fromisoformat(row["interval_end"]),
        input_partition=row["input_partition"],
        input_version=row["input_version"],
        transform_version=row["transform_version"],
        destination=row["destination"],
        created_at=row["created_at"],
    )


def _locked_attempt(conn: Connection, uow_id: str, number: int) -> AttemptRecord:
    """Attempt ``number`` of ``uow_id``, its row locked for the rest of the transaction."""
    row = (
        conn.execute(
            select(attempts)
            .where(attempts.c.uow_id == uow_id, attempts.c.number == number)
            .with_for_update(key_share=True)
        )
        .mappings()
        .first()
    )
    if row is None:
        raise LedgerError(f"unit of work {uow_id} has no attempt {number}")
    return _attempt_from_row(row)


def _attempt_from_row(row: RowMapping) -> AttemptRecord:
    return AttemptRecord(
        uow_id=row["uow_id"],
        number=row["number"],
        holder=row["holder"],
        started_at=row["started_at"],
        outcome=row["outcome"],
        generation=row["generation"],
        job_id=row["job_id"],
        finished_at=row["finished_at"],
    )


def _error_from_row(row: RowMapping) -> ErrorRecord:
    return ErrorRecord(
        seq=row["seq"],
        uow_id=row["uow_id"],
        error_class=row["error_class"],
        message=row["message"],
        classification=row["classification"],
        recorded_at=row["recorded_at"],
        attempt=row["attempt"],
        detail=decode_detail(row["detail"]),
    )


def _nonfatal_from_row(row: RowMapping) -> NonfatalErrorRecord:
    return NonfatalErrorRecord(
        seq=row["seq"],
        uow_id=row["uow_id"],
        message=row["message"],
        count=row["count"],
        recorded_at=row["recorded_at"],
        attempt=row["attempt"],
        detail=decode_detail(row["detail"]),
    )


def _generation_from_row(row: RowMapping) -> JobGenerationRecord:
    return JobGenerationRecord(
        uow_id=row["uow_id"],
        generation=row["generation"],
        job_id=row["job_id"],
        state=row["state"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _fingerprint_from_row(row: RowMapping) -> FingerprintRecord:
    columns = row["columns"]
    return FingerprintRecord(
        seq=row["seq"],
        destination=row["destination"],
        partition=row["partition"],
        version=row["version"],
        row_count=row["row_count"],
        checksum=row["checksum"],
        recorded_at=row["recorded_at"],
        uow_id=row["uow_id"],
        attempt=row["attempt"],
        columns=None if columns is None else tuple(decode_detail(columns)["columns"]),
        algorithm=row["algorithm"],
        schema=row["schema_signature"],
    )


def _decision_from_row(row: RowMapping) -> DecisionRecord:
    return DecisionRecord(
        seq=row["seq"],
        uow_id=row["uow_id"],
        decision=row["decision"],
        reason=row["reason"],
        as_of=row["as_of"],
        recorded_at=row["recorded_at"],
        attempt=row["attempt"],
        not_started=bool(row["not_started"]),
        detail=decode_detail(row["detail"]),
    )


class Ledger:
    """Durable record of units of work, attempts, evidence, decisions, leases and pool slots.

    Open with :meth:`Ledger.open`; one instance may be shared by threads (each thread has its
    own ``transaction()``), processes open their own.
    """

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
        self._engine = engine
        self._label = label
        self._clock = clock
        self._retry_seconds = retry_seconds
        self._read_only = read_only  # why the ledger is read-only; None when writable
        self._path = path
        self._password: str | None = None
        self._local = threading.local()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        durable: bool = False,
        read_only: bool | None = None,
        busy_timeout: float | None = None,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> Ledger:
        """Open (creating and migrating if needed) the ledger at ``url``.

        ``url``: ``sqlite:///path.db``, a plain file path, or ``postgresql://...``; None means
        ``$TWICE_LEDGER`` or ``twice-ledger.db`` in the working directory. ``clock`` returns
        the aware "now" used whenever a caller omits a time (default: the system clock, UTC).
        ``durable=True`` refuses an in-memory SQLite database: a command that executes work
        must not record its evidence where it vanishes when the process exits; it also
        refuses a ledger that cannot be written here.

        ``read_only``: True opens without writing anything (no migration, no switch to WAL;
        SQLite ``mode=ro``, or ``immutable=1`` on a read-only file system where SQLite cannot
        create its ``-shm`` file); every write then raises ``LedgerStorageError``. None (the
        default) opens an existing SQLite file read-only when it cannot be written here (a
        read-only mount, no write permission on the file or its folder), so reports still work.

        ``busy_timeout``: seconds a SQLite statement waits for another connection's lock
        (default 30). ``retry_seconds``: how long a write keeps retrying transient faults
        before ``LedgerUnavailableError`` (default 60; 0 never retries).
        """
        resolved = resolve_url(url)
        label = mask_url(resolved)
        if durable and is_in_memory(resolved):
            raise LedgerError(
                f"ledger {label} is in memory: the evidence of this run would vanish when it "
                "exits; give a file path or a PostgreSQL URL"
            )
        if isinstance(retry_seconds, bool) or not isinstance(retry_seconds, int | float) or (
            not retry_seconds >= 0
        ):
            raise LedgerError(f"retry_seconds must be a number >= 0, got {retry_seconds!r}")
        busy = SQLITE_BUSY_TIMEOUT_SECONDS if busy_timeout is None else busy_timeout
        if isinstance(busy, bool) or not isinstance(busy, int | float) or not busy > 0:
            raise LedgerError(f"busy_timeout must be a number of seconds > 0, got {busy!r}")
        path = sqlite_path(resolved)
        reason = None
        if read_only:
            if durable:
                raise LedgerError(
                    f"ledger {label}: durable=True records evidence, read_only=True cannot"
                )
            reason = "opened read-only"
        elif read_only is None:
            reason = read_only_reason(resolved)
        if reason is not None and durable:
            raise LedgerStorageError(
                f"ledger {label} cannot be written here: {reason}. This command records "
                "evidence, so it needs a writable ledger: copy it to writable storage or fix "
                "the mount or permissions (reading it works: twice status, explain, report)"
            )
        options = {"clock": clock or _system_clock, "retry_seconds": float(retry_seconds),
                   "busy": float(busy), "path": None if path is None else str(path)}
        if reason is not None:
            return cls._open_read_only(resolved, label, reason, **options)
        ledger = cls._create(resolved, label, read_only=None, **options)
        try:
            ledger._retrying(ledger._migrate, what="opening the ledger", opening=True)
        except LedgerStorageError as exc:
            ledger._engine.dispose()
            fault = None if exc.original is None else classify(exc.original)
            fallback = (read_only is None and fault is not None and fault.read_only
                        and path is not None and path.is_file())
            if not fallback:
                raise
            return cls._open_read_only(resolved, label, fault.cause if fault else "read-only",
                                       **options)
        except DBAPIError as exc:
            ledger._engine.dispose()
            raise LedgerError(f"cannot open ledger {label}: {_reason(exc, resolved)}") from None
        except BaseException:
            ledger._engine.dispose()
            raise
        return ledger

    @classmethod
    def _create(
        cls, resolved: URL, label: str, *, read_only: str | None, clock: Clock,
        retry_seconds: float, busy: float, path: str | None, immutable: bool = False,
    ) -> Ledger:
        engine = create_ledger_engine(resolved, busy_timeout=busy,
                                      read_only=read_only is not None, immutable=immutable)
        ledger = cls(engine, label=label, clock=clock, retry_seconds=retry_seconds,
                     read_only=read_only, path=path)
        ledger._password = None if resolved.password is None else str(resolved.password)
        return ledger

    @classmethod
    def _open_read_only(
        cls, resolved: URL, label: str, reason: str, *, clock: Clock, retry_seconds: float,
        busy: float, path: str | None,
    ) -> Ledger:
        """Open without writing; SQLite falls back to ``immutable=1`` when ``mode=ro`` cannot
        open a WAL ledger (its ``-shm`` file cannot be created on a read-only file system)."""
        tries = [False, True] if path is not None else [False]
        for immutable in tries:
            why = reason + (" (immutable: changes by others are not seen)" if immutable else "")
            ledger = cls._create(resolved, label, read_only=why, clock=clock,
                                 retry_seconds=retry_seconds, busy=busy, path=path,
                                 immutable=immutable)
            try:
                ledger._retrying(ledger._check_schema, what="opening the ledger read-only",
                                 opening=True)
            except LedgerStorageError:
                ledger._engine.dispose()
                if immutable or path is None:
                    raise
                continue
            except DBAPIError as exc:
                ledger._engine.dispose()
                raise LedgerError(f"cannot open ledger {label}: {_reason(exc, resolved)}") from None
            except BaseException:
                ledger._engine.dispose()
                raise
            return ledger
        raise AssertionError("unreachable")  # pragma: no cover

    def _migrate(self) -> None:
        """Migrate if needed; an up-to-date ledger is checked without taking the write lock
        (opening must not queue behind another process's long write transaction)."""
        with self._scope(read_only=True) as conn:
            if read_version(conn) == schema_steps.LATEST_VERSION:
                return
        with self._scope(read_only=False) as conn:
            migrate(conn, now=self.now(), label=self._label)

    def _check_schema(self) -> None:
        with self._scope(read_only=True) as conn:
            check_readable(conn, label=self._label)

    @property
    def url(self) -> str:
        """The ledger's URL with any password masked."""
        return self._label

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    @property
    def read_only(self) -> str | None:
        """Why the ledger was opened read-only (every write is refused); None when writable."""
        return self._read_only

    @property
    def schema_version(self) -> int:
        with self._read() as conn:
            return read_version(conn)

    def now(self) -> datetime:
        """The ledger clock's current time, aware UTC."""
        return _aware(self._clock(), "clock()")

    def close(self) -> None:
        """Dispose of the engine's connections; the ledger cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self._label!r})"

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Ledger]:
        """Group the writes in the block into one atomic commit (rolled back on exception).

        Nested blocks join the outer one. On SQLite the block holds the database write lock,
        so keep it short and free of remote calls. Starting the transaction is retried like
        any write; a transient fault inside the block is raised as ``LedgerUnavailableError``
        (nothing in the block was recorded), since the ledger cannot run the caller's block
        again: ``atomic(fn)`` can.
        """
        if self._current() is not None:
            yield self
            return
        self._check_open()
        self._check_writable("transaction()")
        translate = not self._in_retry()
        try:
            with self._scope(read_only=False, retry_start=True, what="transaction()") as conn:
                self._local.conn = conn
                try:
                    yield self
                finally:
                    self._local.conn = None
        except Exception as exc:
            typed = self._typed(exc, what="transaction()") if translate else None
            if typed is None:
                raise
            raise typed from None

    def atomic(self, fn: Callable[[Ledger], T]) -> T:
        """``fn(ledger)`` inside one ``transaction()``, run again whole on a transient fault.

        ``fn`` must be re-runnable: only ledger writes as side effects, everything it records
        computed inside it. Inside another transaction it joins that one and is not retried.
        """
        if self._current() is not None:
            return fn(self)

        def once() -> T:
            with self.transaction():
                return fn(self)

        return self._retrying(once, what=f"atomic({getattr(fn, '__name__', 'fn')})")

    @contextmanager
    def snapshot(self) -> Iterator[Ledger]:
        """Read in the block from one read-only transaction: a consistent view of the ledger
        (REPEATABLE READ on PostgreSQL, one WAL read snapshot on SQLite) and one BEGIN/COMMIT
        for all the reads instead of one per read. Writing inside it is refused.

        Inside a ``transaction()`` it joins that transaction instead.
        """
        if self._current() is not None:
            yield self
            return
        self._check_open()
        isolation = "REPEATABLE READ" if self.dialect == "postgresql" else None
        translate = not self._in_retry()
        try:
            with self._scope(read_only=True, isolation=isolation, retry_start=True,
                             what="snapshot()") as conn:
                self._local.conn = conn
                self._local.read_only = True
                try:
                    yield self
                finally:
                    self._local.conn = None
                    self._local.read_only = False
        except Exception as exc:
            typed = (self._typed(exc, what="snapshot()", note="its reads were interrupted; "
                                 "run them again") if translate else None)
            if typed is None:
                raise
            raise typed from None

    def _current(self) -> Connection | None:
        return cast(Connection | None, getattr(self._local, "conn", None))

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerError(f"ledger {self._label} is closed")

    def _check_writable(self, what: str) -> None:
        if self._read_only is not None:
            raise LedgerStorageError(
                f"ledger {self._label} is read-only ({self._read_only}): {what} cannot be "
                "recorded in it. To record, open it where it can be written (a writable copy, "
                "or fix the mount or permissions); reading it works as it is"
            )

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        current = self._current()
        if current is not None:
            if getattr(self._local, "read_only", False):
                raise LedgerError("cannot write to the ledger inside a read-only snapshot()")
            yield current
            return
        self._check_open()
        self._check_writable("a write")
        with self._scope(read_only=False) as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        current = self._current()
        if current is not None:
            yield current
            return
        self._check_open()
        with self._scope(read_only=True) as conn:
            yield conn

    def _start(
        self, *, read_only: bool, isolation: str | None = None
    ) -> tuple[Connection, RootTransaction]:
        """A connection with its transaction begun (SQLite: BEGIN IMMEDIATE for writes)."""
        try:
            conn = self._engine.connect()
        except BaseException as exc:
            mark_phase(exc, "connect")
            raise
        try:
            options: dict[str, Any] = {}
            if read_only:
                options[READ_ONLY_OPTION] = True
            if isolation is not None:
                options["isolation_level"] = isolation
            if options:
                conn.execution_options(**options)
            return conn, conn.begin()
        except BaseException:
            _close_quietly(conn)
            raise

    @contextmanager
    def _scope(
        self, *, read_only: bool, isolation: str | None = None, retry_start: bool = False,
        what: str = "",
    ) -> Iterator[Connection]:
        """One transaction on its own connection: committed if the block returns, rolled back
        if it raises. A rollback that fails (SQLite has often rolled back by itself after a
        disk-full error) never replaces the error that caused it; a failed commit is marked,
        since on PostgreSQL a connection lost while committing leaves the outcome unknown."""
        if retry_start:
            conn, trans = self._retrying(
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

    def _in_retry(self) -> bool:
        return bool(getattr(self._local, "retrying", False))

    def _retrying(self, fn: Callable[[], T], *, what: str, opening: bool = False) -> T:
        """``fn()``, run again on transient faults with capped exponential backoff and jitter
        for up to ``retry_seconds``; faults become ``LedgerUnavailableError`` or
        ``LedgerStorageError``, other errors pass unchanged.

        Not retried: a PostgreSQL connection lost while committing (the commit may have
        happened), a fault after ``fn`` already committed a transaction of its own (running it
        again would record that twice), and, when ``opening``, a PostgreSQL server that cannot
        be reached at all (a wrong host or port should not take a minute to report). Inside
        another retry loop it runs once: the outermost loop retries.
        """
        if self._in_retry():
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
                    left = self._retry_seconds - elapsed
                    if left <= 0:
                        raise self._unavailable_error(fault, what, tries, elapsed,
                                                      opening=opening) from None
                    time.sleep(min(backoff.delay(), left))  # the last try at the deadline
        finally:
            self._local.retrying = False

    def _typed(
        self, exc: Exception, *, what: str,
        note: str = "nothing in the block was recorded; run it again, or use Ledger.atomic(fn) "
        "to have it retried",
    ) -> LedgerError | None:
        """The typed error for a fault in a block the ledger cannot run again; None if
        ``exc`` is not a transient or storage fault."""
        fault = classify(exc)
        if fault is None:
            return None
        if fault.kind == "storage":
            return self._storage_error(fault, what)
        if (phase_of(exc) or phase_of(fault.original)) == "commit" and fault.connection_lost:
            return self._ambiguous_error(fault, what)
        return self._unavailable_error(fault, what, 1, 0.0, note=note)

    def _scrub(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    def _driver_says(self, fault: Fault) -> str:
        said = self._scrub(first_line(root_failure(fault.original)))
        return "" if said.lower() in fault.cause.lower() else f" ({said})"

    def _storage_error(self, fault: Fault, what: str, *, opening: bool = False) -> LedgerError:
        head = f"cannot open ledger {self._label}" if opening else f"ledger {self._label}"
        todo = advice(fault, dialect=self.dialect, path=self._path)
        return LedgerStorageError(
            f"{head}: {fault.cause}{self._driver_says(fault)} during {what}. What to do: {todo}",
            original=fault.original,
        )

    def _unavailable_error(
        self, fault: Fault, what: str, tries: int, elapsed: float, *, opening: bool = False,
        note: str = "nothing of it was recorded",
    ) -> LedgerError:
        head = f"cannot open ledger {self._label}" if opening else (
            f"ledger {self._label} is unavailable"
        )
        if tries > 1:
            gave_up = (f"gave up on {what} after {tries} tries in {elapsed:.1f} s "
                       f"(retry window {self._retry_seconds:g} s)")
        else:
            gave_up = f"during {what}"
        todo = advice(fault, dialect=self.dialect, path=self._path)
        return LedgerUnavailableError(
            f"{head}: {fault.cause}{self._driver_says(fault)}; {gave_up}: {note}. "
            f"What to do: {todo}",
            original=fault.original,
        )

    def _ambiguous_error(self, fault: Fault, what: str) -> LedgerError:
        return LedgerUnavailableError(
            f"ledger {self._label}: {fault.cause}{self._driver_says(fault)} while committing "
            f"{what}: it may or may not have been recorded, so it was not run again. Check what "
            "the ledger holds (twice explain UOW_ID) before repeating it",
            original=fault.original,
        )

    def _past(self, value: datetime | None, name: str, now: datetime) -> datetime:
        """A caller-supplied event time: defaults to now; the future is invalid input."""
        if value is None:
            return now
        instant = _aware(value, name)
        if instant > now:
            raise LedgerError(
                f"{name} {instant.isoformat()} is after now ({now.isoformat()}): "
                "evidence cannot come from the future"
            )
        return instant

    # -- units of work ------------------------------------------------------------------------

    def record_unit(self, uow: UnitOfWork) -> UnitRecord:
        """Record a unit of work (idempotent: recording it again returns the stored record)."""
        if not isinstance(uow, UnitOfWork):
            raise LedgerError(f"record_unit needs a UnitOfWork, got {type(uow).__name__}")
        identity = uow.identity()
        uow_id = uow.uow_id
        with self._write() as conn:
            now = self.now()
            values = {
                "uow_id": uow_id,
                **identity,
                "interval_start_utc": uow.interval.start,
                "interval_end_utc": uow.interval.end,
                "created_at": now,
            }
            if insert_ignore(conn, units, values):
                append_event(
                    conn,
                    kind="unit-recorded",
                    at=now,
                    recorded_at=now,
                    summary=f"unit of work recorded: {uow.pipeline}.{uow.task} {uow.interval}",
                    uow_id=uow_id,
                    data=identity,
                )
            record = self._unit(conn, uow_id)
        assert record is not None
        stored = record.to_unit_of_work().identity()
        if stored != identity:
            raise LedgerError(f"unit of work {uow_id} is stored with another identity: {stored}")
        return record

    def unit(self, uow_id: str) -> UnitRecord | None:
        with self._read() as conn:
            return self._unit(conn, uow_id)

    def units(self, *, pipeline: str | None = None, task: str | None = None) -> list[UnitRecord]:
        """All recorded units of work (optionally of one pipeline/task), in interval order."""
        query = select(units)
        if pipeline is not None:
            query = query.where(units.c.pipeline == pipeline)
        if task is not None:
            query = query.where(units.c.task == task)
        query = query.order_by(
            units.c.interval_start_utc, units.c.pipeline, units.c.task, units.c.uow_id
        )
        with self._read() as conn:
            return [_unit_from_row(row) for row in conn.execute(query).mappings()]

    def _unit(self, conn: Connection, uow_id: str, *, lock: bool = False) -> UnitRecord | None:
        query = select(units).where(units.c.uow_id == uow_id)
        if lock:
            query = query.with_for_update(key_share=True)
        row = conn.execute(query).mappings().first()
        return None if row is None else _unit_from_row(row)

    def _require_unit(self, conn: Connection, uow_id: str, *, lock: bool = False) -> UnitRecord:
        """The unit, locked on PostgreSQL when ``lock`` (serialises per-unit numbering)."""
        record = self._unit(conn, _text(uow_id, "uow_id"), lock=lock)
        if record is None:
            raise UnknownUnitError(f"unknown unit of work {uow_id!r}: record_unit() it first")
        return record

    def _require_attempt(self, conn: Connection, uow_id: str, attempt: int | None) -> None:
        if attempt is None:
            return
        _count(attempt, "attempt", minimum=1)
        found = conn.execute(
            select(attempts.c.number).where(
                attempts.c.uow_id == uow_id, attempts.c.number == attempt
            )
        ).first()
        if found is None:
            raise LedgerError(f"unit of work {uow_id} has no attempt {attempt}")

    # -- attempts -----------------------------------------------------------------------------

    def begin_attempt(
        self,
        uow_id: str,
        *,
        holder: str,
        generation: int | None = None,
        job_id: str | None = None,
        started_at: datetime | None = None,
    ) -> AttemptRecord:
        """Record that attempt ``previous max + 1`` started, outcome ``running``.

        Refused while another holder has an unexpired lease on the unit. With a ``generation``
        and no ``job_id`` the generation's recorded (or derived) job id is used.
        """
        holder = _text(holder, "holder")
        with self._write() as conn:
            now = self.now()
            unit = self._require_unit(conn, uow_id, lock=True)
            current = leasing.get_lease(conn, uow_id)
            if current is not None and current.active(now) and current.holder != holder:
                raise LedgerError(
                    f"unit of work {uow_id} is leased by {current.holder} until "
                    f"{current.expires_at.isoformat()}; {holder} may not start an attempt"
                )
            if generation is not None:
                _count(generation, "generation", minimum=1)
                if job_id is None:
                    recorded = conn.execute(
                        select(job_generations.c.job_id).where(
                            job_generations.c.uow_id == uow_id,
                            job_generations.c.generation == generation,
                        )
                    ).scalar()
                    job_id = recorded or unit.to_unit_of_work().job_id(generation)
            if job_id is not None:
                _text(job_id, "job_id")
            started = self._past(started_at, "started_at", now)
            number = self._max_attempt(conn, uow_id) + 1
            summary = f"attempt {number} started by {holder}"
            if generation is not None or job_id is not None:
                summary += f" (generation {generation}, job {job_id})"
            seq = append_event(
                conn,
                kind="attempt-started",
                at=started,
                recorded_at=now,
                summary=summary,
                uow_id=uow_id,
                attempt=number,
                data={"holder": holder, "generation": generation, "job_id": job_id},
            )
            conn.execute(
                insert(attempts).values(
                    uow_id=uow_id,
                    number=number,
                    holder=holder,
                    generation=generation,
                    job_id=job_id,
                    started_at=started,
                    finished_at=None,
                    outcome="running",
                    started_seq=seq,
                )
            )
        return AttemptRecord(
            uow_id=uow_id,
            number=number,
            holder=holder,
            started_at=started,
            outcome="running",
            generation=generation,
            job_id=job_id,
        )

    def finish_attempt(
        self,
        uow_id: str,
        number: int,
        outcome: AttemptOutcome,
        finished_at: datetime | None = None,
    ) -> AttemptRecord:
        """Record how an attempt ended.

        ``running`` and ``unknown`` attempts may be finished (an unknown outcome is resolved
        by later evidence); a succeeded or failed attempt keeps its outcome, and finishing it
        again with the same outcome is a no-op, so a retried call is harmless.
        """
        if outcome not in FINISH_OUTCOMES:
            raise LedgerError(
                f"outcome must be one of {', '.join(FINISH_OUTCOMES)}, got {outcome!r}"
            )
        with self._write() as conn:
            now = self.now()
            current = _locked_attempt(conn, uow_id, number)
            if current.outcome == outcome and current.finished_at is not None:
                return current
            if current.outcome in _TERMINAL_OUTCOMES:
                raise LedgerError(
                    f"attempt {number} of {uow_id} already finished as {current.outcome}; "
                    f"refusing to change it to {outcome}"
                )
            finished = self._past(finished_at, "finished_at", now)
            if finished < current.started_at:
                raise LedgerError(
                    f"finished_at {finished.isoformat()} is before attempt {number} started "
                    f"({current.started_at.isoformat()})"
                )
            seq = append_event(
                conn,
                kind="attempt-finished",
                at=finished,
                recorded_at=now,
                summary=f"attempt {number} finished: {outcome}",
                uow_id=uow_id,
                attempt=number,
                data={"outcome": outcome, "previous_outcome": current.outcome},
            )
            conn.execute(
                update(attempts)
                .where(attempts.c.uow_id == uow_id, attempts.c.number == number)
                .values(outcome=outcome, finished_at=finished, finished_seq=seq)
            )
        return replace(current, outcome=outcome, finished_at=finished)

    def record_attempt_not_started(
        self,
        uow_id: str,
        *,
        reason: str,
        decision: DecisionName = "deadline-infeasible",
        as_of: datetime | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> DecisionRecord:
        """Record that the next attempt was deliberately not started (a decision, no attempt).

        Attempt numbering and counts stay true: the withheld number is in the decision only.
        """
        return self.record_decision(
            uow_id, decision, reason=reason, as_of=as_of, not_started=True, detail=detail
        )

    def attempts(self, uow_id: str) -> list[AttemptRecord]:
        query = select(attempts).where(attempts.c.uow_id == uow_id).order_by(attempts.c.number)
        with self._read() as conn:
            return [_attempt_from_row(row) for row in conn.execute(query).mappings()]

    def attempt(self, uow_id: str, number: int) -> AttemptRecord | None:
        query = select(attempts).where(attempts.c.uow_id == uow_id, attempts.c.number == number)
        with self._read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _attempt_from_row(row)

    def latest_attempt(self, uow_id: str) -> AttemptRecord | None:
        query = (
            select(attempts)
            .where(attempts.c.uow_id == uow_id)
            .order_by(attempts.c.number.desc())
            .limit(1)
        )
        with self._read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _attempt_from_row(row)

    @staticmethod
    def _max_attempt(conn: Connection, uow_id: str) -> int:
        value = conn.execute(
            select(func.max(attempts.c.number)).where(attempts.c.uow_id == uow_id)
        ).scalar()
        return int(value or 0)

    # -- operator resolutions -----------------------------------------------------------------

    def record_resolution(
        self,
        uow_id: str,
        *,
        attempt: int | None = None,
        outcome: ResolutionOutcome,
        note: str,
        operator: str,
    ) -> ResolutionRecord:
        """Record an operator's resolution of an attempt whose outcome twice could not settle.

        The attempt (default: the latest, which must be ``unknown`` or ``running``) is closed
        as ``succeeded`` (``outcome="succeeded"``: its effect happened) or ``failed-transient``
        (``outcome="failed"``: it did not, so a later run may try again), and an observation
        ``resolved-succeeded`` / ``resolved-failed`` from ``operator:<operator>`` keeps the
        note: an assertion by a person, which reports show as such, never as verified. All in
        one transaction. Resolving an attempt again the same way returns the recorded
        resolution (``repeated=True``); any other finished attempt is refused, and so is a
        running one whose holder still holds the unit's lease (it may still finish).
        """
        if outcome not in RESOLUTION_OUTCOMES:
            raise LedgerError(
                f"outcome must be one of {', '.join(RESOLUTION_OUTCOMES)}, got {outcome!r}"
            )
        note = _text(note.strip() if isinstance(note, str) else note, "note")
        operator = _operator_name(operator)
        if attempt is not None:
            _count(attempt, "attempt", minimum=1)
        state = RESOLUTION_STATES[outcome]
        closed_as = RESOLVED_ATTEMPT_OUTCOME[outcome]
        source = operator_source(operator)
        with self._write() as conn:
            now = self.now()
            self._require_unit(conn, uow_id, lock=True)
            number = self._max_attempt(conn, uow_id) if attempt is None else attempt
            if number == 0:
                raise LedgerError(
                    f"unit of work {uow_id} has no attempt to resolve: it never started"
                )
            current = _locked_attempt(conn, uow_id, number)
            if current.outcome not in _RESOLVABLE_OUTCOMES:
                previous = self._resolution_of(conn, uow_id, number)
                if previous is not None and previous.state == state and (
                    current.outcome == closed_as
                ):
                    return _resolution_record(current, previous, repeated=True)
                how = ("resolved by " + previous.source if previous is not None
                       else "recorded by twice")
                raise LedgerError(
                    f"attempt {number} of {uow_id} is {current.outcome} ({how}), not unknown "
                    "or running: only an attempt whose outcome twice could not settle can be "
                    "resolved"
                )
            if current.outcome == "running":
                held = leasing.get_lease(conn, uow_id)
                if held is not None and held.active(now) and held.holder == current.holder:
                    raise LedgerError(
                        f"attempt {number} of {uow_id} is running and {current.holder} holds "
                        f"the unit's lease until {held.expires_at.isoformat()}: it may still "
                        "finish; wait for it to end or for the lease to expire, then resolve it"
                    )
            finished = max(now, current.started_at)
            one_line = " ".join(note.split())
            seq = append_event(
                conn,
                kind="attempt-finished",
                at=finished,
                recorded_at=now,
                summary=(f"attempt {number} resolved as {closed_as}: asserted by an operator "
                         f"({operator}), not observed by twice: {one_line}"),
                uow_id=uow_id,
                attempt=number,
                data={"outcome": closed_as, "previous_outcome": current.outcome,
                      "resolved_by": source, "operator": operator, "note": note},
            )
            conn.execute(
                update(attempts)
                .where(attempts.c.uow_id == uow_id, attempts.c.number == number)
                .values(outcome=closed_as, finished_at=finished, finished_seq=seq)
            )
            observation = insert_observation(
                conn,
                uow_id=uow_id,
                state=state,
                source=source,
                observed_at=now,
                recorded_at=now,
                attempt=number,
                detail={"note": note, "operator": operator, "outcome": outcome,
                        "attempt_outcome": closed_as, "previous_outcome": current.outcome},
                summary=(f"{state} (attempt {number}): asserted by an operator ({operator}): "
                         f"{one_line}"),
            )
        closed = replace(current, outcome=closed_as, finished_at=finished)
        return _resolution_record(closed, observation, repeated=False)

    def resolutions(self, uow_id: str) -> list[ResolutionRecord]:
        """Operators' resolutions of the unit's attempts, in recording order."""
        query = (
            select(observations)
            .where(
                observations.c.uow_id == uow_id,
                observations.c.source.startswith(OPERATOR_SOURCE_PREFIX, autoescape=True),
                observations.c.state.in_(list(RESOLUTION_STATES.values())),
            )
            .order_by(observations.c.seq)
        )
        with self._read() as conn:
            found = [observation_from_row(row) for row in conn.execute(query).mappings()]
            by_number = {
                row["number"]: _attempt_from_row(row)
                for row in conn.execute(
                    select(attempts).where(attempts.c.uow_id == uow_id)
                ).mappings()
            }
        return [
            _resolution_record(by_number[record.attempt], record, repeated=False)
            for record in found
            if record.attempt in by_number
        ]

    @staticmethod
    def _resolution_of(conn: Connection, uow_id: str, number: int) -> ObservationRecord | None:
        row = (
            conn.execute(
                select(observations)
                .where(
                    observations.c.uow_id == uow_id,
                    observations.c.attempt == number,
                    observations.c.source.startswith(OPERATOR_SOURCE_PREFIX, autoescape=True),
                    observations.c.state.in_(list(RESOLUTION_STATES.values())),
                )
                .order_by(observations.c.seq.desc())
                .limit(1)
            )
            .mappings()
            .first()
        )
        return None if row is None else observation_from_row(row)

    # -- observations -------------------------------------------------------------------------

    def record_observation(
        self,
        uow_id: str,
        state: str,
        *,
        source: str,
        observed_at: datetime | None = None,
        attempt: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> ObservationRecord:
        """Record a status seen by ``source`` at ``observed_at`` (default: now).

        A stale ``observed_at`` is fine (the planner refreshes it); a future one is refused.
        """
        state = _text(state, "state")
        source = _text(source, "source")
        with self._write() as conn:
            now = self.now()
            observed = self._past(observed_at, "observed_at", now)
            self._require_unit(conn, uow_id)
            self._require_attempt(conn, uow_id, attempt)
            return insert_observation(
                conn,
                uow_id=uow_id,
                state=state,
                source=source,
                observed_at=observed,
                recorded_at=now,
                attempt=attempt,
                detail=detail,
            )

    def observations(self, uow_id: str) -> list[ObservationRecord]:
        """All observations, oldest observation time first."""
        query = (
            select(observations)
            .where(observations.c.uow_id == uow_id)
            .order_by(observations.c.observed_at, observations.c.seq)
        )
        with self._read() as conn:
            return [observation_from_row(row) for row in conn.execute(query).mappings()]

    def latest_observation(
        self, uow_id: str, *, source: str | None = None
    ) -> ObservationRecord | None:
        """The freshest evidence: latest ``observed_at`` (a stale one recorded later loses)."""
        query = select(observations).where(observations.c.uow_id == uow_id)
        if source is not None:
            query = query.where(observations.c.source == source)
        query = query.order_by(observations.c.observed_at.desc(), observations.c.seq.desc())
        with self._read() as conn:
            row = conn.execute(query.limit(1)).mappings().first()
        return None if row is None else observation_from_row(row)

    # -- errors -------------------------------------------------------------------------------

    def record_error(
        self,
        uow_id: str,
        *,
        error_class: str,
        message: str,
        classification: ErrorClassification,
        attempt: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> ErrorRecord:
        """Record an error and whether it was classified transient, permanent or unknown."""
        error_class = _text(error_class, "error_class")
        message = _text(message, "message", allow_empty=True)
        if classification not in ERROR_CLASSIFICATIONS:
            raise LedgerError(
                f"classification must be one of {', '.join(ERROR_CLASSIFICATIONS)}, "
                f"got {classification!r}"
            )
        detail_text = encode_detail(detail)
        with self._write() as conn:
            now = self.now()
            self._require_unit(conn, uow_id)
            self._require_attempt(conn, uow_id, attempt)
            seq = append_event(
                conn,
                kind="error",
                at=now,
                recorded_at=now,
                summary=f"{classification} error {error_class}: {message}",
                uow_id=uow_id,
                attempt=attempt,
                data={"error_class": error_class, "classification": classification},
            )
            conn.execute(
                insert(errors).values(
                    seq=seq,
                    uow_id=uow_id,
                    attempt=attempt,
                    error_class=error_class,
                    message=message,
                    classification=classification,
                    recorded_at=now,
                    detail=detail_text,
                )
            )
        return ErrorRecord(
            seq=seq,
            uow_id=uow_id,
            error_class=error_class,
            message=message,
            classification=classification,
            recorded_at=now,
            attempt=attempt,
            detail=decode_detail(detail_text),
        )

    def record_exception(
        self,
        uow_id: str,
        error: BaseException,
        *,
        classification: ErrorClassification,
        attempt: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> ErrorRecord:
        """``record_error`` for a caught exception: its qualified class name and message."""
        cls = type(error)
        name = cls.__qualname__
        if cls.__module__ != "builtins":
            name = f"{cls.__module__}.{name}"
        return self.record_error(
            uow_id,
            error_class=name,
            message=str(error),
            classification=classification,
            attempt=attempt,
            detail=detail,
        )

    def errors(self, uow_id: str) -> list[ErrorRecord]:
        query = select(errors).where(errors.c.uow_id == uow_id).order_by(errors.c.seq)
        with self._read() as conn:
            return [_error_from_row(row) for row in conn.execute(query).mappings()]

    def record_nonfatal(
        self,
        uow_id: str,
        message: str,
        *,
        count: int = 1,
        attempt: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> NonfatalErrorRecord:
        """Record a problem that did not fail the attempt, e.g. ``count`` rows dropped."""
        message = _text(message, "message")
        count = _count(count, "count", minimum=1)
        detail_text = encode_detail(detail)
        with self._write() as conn:
            now = self.now()
            self._require_unit(conn, uow_id)
            self._require_attempt(conn, uow_id, attempt)
            seq = append_event(
                conn,
                kind="nonfatal-error",
                at=now,
                recorded_at=now,
                summary=f"non-fatal: {message} (x{count})",
                uow_id=uow_id,
                attempt=attempt,
                data={"count": count},
            )
            conn.execute(
                insert(nonfatal_errors).values(
                    seq=seq,
                    uow_id=uow_id,
                    attempt=attempt,
                    message=message,
                    count=count,
                    recorded_at=now,
                    detail=detail_text,
                )
            )
        return NonfatalErrorRecord(
            seq=seq,
            uow_id=uow_id,
            message=message,
            count=count,
            recorded_at=now,
            attempt=attempt,
            detail=decode_detail(detail_text),
        )

    def nonfatal_errors(self, uow_id: str) -> list[NonfatalErrorRecord]:
        query = (
            select(nonfatal_errors)
            .where(nonfatal_errors.c.uow_id == uow_id)
            .order_by(nonfatal_errors.c.seq)
        )
        with self._read() as conn:
            return [_nonfatal_from_row(row) for row in conn.execute(query).mappings()]

    # -- job generations ----------------------------------------------------------------------

    def record_job_generation(
        self, uow_id: str, generation: int | None = None, *, job_id: str | None = None,
        supersede: bool = False,
    ) -> JobGenerationRecord:
        """Take a job generation (state ``active``); default: the next one.

        A new generation is only taken once every earlier one is ``confirmed-failed``:
        otherwise a second remote job could duplicate the first's effects. ``supersede``
        is a deliberate rerun of a unit whose job succeeded (changed input, ``--force``): then
        ``succeeded`` generations do not block either, and the new generation's new job id
        makes the service really execute it again. Recording an existing generation again
        returns it (a retried call is harmless). ``job_id`` defaults to
        ``UnitOfWork.job_id(generation)``.
        """
        with self._write() as conn:
            now = self.now()
            unit = self._require_unit(conn, uow_id, lock=True)
            existing = self._generations(conn, uow_id)
            following = (existing[-1].generation if existing else 0) + 1
            number = (
                following if generation is None else _count(generation, "generation", minimum=1)
            )
            by_number = {record.generation: record for record in existing}
            if number in by_number:
                found = by_number[number]
                if job_id is not None and job_id != found.job_id:
                    raise LedgerError(
                        f"generation {number} of {uow_id} has job id {found.job_id}, not {job_id}"
                    )
                return found
            if number != following:
                raise LedgerError(
                    f"generations of {uow_id} are taken in order: the next is {following}, "
                    f"not {number}"
                )
            settled = ("confirmed-failed", "succeeded") if supersede else ("confirmed-failed",)
            blocking = [record for record in existing if record.state not in settled]
            if blocking:
                last = blocking[-1]
                raise LedgerError(
                    f"cannot take generation {number} of {uow_id}: generation {last.generation} "
                    f"({last.job_id}) is {last.state}; a new generation is taken only after "
                    "the earlier ones are confirmed failed"
                )
            job_id = (
                _text(job_id, "job_id")
                if job_id is not None
                else (unit.to_unit_of_work().job_id(number))
            )
            clash = conn.execute(
                select(job_generations.c.uow_id).where(job_generations.c.job_id == job_id)
            ).scalar()
            if clash is not None:
                raise LedgerError(f"job id {job_id} is already used by unit of work {clash}")
            seq = append_event(
                conn,
                kind="job-generation",
                at=now,
                recorded_at=now,
                summary=f"job generation {number}: {job_id}"
                + (" (a deliberate rerun: supersedes the succeeded one)" if supersede else ""),
                uow_id=uow_id,
                data={"generation": number, "job_id": job_id, "state": "active",
                      "supersede": supersede},
            )
            conn.execute(
                insert(job_generations).values(
                    uow_id=uow_id,
                    generation=number,
                    job_id=job_id,
                    state="active",
                    created_at=now,
                    updated_at=now,
                    seq=seq,
                )
            )
        return JobGenerationRecord(
            uow_id=uow_id,
            generation=number,
            job_id=job_id,
            state="active",
            created_at=now,
            updated_at=now,
        )

    def mark_generation(
        self, uow_id: str, generation: int, state: GenerationState
    ) -> JobGenerationRecord:
        """Record what became of a generation's job.

        ``active`` -> ``confirmed-failed`` or ``succeeded``; ``confirmed-failed`` ->
        ``succeeded`` (late evidence, e.g. a cancelled job that finished anyway); a succeeded
        job is never marked failed. Marking the current state again is a no-op.
        """
        if state not in GENERATION_STATES:
            raise LedgerError(f"state must be one of {', '.join(GENERATION_STATES)}, got {state!r}")
        with self._write() as conn:
            now = self.now()
            self._require_unit(conn, uow_id, lock=True)
            row = (
                conn.execute(
                    select(job_generations).where(
                        job_generations.c.uow_id == uow_id,
                        job_generations.c.generation == generation,
                    )
                )
                .mappings()
                .first()
            )
            if row is None:
                raise LedgerError(f"unit of work {uow_id} has no job generation {generation}")
            current = _generation_from_row(row)
            if current.state == state:
                return current
            if state not in _GENERATION_TRANSITIONS[current.state]:
                raise LedgerError(
                    f"job generation {generation} of {uow_id} is {current.state}; "
                    f"it cannot become {state}"
                )
            append_event(
                conn,
                kind="generation-marked",
                at=now,
                recorded_at=now,
                summary=f"job generation {generation} ({current.job_id}) marked {state}",
                uow_id=uow_id,
                data={"generation": generation, "state": state, "previous_state": current.state},
            )
            conn.execute(
                update(job_generations)
                .where(
                    job_generations.c.uow_id == uow_id,
                    job_generations.c.generation == generation,
                )
                .values(state=state, updated_at=now)
            )
        return JobGenerationRecord(
            uow_id=uow_id,
            generation=generation,
            job_id=current.job_id,
            state=state,
            created_at=current.created_at,
            updated_at=now,
        )

    def job_generations(self, uow_id: str) -> list[JobGenerationRecord]:
        with self._read() as conn:
            return self._generations(conn, uow_id)

    def current_generation(self, uow_id: str) -> JobGenerationRecord | None:
        """The highest generation taken, whatever its state; None before the first."""
        generations = self.job_generations(uow_id)
        return generations[-1] if generations else None

    def next_generation(self, uow_id: str) -> int:
        """The number a new generation would get (whether it may be taken is checked then)."""
        current = self.current_generation(uow_id)
        return 1 if current is None else current.generation + 1

    @staticmethod
    def _generations(conn: Connection, uow_id: str) -> list[JobGenerationRecord]:
        query = (
            select(job_generations)
            .where(job_generations.c.uow_id == uow_id)
            .order_by(job_generations.c.generation)
        )
        return [_generation_from_row(row) for row in conn.execute(query).mappings()]

    # -- fingerprints -------------------------------------------------------------------------

    def record_fingerprint(
        self,
        destination: str,
        partition: str,
        row_count: int,
        checksum: int | str,
        *,
        uow_id: str | None = None,
        attempt: int | None = None,
        columns: Sequence[str] | None = None,
        algorithm: str | None = None,
        schema: str | None = None,
    ) -> FingerprintRecord:
        """Record the next version of a partition's fingerprint (versions count from 1).

        ``checksum`` is stored as text (see ``FingerprintRecord``); ``columns`` names the key
        columns it covers and ``algorithm`` how it was computed (checksums of different
        columns or algorithms are not comparable); ``schema`` is an optional schema signature.
        """
        destination = _text(destination, "destination")
        partition = _text(partition, "partition", allow_empty=True)
        row_count = _count(row_count, "row_count", minimum=0)
        if isinstance(checksum, bool) or not isinstance(checksum, int | str) or checksum == "":
            raise LedgerError(f"checksum must be an integer or non-empty text, got {checksum!r}")
        checksum_text = str(checksum)
        if attempt is not None and uow_id is None:
            raise LedgerError("a fingerprint's attempt needs its uow_id")
        if schema is not None:
            schema = _text(schema, "schema", allow_empty=True)
        if algorithm is not None:
            algorithm = _text(algorithm, "algorithm")
        column_names: tuple[str, ...] | None = None
        if columns is not None:
            if isinstance(columns, str):
                raise LedgerError("columns must be a sequence of column names, not one string")
            column_names = tuple(_text(name, "column name") for name in columns)
        with self._write() as conn:
            now = self.now()
            lock_key(conn, "fingerprint", f"{destination}\x1f{partition}")
            if uow_id is not None:
                self._require_unit(conn, uow_id)
                self._require_attempt(conn, uow_id, attempt)
            latest = conn.execute(
                select(func.max(fingerprints.c.version)).where(
                    fingerprints.c.destination == destination,
                    fingerprints.c.partition == partition,
                )
            ).scalar()
            version = int(latest or 0) + 1
            seq = append_event(
                conn,
                kind="fingerprint",
                at=now,
                recorded_at=now,
                summary=(
                    f"fingerprint {destination}/{partition} v{version}: {row_count} rows, "
                    f"checksum {checksum_text}"
                ),
                uow_id=uow_id,
                attempt=attempt,
                data={"destination": destination, "partition": partition, "version": version},
            )
            conn.execute(
                insert(fingerprints).values(
                    seq=seq,
                    destination=destination,
                    partition=partition,
                    version=version,
                    row_count=row_count,
                    checksum=checksum_text,
                    uow_id=uow_id,
                    attempt=attempt,
                    columns=None
                    if column_names is None
                    else encode_detail({"columns": list(column_names)}),
                    algorithm=algorithm,
                    schema_signature=schema,
                    recorded_at=now,
                )
            )
        return FingerprintRecord(
            seq=seq,
            destination=destination,
            partition=partition,
            version=version,
            row_count=row_count,
            checksum=checksum_text,
            recorded_at=now,
            uow_id=uow_id,
            attempt=attempt,
            columns=column_names,
            algorithm=algorithm,
            schema=schema,
        )

    def fingerprints(self, destination: str, partition: str) -> list[FingerprintRecord]:
        """Every version of one partition's fingerprint, oldest first."""
        query = (
            select(fingerprints)
            .where(fingerprints.c.destination == destination, fingerprints.c.partition == partition)
            .order_by(fingerprints.c.version)
        )
        with self._read() as conn:
            return [_fingerprint_from_row(row) for row in conn.execute(query).mappings()]

    def latest_fingerprint(self, destination: str, partition: str) -> FingerprintRecord | None:
        query = (
            select(fingerprints)
            .where(fingerprints.c.destination == destination, fingerprints.c.partition == partition)
            .order_by(fingerprints.c.version.desc())
            .limit(1)
        )
        with self._read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _fingerprint_from_row(row)

    def latest_fingerprints(self, destination: str | None = None) -> list[FingerprintRecord]:
        """The latest version of every fingerprinted partition (of one destination)."""
        newest = select(
            fingerprints.c.destination,
            fingerprints.c.partition,
            func.max(fingerprints.c.version).label("version"),
        ).group_by(fingerprints.c.destination, fingerprints.c.partition)
        if destination is not None:
            newest = newest.where(fingerprints.c.destination == destination)
        latest = newest.subquery()
        query = (
            select(fingerprints)
            .join(
                latest,
                (fingerprints.c.destination == latest.c.destination)
                & (fingerprints.c.partition == latest.c.partition)
                & (fingerprints.c.version == latest.c.version),
            )
            .order_by(fingerprints.c.destination, fingerprints.c.partition)
        )
        with self._read() as conn:
            return [_fingerprint_from_row(row) for row in conn.execute(query).mappings()]

    def fingerprint_diff(
        self, destination: str, partition: str, version: int | None = None
    ) -> FingerprintDiff | None:
        """Version ``version`` (default: latest) against the one before it; None if absent."""
        versions = {record.version: record for record in self.fingerprints(destination, partition)}
        if not versions:
            return None
        wanted = max(versions) if version is None else version
        if wanted not in versions:
            return None
        return FingerprintDiff(before=versions.get(wanted - 1), after=versions[wanted])

    # -- decisions ----------------------------------------------------------------------------

    def record_decision(
        self,
        uow_id: str,
        decision: DecisionName,
        *,
        reason: str,
        as_of: datetime | None = None,
        attempt: int | None = None,
        not_started: bool = False,
        detail: Mapping[str, Any] | None = None,
    ) -> DecisionRecord:
        """Record a planner decision taken from the evidence as of ``as_of`` (default: now).

        With ``not_started`` the decision withheld attempt ``attempt`` (default: the next
        number); no attempt row is written for it.
        """
        name = getattr(decision, "value", decision)
        if name not in DECISIONS:
            raise LedgerError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
        reason = _text(reason, "reason")
        detail_text = encode_detail(detail)
        with self._write() as conn:
            now = self.now()
            evaluated = now if as_of is None else _aware(as_of, "as_of")
            self._require_unit(conn, uow_id, lock=not_started)
            if not_started:
                if attempt is None:
                    attempt = self._max_attempt(conn, uow_id) + 1
                else:
                    _count(attempt, "attempt", minimum=1)
            else:
                self._require_attempt(conn, uow_id, attempt)
            summary = f"decided {name}: {reason}"
            if not_started:
                summary += f" (attempt {attempt} not started)"
            seq = append_event(
                conn,
                kind="decision",
                at=now,
                recorded_at=now,
                summary=summary,
                uow_id=uow_id,
                attempt=attempt,
                data={"decision": name, "as_of": evaluated, "not_started": not_started},
            )
            conn.execute(
                insert(decisions).values(
                    seq=seq,
                    uow_id=uow_id,
                    attempt=attempt,
                    not_started=not_started,
                    decision=name,
                    reason=reason,
                    as_of=evaluated,
                    recorded_at=now,
                    detail=detail_text,
                )
            )
        return DecisionRecord(
            seq=seq,
            uow_id=uow_id,
            decision=cast(DecisionName, name),
            reason=reason,
            as_of=evaluated,
            recorded_at=now,
            attempt=attempt,
            not_started=not_started,
            detail=decode_detail(detail_text),
        )

    def decisions(self, uow_id: str) -> list[DecisionRecord]:
        query = select(decisions).where(decisions.c.uow_id == uow_id).order_by(decisions.c.seq)
        with self._read() as conn:
            return [_decision_from_row(row) for row in conn.execute(query).mappings()]

    # -- leases and pools ---------------------------------------------------------------------

    def acquire_lease(self, uow_id: str, holder: str, ttl_seconds: float) -> LeaseResult:
        """Lease the unit of work to ``holder`` for ``ttl_seconds``.

        Someone else's unexpired lease gives ``acquired=False`` naming them and their expiry.
        An expired one is taken over, recorded as a ``lease-takeover`` observation, and the
        previous holder's running attempts become ``unknown``. Our own lease is extended.
        """
        with self._write() as conn:
            self._require_unit(conn, uow_id)
            return leasing.acquire_lease(
                conn, uow_id=uow_id, holder=holder, ttl_seconds=ttl_seconds, clock=self.now
            )

    def renew_lease(self, uow_id: str, holder: str, ttl_seconds: float) -> LeaseResult:
        """Extend ``holder``'s unexpired lease; ``acquired=False`` if it expired or is not ours
        (``holder`` is then whoever holds it, empty if nobody does)."""
        with self._write() as conn:
            self._require_unit(conn, uow_id)
            return leasing.renew_lease(
                conn, uow_id=uow_id, holder=holder, ttl_seconds=ttl_seconds, clock=self.now
            )

    def release_lease(self, uow_id: str, holder: str) -> bool:
        """Give the lease back; False if ``holder`` did not hold it."""
        with self._write() as conn:
            return leasing.release_lease(conn, uow_id=uow_id, holder=holder, clock=self.now)

    def next_fencing_token(self) -> int:
        """Take the next value of the ledger-wide fencing sequence (the one leases take).

        The engine takes one per attempt, so a timed-out attempt whose thread commits late is
        fenced by the retry that followed it, exactly like a paused worker by its successor."""
        with self._write() as conn:
            return leasing.next_fencing_token(conn)

    def lease(self, uow_id: str) -> LeaseRecord | None:
        """The stored lease (check ``active(ledger.now())``: it may be expired or released)."""
        with self._read() as conn:
            return leasing.get_lease(conn, uow_id)

    def acquire_pool_slots(
        self, pool: str, capacity: int, slots: int, holder: str, ttl_seconds: float
    ) -> bool:
        """Hold ``slots`` of ``pool`` for ``ttl_seconds`` if they fit; False if they do not.

        The unexpired holdings of a pool never sum to more than ``capacity``; acquiring again
        as the same holder resizes and extends the holding.
        """
        with self._write() as conn:
            return leasing.acquire_pool_slots(
                conn,
                pool=pool,
                capacity=capacity,
                slots=slots,
                holder=holder,
                ttl_seconds=ttl_seconds,
                clock=self.now,
            )

    def release_pool_slots(self, pool: str, holder: str) -> int:
        """Release ``holder``'s slots of ``pool``; returns how many unexpired slots were freed."""
        with self._write() as conn:
            return leasing.release_pool_slots(conn, pool=pool, holder=holder, clock=self.now)

    def pool_holdings(self, pool: str, *, active_only: bool = True) -> list[PoolHolding]:
        """Holdings of ``pool``: unexpired unreleased ones, or the full history."""
        with self._read() as conn:
            return leasing.list_pool_holdings(
                conn, pool=pool, now=self.now(), active_only=active_only
            )

    # -- materialized intermediates ---------------------------------------------------------

    def record_intermediate(
        self,
        *,
        name: str,
        version: str,
        unit: UnitOfWork,
        owner: str,
        retention_seconds: int,
        location: str,
        partition: str,
        columns: Sequence[str],
        algorithm: str,
        row_count: int,
        checksum: str,
        bytes_stored: int,
        compute_seconds: float,
        bytes_scanned: int | None,
        reason: str,
        detail: Mapping[str, Any] | None = None,
    ) -> IntermediateRecord:
        """Catalog a freshly written intermediate version (see ``twice.engine.intermediates``).

        Records its producing unit of work too; any other active version stored in the same
        slice becomes ``superseded``. Writing a version again is ``recomputed``.
        """
        with self.transaction():
            self.record_unit(unit)
            with self._write() as conn:
                return catalog.record_materialization(
                    conn, now=self.now(), name=name, version=version, uow_id=unit.uow_id,
                    owner=owner, retention_seconds=retention_seconds, location=location,
                    partition=partition, identity=unit.identity(), columns=columns,
                    algorithm=algorithm, row_count=row_count, checksum=checksum,
                    bytes_stored=bytes_stored, compute_seconds=compute_seconds,
                    bytes_scanned=bytes_scanned, reason=reason, detail=detail,
                )

    def record_intermediate_reuse(
        self, name: str, version: str, *, verify_seconds: float, reason: str,
        detail: Mapping[str, Any] | None = None,
    ) -> IntermediateRecord:
        """Count one reuse of an active, unexpired version, with its integrity evidence."""
        with self._write() as conn:
            return catalog.record_reuse(
                conn, now=self.now(), name=name, version=version,
                verify_seconds=verify_seconds, reason=reason, detail=detail,
            )

    def record_intermediate_refusal(
        self, name: str, version: str, *, reason: str, verify_seconds: float = 0.0,
        detail: Mapping[str, Any] | None = None,
    ) -> IntermediateEvent:
        """Record why a stored version was not reused (fingerprint mismatch, location, ...)."""
        with self._write() as conn:
            return catalog.record_refusal(
                conn, now=self.now(), name=name, version=version,
                verify_seconds=verify_seconds, reason=reason, detail=detail,
            )

    def expire_intermediate(
        self, name: str, version: str, *, reason: str, detail: Mapping[str, Any] | None = None
    ) -> IntermediateRecord:
        """Mark an active version past its retention as expired (after its data was removed)."""
        with self._write() as conn:
            return catalog.record_expiry(
                conn, now=self.now(), name=name, version=version, reason=reason, detail=detail
            )

    def intermediate(self, name: str, version: str) -> IntermediateRecord | None:
        with self._read() as conn:
            return catalog.get_entry(conn, name, version)

    def intermediates(
        self, *, name: str | None = None, status: IntermediateStatus | None = None
    ) -> list[IntermediateRecord]:
        """Catalog entries (of one name / status), by name then creation time."""
        with self._read() as conn:
            return catalog.list_entries(conn, name=name, status=status)

    def intermediate_events(
        self, name: str, version: str | None = None
    ) -> list[IntermediateEvent]:
        """History of one intermediate (one version), in recording order."""
        with self._read() as conn:
            return catalog.list_events(conn, name, version)

    # -- timeline -----------------------------------------------------------------------------

    def timeline(self, uow_id: str) -> list[TimelineEvent]:
        """Every recorded event of the unit of work, ordered by time, then recording order.

        Event times: attempts at their start/finish, observations at ``observed_at``, all
        others when recorded.
        """
        with self._read() as conn:
            rows = (
                conn.execute(
                    select(events)
                    .where(events.c.uow_id == uow_id)
                    .order_by(events.c.at, events.c.seq)
                )
                .mappings()
                .all()
            )
            if not rows:
                return []
            lookup = self._timeline_records(conn, uow_id)
        timeline = []
        for row in rows:
            data = decode_detail(row["data"])
            kind = row["kind"]
            if kind in ("attempt-started", "attempt-finished"):
                record = lookup["attempt"].get(row["attempt"])
            elif kind in ("job-generation", "generation-marked"):
                record = lookup["generation"].get(data.get("generation"))
            elif kind == "unit-recorded":
                record = lookup["unit"].get(uow_id)
            else:
                record = lookup[kind].get(row["seq"])
            timeline.append(
                TimelineEvent(
                    seq=row["seq"],
                    at=row["at"],
                    kind=kind,
                    uow_id=row["uow_id"],
                    summary=row["summary"],
                    attempt=row["attempt"],
                    detail=data,
                    record=record,
                )
            )
        return timeline

    def _timeline_records(self, conn: Connection, uow_id: str) -> dict[str, dict[Any, object]]:
        def by(table: Any, convert: Callable[[RowMapping], Any], key: str) -> dict[Any, object]:
            query = select(table).where(table.c.uow_id == uow_id)
            return {row[key]: convert(row) for row in conn.execute(query).mappings()}

        found_observations = by(observations, observation_from_row, "seq")
        return {
            "unit": {uow_id: self._unit(conn, uow_id)},
            "attempt": by(attempts, _attempt_from_row, "number"),
            "generation": by(job_generations, _generation_from_row, "generation"),
            "observation": found_observations,
            "lease-takeover": found_observations,
            "error": by(errors, _error_from_row, "seq"),
            "nonfatal-error": by(nonfatal_errors, _nonfatal_from_row, "seq"),
            "fingerprint": by(fingerprints, _fingerprint_from_row, "seq"),
            "decision": by(decisions, _decision_from_row, "seq"),
        }


_OPERATOR_NAME = re.compile(r"[^\s:][^\r\n\t]*")


def _operator_name(value: object) -> str:
    """An operator's name as given (``--operator``, ``$USER``): one line, not blank."""
    name = value.strip() if isinstance(value, str) else value
    if not isinstance(name, str) or not _OPERATOR_NAME.fullmatch(name):
        raise LedgerError(
            f"operator must be a person's name or login on one line, got {value!r}"
        )
    if len(name) > _MAX_OPERATOR_NAME:
        raise LedgerError(f"operator name is longer than {_MAX_OPERATOR_NAME} characters")
    return name


def _resolution_record(
    attempt: AttemptRecord, observation: ObservationRecord, *, repeated: bool
) -> ResolutionRecord:
    detail = observation.detail
    outcome = resolution_outcome(observation.state, observation.source)
    assert outcome is not None
    return ResolutionRecord(
        uow_id=attempt.uow_id,
        outcome=outcome,
        operator=str(detail.get("operator") or observation.source[len(OPERATOR_SOURCE_PREFIX):]),
        note=str(detail.get("note", "")),
        resolved_at=observation.observed_at,
        attempt=attempt,
        observation=observation,
        repeated=repeated,
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


#: Public methods that do not run a ledger transaction of their own (or, like
#: ``transaction``, handle faults themselves): not wrapped by ``_retried``.
_NOT_RETRIED = frozenset({"open", "now", "close", "transaction", "snapshot", "atomic"})


def _retried(method: Callable[..., T]) -> Callable[..., T]:
    """Run ``method`` whole again on transient faults (see ``Ledger._retrying``).

    Inside a ``transaction()`` or ``snapshot()`` it joins the caller's transaction and is not
    retried on its own: the block as a whole is.
    """
    what = f"{method.__name__}()"

    @functools.wraps(method)
    def call(self: Ledger, *args: Any, **kwargs: Any) -> T:
        if self._current() is not None or self._in_retry():
            return method(self, *args, **kwargs)
        return self._retrying(lambda: method(self, *args, **kwargs), what=what)

    call.__twice_retried__ = True  # type: ignore[attr-defined]
    return call


def _wrap_public_methods(cls: type) -> None:
    """Every public method of the ``Ledger`` retries transient faults and raises typed errors.

    Applied here rather than by a decorator on each method so that no write method can be
    added without it; ``tests/ledger`` checks that each one is wrapped.
    """
    for name, value in list(vars(cls).items()):
        if name.startswith("_") or name in _NOT_RETRIED or not callable(value):
            continue
        if isinstance(value, staticmethod | classmethod | property):
            continue
        setattr(cls, name, _retried(value))


_wrap_public_methods(Ledger)


def _reason(exc: DBAPIError, url: URL) -> str:
    """The driver's first message line, with the password scrubbed in case it echoes it."""
    original = exc.orig if exc.orig is not None else exc
    lines = str(original).strip().splitlines()
    reason = lines[0] if lines else type(original).__name__
    if url.password:
        reason = reason.replace(str(url.password), "***")
    return reason
