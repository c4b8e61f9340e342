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

``Ledger`` is a facade: the SQL of each concern is in its own store (``units``, ``attempts``,
``resolutions``, ``observations``, ``decisions``, ``generations``, ``fingerprints``,
``lease``, ``catalog``, ``timeline``), all sharing one ``session.Session``. Read-only callers
can type against ``twice.ledger.reader.LedgerReader`` instead.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from twice.core.outcomes import AttemptOutcome, ErrorClassification
from twice.core.resources import Closeable
from twice.core.unit import UnitOfWork
from twice.ledger import catalog
from twice.ledger import migrations as schema_steps
from twice.ledger.adoptions import AdoptionRecord, AdoptionStore
from twice.ledger.attempts import AttemptStore
from twice.ledger.catalog import CatalogStore
from twice.ledger.claims import ClaimIntents, ClaimState
from twice.ledger.decisions import DecisionStore
from twice.ledger.engine import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    create_ledger_engine,
    is_in_memory,
    mask_url,
    read_only_reason,
    resolve_url,
    sqlite_path,
)
from twice.ledger.errors import LedgerDamagedError, LedgerError, LedgerStorageError
from twice.ledger.faults import DEFAULT_RETRY_SECONDS, classify
from twice.ledger.fingerprints import FingerprintStore
from twice.ledger.generations import GenerationStore
from twice.ledger.history import History, unit_history
from twice.ledger.lease import LeaseStore, releasing
from twice.ledger.migrations import check_readable, migrate, read_identity, read_version
from twice.ledger.observations import ObservationStore
from twice.ledger.records import (
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
)
from twice.ledger.resolutions import ResolutionStore
from twice.ledger.session import Clock, Session, system_clock
from twice.ledger.timeline import TimelineStore
from twice.ledger.units import UnitStore

if TYPE_CHECKING:
    from twice.ledger.reader import LedgerReader

__all__ = ["Clock", "Ledger"]

T = TypeVar("T")


class Ledger(Closeable):
    """Durable record of units of work, attempts, evidence, decisions, leases and pool slots.

    Open with :meth:`Ledger.open`; one instance may be shared by threads (each thread has its
    own ``transaction()``), processes open their own. A facade: each concern's SQL is in its
    store (``twice.ledger.units``, ``attempts``, ...), all of them sharing one ``Session``.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._units = UnitStore(session)
        self._attempts = AttemptStore(session)
        self._resolutions = ResolutionStore(session)
        self._observations = ObservationStore(session)
        self._decisions = DecisionStore(session)
        self._adoptions = AdoptionStore(session)
        self._generations = GenerationStore(session)
        self._fingerprints = FingerprintStore(session)
        self._leases = LeaseStore(session)
        self._catalog = CatalogStore(session, self._units)
        self._timeline = TimelineStore(session)

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
        options: dict[str, Any] = {
            "clock": clock or system_clock, "retry_seconds": float(retry_seconds),
            "busy": float(busy), "path": None if path is None else str(path),
        }
        if reason is not None:
            return cls._open_read_only(resolved, label, reason, **options)
        ledger = cls._create(resolved, label, read_only=None, **options)
        try:
            return ledger._ready(ledger._migrate, "opening the ledger", resolved)
        except LedgerStorageError as exc:
            fault = None if exc.original is None else classify(exc.original)
            fallback = (read_only is None and fault is not None and fault.read_only
                        and path is not None and path.is_file())
            if not fallback:
                raise
            return cls._open_read_only(resolved, label, fault.cause if fault else "read-only",
                                       **options)

    @classmethod
    def _create(
        cls, resolved: URL, label: str, *, read_only: str | None, clock: Clock,
        retry_seconds: float, busy: float, path: str | None, immutable: bool = False,
    ) -> Ledger:
        engine = create_ledger_engine(resolved, busy_timeout=busy,
                                      read_only=read_only is not None, immutable=immutable)
        session = Session(engine, label=label, clock=clock, retry_seconds=retry_seconds,
                          read_only=read_only, path=path)
        session.password = None if resolved.password is None else str(resolved.password)
        return cls(session)

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
                return ledger._ready(ledger._check_schema, "opening the ledger read-only",
                                     resolved)
            except LedgerDamagedError:
                raise  # immutable would read past the WAL and see tables that are gone
            except LedgerStorageError:
                if immutable or path is None:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _ready(self, step: Callable[[], None], what: str, resolved: URL) -> Ledger:
        """The ledger once ``step`` (migrating, or checking the schema) succeeded; otherwise
        its engine is disposed of, and a driver's error names the ledger."""
        try:
            self._session.retrying(step, what=what, opening=True)
        except DBAPIError as exc:
            self._engine.dispose()
            raise LedgerError(f"cannot open ledger {self.url}: {_reason(exc, resolved)}") from None
        except BaseException:
            self._engine.dispose()
            raise
        return self

    def _migrate(self) -> None:
        """Migrate if needed; an up-to-date ledger is checked without taking the write lock
        (opening must not queue behind another process's long write transaction)."""
        with self._session.scope(read_only=True) as conn:
            if read_version(conn) == schema_steps.LATEST_VERSION:
                schema_steps.check_complete(conn, schema_steps.LATEST_VERSION,
                                            label=self._session.label)
                return
        with self._session.scope(read_only=False) as conn:
            migrate(conn, now=self.now(), label=self._session.label)

    def _check_schema(self) -> None:
        with self._session.scope(read_only=True) as conn:
            check_readable(conn, label=self._session.label)

    @property
    def _engine(self) -> Engine:
        return self._session.engine

    @property
    def _clock(self) -> Clock:
        return self._session.clock

    @_clock.setter
    def _clock(self, clock: Clock) -> None:
        self._session.clock = clock

    @property
    def url(self) -> str:
        """The ledger's URL with any password masked."""
        return self._session.label

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._session.dialect

    @property
    def read_only(self) -> str | None:
        """Why the ledger was opened read-only (every write is refused); None when writable."""
        return self._session.read_only

    @property
    def schema_version(self) -> int:
        with self._session.read() as conn:
            return read_version(conn)

    @functools.cached_property
    def identity(self) -> str:
        """This ledger's stable identity (a random id made when it was created, kept in its
        own ``twice_ledger`` table): every owned write stamps it into its commit record, and
        a destination refuses another ledger's writes. "" for a ledger opened read-only
        before it had one (schema version 3)."""
        with self._session.read() as conn:
            return read_identity(conn) or ""

    def now(self) -> datetime:
        """The ledger clock's current time, aware UTC."""
        return self._session.now()

    def close(self) -> None:
        """Dispose of the engine's connections; the ledger cannot be used afterwards."""
        self._session.close()

    def __repr__(self) -> str:
        return f"Ledger({self._session.label!r})"

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
        with self._session.transaction():
            yield self

    def atomic(self, fn: Callable[[Ledger], T]) -> T:
        """``fn(ledger)`` inside one ``transaction()``, run again whole on a transient fault.

        ``fn`` must be re-runnable: only ledger writes as side effects, everything it records
        computed inside it. Inside another transaction it joins that one and is not retried.
        """
        return self._session.atomic(lambda: fn(self),
                                    what=f"atomic({getattr(fn, '__name__', 'fn')})")

    @contextmanager
    def snapshot(self) -> Iterator[Ledger]:
        """Read in the block from one read-only transaction: a consistent view of the ledger
        (REPEATABLE READ on PostgreSQL, one WAL read snapshot on SQLite) and one BEGIN/COMMIT
        for all the reads instead of one per read. Writing inside it is refused.

        Inside a ``transaction()`` it joins that transaction instead.
        """
        with self._session.snapshot():
            yield self

    # -- units of work ------------------------------------------------------------------------

    def record_unit(self, uow: UnitOfWork) -> UnitRecord:
        """Record a unit of work (idempotent: recording it again returns the stored record)."""
        return self._units.record(uow)

    def unit(self, uow_id: str) -> UnitRecord | None:
        return self._units.get(uow_id)

    def release_lease_and_read(self, uow_id: str, holder: str) -> History:
        """Give the lease back (as :meth:`release_lease`, without saying whether ``holder``
        held it) and read the unit's :meth:`history`, in one round trip on PostgreSQL: the
        end of a unit that succeeded, whose history is what the executor plans on next."""
        with self._session.write() as conn:
            return unit_history(conn, uow_id,
                                [(*releasing(uow_id, holder, self._session.now()), None)])

    def history(self, uow_id: str) -> History:
        """The unit's record, attempts, observations and decisions, as :meth:`unit`,
        :meth:`attempts`, :meth:`observations` and :meth:`decisions` give them, read together
        (one round trip on PostgreSQL: ``twice.ledger.history``)."""
        with self._session.read() as conn:
            return unit_history(conn, uow_id)

    def units(self, *, pipeline: str | None = None, task: str | None = None,
              starting: datetime | None = None) -> list[UnitRecord]:
        """All recorded units of work (optionally of one pipeline/task, and of the intervals
        that start at ``starting``), in interval order."""
        return self._units.all(pipeline=pipeline, task=task, starting=starting)

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
        return self._attempts.begin(uow_id, holder=holder, generation=generation,
                                    job_id=job_id, started_at=started_at)

    def begin_fenced_attempt(
        self, uow_id: str, *, holder: str, generation: int | None = None,
        job_id: str | None = None,
    ) -> tuple[AttemptRecord, int]:
        """:meth:`begin_attempt` and :meth:`next_fencing_token` in one transaction (on
        PostgreSQL the token comes back from the attempt's own INSERT): the attempt, and the
        token its writes are stamped with."""
        record, token = self._attempts.begin_fenced(
            uow_id, holder=holder, generation=generation, job_id=job_id, started_at=None)
        assert token is not None
        return record, token

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
        return self._attempts.finish(uow_id, number, outcome, finished_at)

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
        return self._attempts.all(uow_id)

    def attempt(self, uow_id: str, number: int) -> AttemptRecord | None:
        return self._attempts.get(uow_id, number)

    def latest_attempt(self, uow_id: str) -> AttemptRecord | None:
        return self._attempts.latest(uow_id)

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
        (``outcome="failed"``: it did not; ``"failed-after-acting"``: it acted, then failed),
        and an observation ``resolved-<outcome>`` from ``operator:<operator>`` keeps the
        outcome and the note: an assertion by a person, which reports show as such, never as
        verified. What it means for the next run is ``twice.core.resolution.next_run_after``.
        All in one transaction. Resolving an attempt again the same way returns the recorded
        resolution (``repeated=True``); any other finished attempt is refused, and so is a
        running one whose holder still holds the unit's lease (it may still finish).
        """
        return self._resolutions.record(uow_id, attempt=attempt, outcome=outcome, note=note,
                                        operator=operator)

    def resolutions(self, uow_id: str) -> list[ResolutionRecord]:
        """Operators' resolutions of the unit's attempts, in recording order."""
        return self._resolutions.all(uow_id)

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
        summary: str | None = None,
    ) -> ObservationRecord:
        """Record a status seen by ``source`` at ``observed_at`` (default: now).

        A stale ``observed_at`` is fine (the planner refreshes it); a future one is refused.
        ``summary`` is the journal's one line for it (timelines show it; default: "observed
        STATE via SOURCE").
        """
        return self._observations.record(uow_id, state, source=source, observed_at=observed_at,
                                         attempt=attempt, detail=detail, summary=summary)

    def observations(self, uow_id: str) -> list[ObservationRecord]:
        """All observations, oldest observation time first."""
        return self._observations.all(uow_id)

    def latest_observation(
        self, uow_id: str, *, source: str | None = None
    ) -> ObservationRecord | None:
        """The freshest evidence: latest ``observed_at`` (a stale one recorded later loses)."""
        return self._observations.latest(uow_id, source=source)

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
        return self._observations.record_error(
            uow_id, error_class=error_class, message=message, classification=classification,
            attempt=attempt, detail=detail,
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
        return self._observations.errors(uow_id)

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
        return self._observations.record_nonfatal(uow_id, message, count=count, attempt=attempt,
                                                  detail=detail)

    def nonfatal_errors(self, uow_id: str) -> list[NonfatalErrorRecord]:
        return self._observations.nonfatal_errors(uow_id)

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
        return self._generations.record(uow_id, generation, job_id=job_id, supersede=supersede)

    def mark_generation(
        self, uow_id: str, generation: int, state: GenerationState
    ) -> JobGenerationRecord:
        """Record what became of a generation's job.

        ``active`` -> ``confirmed-failed`` or ``succeeded``; ``confirmed-failed`` ->
        ``succeeded`` (late evidence, e.g. a cancelled job that finished anyway); a succeeded
        job is never marked failed. Marking the current state again is a no-op.
        """
        return self._generations.mark(uow_id, generation, state)

    def generation_for_attempt(self, uow_id: str, *, supersede: bool = False
                               ) -> JobGenerationRecord:
        """The job generation the unit's next attempt uses: the current one until it is
        confirmed failed, so a resubmission finds the existing job; a new one (by the rules of
        ``record_job_generation``) when there is none yet, the current one is confirmed
        failed, or ``supersede`` (a deliberate rerun)."""
        return self._generations.for_attempt(uow_id, supersede=supersede)

    def job_generations(self, uow_id: str) -> list[JobGenerationRecord]:
        return self._generations.all(uow_id)

    def current_generation(self, uow_id: str) -> JobGenerationRecord | None:
        """The highest generation taken, whatever its state; None before the first."""
        generations = self.job_generations(uow_id)
        return generations[-1] if generations else None

    def next_generation(self, uow_id: str) -> int:
        """The number a new generation would get (whether it may be taken is checked then)."""
        current = self.current_generation(uow_id)
        return 1 if current is None else current.generation + 1

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
        after: Callable[[FingerprintRecord | None], None] | None = None,
    ) -> FingerprintRecord:
        """Record the next version of a partition's fingerprint (versions count from 1).

        ``checksum`` is stored as text (see ``FingerprintRecord``); ``columns`` names the key
        columns it covers and ``algorithm`` how it was computed (checksums of different
        columns or algorithms are not comparable); ``schema`` is an optional schema signature.
        ``after`` is called with the version this one follows (None: the first), read under
        the partition's lock, so no other writer can record between the two; raising in it
        records nothing.
        """
        return self._fingerprints.record(
            destination, partition, row_count, checksum, uow_id=uow_id, attempt=attempt,
            columns=columns, algorithm=algorithm, schema=schema, after=after,
        )

    def fingerprints(self, destination: str, partition: str) -> list[FingerprintRecord]:
        """Every version of one partition's fingerprint, oldest first."""
        return self._fingerprints.versions(destination, partition)

    def latest_fingerprint(self, destination: str, partition: str) -> FingerprintRecord | None:
        return self._fingerprints.latest(destination, partition)

    def latest_fingerprints(self, destination: str | None = None) -> list[FingerprintRecord]:
        """The latest version of every fingerprinted partition (of one destination)."""
        return self._fingerprints.latest_of_each(destination)

    def fingerprint_diff(
        self, destination: str, partition: str, version: int | None = None
    ) -> FingerprintDiff | None:
        """Version ``version`` (default: latest) against the one before it; None if absent."""
        return self._fingerprints.diff(destination, partition, version)

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
        return self._decisions.record(uow_id, decision, reason=reason, as_of=as_of,
                                      attempt=attempt, not_started=not_started, detail=detail)

    def decisions(self, uow_id: str) -> list[DecisionRecord]:
        return self._decisions.all(uow_id)

    # -- leases and pools ---------------------------------------------------------------------

    def acquire_lease(self, uow_id: str, holder: str, ttl_seconds: float) -> LeaseResult:
        """Lease the unit of work to ``holder`` for ``ttl_seconds``.

        Someone else's unexpired lease gives ``acquired=False`` naming them and their expiry.
        An expired one is taken over, recorded as a ``lease-takeover`` observation, and the
        previous holder's running attempts become ``unknown``. Our own lease is extended.
        """
        return self._leases.acquire(uow_id, holder, ttl_seconds)

    def renew_lease(self, uow_id: str, holder: str, ttl_seconds: float) -> LeaseResult:
        """Extend ``holder``'s unexpired lease; ``acquired=False`` if it expired or is not ours
        (``holder`` is then whoever holds it, empty if nobody does)."""
        return self._leases.renew(uow_id, holder, ttl_seconds)

    def release_lease(self, uow_id: str, holder: str) -> bool:
        """Give the lease back; False if ``holder`` did not hold it."""
        return self._leases.release(uow_id, holder)

    def next_fencing_token(self) -> int:
        """Take the next value of the ledger-wide fencing sequence (the one leases take).

        The engine takes one per attempt, so a timed-out attempt whose thread commits late is
        fenced by the retry that followed it, exactly like a paused worker by its successor."""
        return self._leases.next_token()

    def record_adoption(self, destination: str, *, previous: str, previous_at: str,
                        token: int, operator: str, note: str) -> AdoptionRecord:
        """Record that ``destination`` was made to belong to this ledger (``twice adopt``),
        from the ledger ``previous`` (identity; "" if none), its ``adopt`` record committed
        under ``token``: who did it and why."""
        return self._adoptions.record(destination, previous=previous, previous_at=previous_at,
                                      token=token, operator=operator, note=note)

    def adoptions(self, destination: str | None = None) -> list[AdoptionRecord]:
        """The adoptions this ledger recorded (of ``destination`` only, if given), in order."""
        return self._adoptions.all(destination)

    def fencing_token_above(self, floor: int) -> int:
        """Take a value of the fencing sequence above ``floor``, moving the sequence past it
        first if needed (``twice adopt``: the adopting ledger's tokens must beat every token
        the destination holds from the ledger it had before)."""
        return self._leases.token_above(floor)

    def lease(self, uow_id: str) -> LeaseRecord | None:
        """The stored lease (check ``active(ledger.now())``: it may be expired or released)."""
        return self._leases.get(uow_id)

    def claim_states(self, uow_ids: Sequence[str],
                     slots: Mapping[str, tuple[str, str]] | None = None
                     ) -> dict[str, ClaimState]:
        """Many units' latest attempt and lease (and, for ``slots``' succeeded units, who
        wrote their slot last), in one consistent read: a worker choosing its next unit
        (``twice.ledger.claims``)."""
        return self._leases.claim_states(uow_ids, slots)

    def claim_intents(self) -> ClaimIntents:
        """This process's intents to claim units, so workers skip a unit another is claiming
        instead of waiting for it (``twice.ledger.claims``); close it when done."""
        return ClaimIntents(self._session)

    def acquire_pool_slots(
        self, pool: str, capacity: int, slots: int, holder: str, ttl_seconds: float
    ) -> bool:
        """Hold ``slots`` of ``pool`` for ``ttl_seconds`` if they fit; False if they do not.

        The unexpired holdings of a pool never sum to more than ``capacity``; acquiring again
        as the same holder resizes and extends the holding.
        """
        return self._leases.acquire_slots(pool, capacity, slots, holder, ttl_seconds)

    def release_pool_slots(self, pool: str, holder: str) -> int:
        """Release ``holder``'s slots of ``pool``; returns how many unexpired slots were freed."""
        return self._leases.release_slots(pool, holder)

    def pool_holdings(self, pool: str, *, active_only: bool = True) -> list[PoolHolding]:
        """Holdings of ``pool``: unexpired unreleased ones, or the full history."""
        return self._leases.holdings(pool, active_only=active_only)

    def hand_pool_slots_to_job(self, pool: str, holder: str, job: str) -> int:
        """Keep ``holder``'s slots of ``pool`` for a remote job that may still run (``job`` from
        ``twice.ledger.lease.job_holder``): no expiry, released only on a confirmed end of the
        job or an operator's resolution of its attempt. Returns the slots handed over."""
        return self._leases.hand_slots_to_job(pool, holder, job)

    def take_pool_slots_from_job(self, pool: str, job: str, holder: str,
                                 ttl_seconds: float) -> int:
        """Give ``job``'s kept slots of ``pool`` back to ``holder``, expiring ``ttl_seconds``
        from now unless renewed: the job is confirmed ended but the attempt's work still runs
        in that holder's process. Returns the slots taken back."""
        return self._leases.take_slots_from_job(pool, job, holder, ttl_seconds)

    def release_job_pool_slots(
        self, uow_id: str, attempt: int | None = None
    ) -> list[PoolHolding]:
        """Release the slots kept for ``uow_id``'s jobs (the job is confirmed ended)."""
        return self._leases.release_job_slots(uow_id, attempt)

    def job_pool_holdings(self, uow_id: str) -> list[PoolHolding]:
        """Slots still kept for ``uow_id``'s remote jobs, in any pool."""
        return self._leases.job_holdings(uow_id)

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
        return self._catalog.record(
            unit, name=name, version=version, owner=owner, retention_seconds=retention_seconds,
            location=location, partition=partition, columns=columns, algorithm=algorithm,
            row_count=row_count, checksum=checksum, bytes_stored=bytes_stored,
            compute_seconds=compute_seconds, bytes_scanned=bytes_scanned, reason=reason,
            detail=detail,
        )

    def record_intermediate_reuse(
        self, name: str, version: str, *, verify_seconds: float, reason: str,
        detail: Mapping[str, Any] | None = None,
    ) -> IntermediateRecord:
        """Count one reuse of an active, unexpired version, with its integrity evidence."""
        return self._catalog.write(catalog.record_reuse, name=name, version=version,
                                   verify_seconds=verify_seconds, reason=reason, detail=detail)

    def record_intermediate_refusal(
        self, name: str, version: str, *, reason: str, verify_seconds: float = 0.0,
        detail: Mapping[str, Any] | None = None,
    ) -> IntermediateEvent:
        """Record why a stored version was not reused (fingerprint mismatch, location, ...)."""
        return self._catalog.write(catalog.record_refusal, name=name, version=version,
                                   verify_seconds=verify_seconds, reason=reason, detail=detail)

    def expire_intermediate(
        self, name: str, version: str, *, reason: str, detail: Mapping[str, Any] | None = None
    ) -> IntermediateRecord:
        """Mark an active version past its retention as expired (after its data was removed)."""
        return self._catalog.write(catalog.record_expiry, name=name, version=version,
                                   reason=reason, detail=detail)

    def intermediate(self, name: str, version: str) -> IntermediateRecord | None:
        return self._catalog.get(name, version)

    def intermediates(
        self, *, name: str | None = None, status: IntermediateStatus | None = None
    ) -> list[IntermediateRecord]:
        """Catalog entries (of one name / status), by name then creation time."""
        return self._catalog.all(name=name, status=status)

    def intermediate_events(
        self, name: str, version: str | None = None
    ) -> list[IntermediateEvent]:
        """History of one intermediate (one version), in recording order."""
        return self._catalog.events(name, version)

    # -- timeline -----------------------------------------------------------------------------

    def timeline(self, uow_id: str) -> list[TimelineEvent]:
        """Every recorded event of the unit of work, ordered by time, then recording order.

        Event times: attempts at their start/finish, observations at ``observed_at``, all
        others when recorded.
        """
        return self._timeline.of(uow_id)

    def timelines(self, uow_ids: Sequence[str]) -> dict[str, list[TimelineEvent]]:
        """:meth:`timeline` of each of ``uow_ids``, read together (a report's whole ledger)."""
        return self._timeline.of_many(uow_ids)


if TYPE_CHECKING:

    def _reads(ledger: Ledger) -> LedgerReader:
        return ledger  # mypy checks that a Ledger is a LedgerReader


#: Public methods that do not run a ledger transaction of their own (or, like
#: ``transaction``, handle faults themselves): not wrapped by ``_retried``.
_NOT_RETRIED = frozenset({"open", "now", "close", "transaction", "snapshot", "atomic"})


def _retried(method: Callable[..., T]) -> Callable[..., T]:
    """Run ``method`` whole again on transient faults (see ``Session.retrying``).

    Inside a ``transaction()`` or ``snapshot()`` it joins the caller's transaction and is not
    retried on its own: the block as a whole is.
    """
    what = f"{method.__name__}()"

    @functools.wraps(method)
    def call(self: Ledger, *args: Any, **kwargs: Any) -> T:
        session = self._session
        if session.current() is not None or session.in_retry():
            return method(self, *args, **kwargs)
        return session.retrying(lambda: method(self, *args, **kwargs), what=what)

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
