"""What many workers sharing one ledger need to choose their next unit without colliding.

Workers (``twice.drivers.worker``) all walk the same units. Two things made them serialise on
PostgreSQL, and this module removes both without touching what decides who runs a unit (the
lease row, locked in the claiming transaction, and its fencing token: ``twice.ledger.lease``):

* **Reading the state of many units at once** (:func:`claim_states`): a unit's latest attempt
  and its lease, for a batch of units, in one consistent read (three statements, whatever the
  batch's size) instead of a snapshot per unit. A worker reads the units ahead of it and skips
  those leased elsewhere without a round trip each.
* **Claim intents** (:class:`ClaimIntents`, PostgreSQL only): before a worker hands a unit to
  the executor it takes a session-level ``pg_try_advisory_lock`` keyed by the unit, on a
  connection of its own, and gives it back when the executor returns. A second worker trying
  the same unit is told at once that someone is claiming it and moves on to another unit,
  instead of waiting on the first one's uncommitted unit and lease rows (``INSERT ... ON
  CONFLICT`` and ``SELECT ... FOR NO KEY UPDATE`` wait for the other transaction to end) only
  to find the unit leased. An intent is per unit, never table-wide, held by no transaction, and
  only advisory: a worker that cannot take one may still hand the unit to the executor (it does
  after a pass, so a process stopped while holding an intent never keeps its unit from being
  taken over once its lease expires); the lease decides, as before. A dead worker's intents end
  with its connection. On SQLite there is nothing to skip (its writers are serialised by
  ``BEGIN IMMEDIATE`` anyway): every intent is granted.
* **News of units given back** (``ClaimIntents.wait_for_change``, PostgreSQL only): ending an
  intent also notifies ``CHANNEL`` in the same statement, and the intents connection listens
  on it, so a worker waiting between passes for others' units looks again as soon as one is
  given back instead of at the end of its wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ARRAY, and_, bindparam, false, func, select, text, true, tuple_
from sqlalchemy.engine import Connection

from twice.ledger.engine import is_postgres, one_of
from twice.ledger.records import AttemptRecord, LeaseRecord
from twice.ledger.rows import ATTEMPT, LEASE
from twice.ledger.schema import attempts, fingerprints, leases
from twice.ledger.schema import units as unit_rows

if TYPE_CHECKING:
    from twice.ledger.session import Session

#: Units read per statement (well under SQLite's limit on bound parameters).
BATCH = 500

_INTENT_PREFIX = "twice-claim|"
#: The channel a worker's intents connection listens on and notifies when it gives a unit back.
CHANNEL = "twice_units"
_TAKE = text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))")
#: End the intents given back (and tell the waiting workers), in one statement.
_RETURN = text("SELECT (SELECT count(pg_advisory_unlock(hashtextextended(back, 0))) FROM "
               f"unnest(CAST(:back AS text[])) AS back), pg_notify('{CHANNEL}', '')")
#: Take the next intent and ``_RETURN``, in one statement (its first value: the intent taken).
#: In either order the outcome is the same: the keys differ, or, for the same unit taken
#: again, a session's advisory lock counts its holds (taken twice, ended once: still held).
_RETURN_THEN_TAKE = text(
    "SELECT pg_try_advisory_lock(hashtextextended(:key, 0)), (SELECT count("
    "pg_advisory_unlock(hashtextextended(back, 0))) FROM unnest(CAST(:back AS text[])) AS "
    f"back), pg_notify('{CHANNEL}', '')")


@dataclass(frozen=True)
class ClaimState:
    """One unit as a worker choosing its next unit sees it: recorded or not, its latest
    attempt and its lease (None: none yet), all read in one transaction."""

    uow_id: str
    recorded: bool
    latest: AttemptRecord | None
    lease: LeaseRecord | None
    #: the unit of work whose output its slot's latest recorded fingerprint is (None: none
    #: recorded, or one recorded without a unit); read only for a unit whose latest attempt
    #: succeeded and whose slot was given (``slots``), else left unread (``slot_read`` False)
    slot_writer: str | None = None
    slot_read: bool = False


def claim_states(conn: Connection, uow_ids: Sequence[str],
                 slots: Mapping[str, tuple[str, str]] | None = None) -> dict[str, ClaimState]:
    """The state of every unit of ``uow_ids``, read with three statements per ``BATCH`` units
    (the caller reads in one snapshot, so attempts and leases are seen as of one instant).

    ``slots``: a unit's destination slot (destination, partition); for those whose latest
    attempt succeeded, one more statement reads who wrote the slot's latest fingerprint (a
    success another unit's write has overwritten since no longer stands for its slot).

    PostgreSQL: one statement per ``BATCH`` (:func:`_states_in_one`), one snapshot by itself."""
    if is_postgres(conn):
        return _states_in_one(conn, uow_ids, slots or {})
    wanted = list(dict.fromkeys(uow_ids))
    recorded: set[str] = set()
    latest: dict[str, AttemptRecord] = {}
    held: dict[str, LeaseRecord] = {}
    for begin in range(0, len(wanted), BATCH):
        ids = wanted[begin:begin + BATCH]
        recorded.update(conn.execute(
            select(unit_rows.c.uow_id).where(one_of(conn, unit_rows.c.uow_id, ids))).scalars())
        if not recorded.intersection(ids):
            continue  # attempts and leases need a recorded unit (foreign keys)
        top = (select(attempts.c.uow_id, func.max(attempts.c.number).label("number"))
               .where(one_of(conn, attempts.c.uow_id, ids)).group_by(attempts.c.uow_id).subquery())
        query = select(attempts).join(
            top, and_(attempts.c.uow_id == top.c.uow_id, attempts.c.number == top.c.number))
        for row in conn.execute(query).mappings():
            latest[row["uow_id"]] = ATTEMPT(row)
        held_now = select(leases).where(one_of(conn, leases.c.uow_id, ids))
        for row in conn.execute(held_now).mappings():
            held[row["uow_id"]] = LEASE(row)
    asked = {uow_id: slot for uow_id, slot in (slots or {}).items()
             if uow_id in latest and latest[uow_id].outcome == "succeeded"}
    writers = _slot_writers(conn, sorted(set(asked.values())))
    return {
        uow_id: ClaimState(uow_id, uow_id in recorded, latest.get(uow_id), held.get(uow_id),
                           slot_writer=writers.get(asked[uow_id]) if uow_id in asked else None,
                           slot_read=uow_id in asked)
        for uow_id in wanted
    }


def _states_in_one(conn: Connection, uow_ids: Sequence[str],
                   slots: Mapping[str, tuple[str, str]]) -> dict[str, ClaimState]:
    """:func:`claim_states` on PostgreSQL, one statement per ``BATCH`` units: the units asked
    for (three arrays: id, slot's destination, slot's partition) joined to their recorded
    rows, each one's latest attempt (``LATERAL``, a backward probe of its index), its lease,
    and, for a unit whose latest attempt succeeded and whose slot was given, who wrote the
    slot's latest fingerprint. One statement is one snapshot: no transaction is needed to
    see attempts, leases and fingerprints as of one instant."""
    wanted = list(dict.fromkeys(uow_ids))
    found: dict[str, ClaimState] = {}
    for begin in range(0, len(wanted), BATCH):
        ids = wanted[begin:begin + BATCH]
        for row in conn.execute(_STATES_IN_ONE, {
            "ids": ids, "dests": [slots.get(i, (None, None))[0] for i in ids],
            "parts": [slots.get(i, (None, None))[1] for i in ids],
        }).mappings().all():
            uow_id = row["uow_id"]
            latest = None if row["a_number"] is None else ATTEMPT(
                {name: row["a_" + name] for name in _ATTEMPT_COLUMNS})
            lease = None if row["l_uow_id"] is None else LEASE(
                {name: row["l_" + name] for name in _LEASE_COLUMNS})
            asked = bool(row["slot_asked"])
            found[uow_id] = ClaimState(uow_id, True, latest, lease,
                                       slot_writer=row["slot_writer"] if asked else None,
                                       slot_read=asked)
    return {uow_id: found.get(uow_id, ClaimState(uow_id, False, None, None))
            for uow_id in wanted}


_ATTEMPT_COLUMNS = tuple(column.name for column in attempts.columns)
_LEASE_COLUMNS = tuple(column.name for column in leases.columns)


def _states_in_one_query() -> Any:
    text_array = ARRAY(unit_rows.c.uow_id.type)
    asked = func.unnest(bindparam("ids", type_=text_array), bindparam("dests", type_=text_array),
                        bindparam("parts", type_=text_array)
                        ).table_valued("uow_id", "dest", "part").render_derived("asked")
    newest = (select(attempts).where(attempts.c.uow_id == asked.c.uow_id)
              .order_by(attempts.c.number.desc()).limit(1).lateral("newest"))
    writer = (select(fingerprints.c.uow_id)
              .where(fingerprints.c.destination == asked.c.dest,
                     fingerprints.c.partition == asked.c.part)
              .order_by(fingerprints.c.version.desc()).limit(1).lateral("writer"))
    slot_asked = and_(asked.c.dest.is_not(None), newest.c.outcome == "succeeded")
    return (select(unit_rows.c.uow_id,
                   *(newest.c[name].label("a_" + name) for name in _ATTEMPT_COLUMNS),
                   *(leases.c[name].label("l_" + name) for name in _LEASE_COLUMNS),
                   func.coalesce(slot_asked, false()).label("slot_asked"),
                   writer.c.uow_id.label("slot_writer"))
            .select_from(
                asked.join(unit_rows, unit_rows.c.uow_id == asked.c.uow_id)
                .outerjoin(newest, true())
                .outerjoin(leases, leases.c.uow_id == asked.c.uow_id)
                .outerjoin(writer, slot_asked)))


_STATES_IN_ONE = _states_in_one_query()


def _slot_writers(conn: Connection, slots: Sequence[tuple[str, str]]
                  ) -> dict[tuple[str, str], str | None]:
    """For each (destination, partition) with a recorded fingerprint: the unit that wrote
    its latest version (None if that version names no unit)."""
    found: dict[tuple[str, str], str | None] = {}
    for begin in range(0, len(slots), BATCH):
        part = slots[begin:begin + BATCH]
        newest = (select(fingerprints.c.destination, fingerprints.c.partition,
                         func.max(fingerprints.c.version).label("version"))
                  .where(tuple_(fingerprints.c.destination, fingerprints.c.partition).in_(part))
                  .group_by(fingerprints.c.destination, fingerprints.c.partition).subquery())
        query = select(fingerprints.c.destination, fingerprints.c.partition,
                       fingerprints.c.uow_id).join(newest, and_(
                           fingerprints.c.destination == newest.c.destination,
                           fingerprints.c.partition == newest.c.partition,
                           fingerprints.c.version == newest.c.version))
        for row in conn.execute(query):
            found[(row.destination, row.partition)] = row.uow_id
    return found


class ClaimIntents:
    """One process's intents to claim units (see the module): ``take`` before handing a unit
    to the executor, ``give_back`` after. Thread-safe; ``close`` ends every intent.

    Any failure of the intent's own connection grants the intent (and drops the connection):
    intents only spare waits, so without them workers are as correct as before, only slower.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._postgres = session.engine.dialect.name == "postgresql"
        self._conn: Connection | None = None
        self._held: set[str] = set()
        self._returning: list[str] = []  # given back, to be ended with the next round trip
        self._lock = threading.Lock()

    def take(self, uow_id: str) -> bool:
        """True: this process may claim ``uow_id`` now (no other intent on it, or intents are
        not used here); False: another process is claiming or running it."""
        if not self._postgres:
            return True
        with self._lock:
            if uow_id in self._held:
                return True
            returning, self._returning = self._returning, []
            try:
                conn = self._connection()
                if returning:  # ended in the same round trip (``give_back_later``)
                    got = bool(conn.execute(_RETURN_THEN_TAKE, {
                        "back": [_INTENT_PREFIX + back for back in returning],
                        "key": _INTENT_PREFIX + uow_id}).scalar())
                else:
                    got = bool(conn.execute(_TAKE, {"key": _INTENT_PREFIX + uow_id}).scalar())
            except Exception:
                self._drop()
                return True
            if got:
                self._held.add(uow_id)
            return got

    def give_back_later(self, uow_id: str) -> None:
        """End this process's intent on ``uow_id`` with the next round trip of the intents'
        connection: the next ``take`` (the same statement), ``flush``, ``forget_changes``,
        ``wait_for_change`` or ``close``, whichever comes first. A worker gives a unit back
        and takes the next one a moment later: one round trip a unit instead of two. Until
        then the intent only makes another worker look at the unit a little later."""
        with self._lock:
            if uow_id not in self._held:
                return
            self._held.discard(uow_id)
            if self._conn is not None and self._postgres:
                self._returning.append(uow_id)

    def flush(self) -> None:
        """End now the intents ``give_back_later`` left to the next round trip."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        returning, self._returning = self._returning, []
        if not returning or self._conn is None:
            return
        try:
            self._conn.execute(_RETURN, {"back": [_INTENT_PREFIX + back for back in returning]})
        except Exception:
            self._drop()  # closing the connection ends every intent it held

    def give_back(self, uow_id: str) -> None:
        """End this process's intent on ``uow_id`` (nothing if it holds none)."""
        with self._lock:
            if uow_id not in self._held:
                return
            self._held.discard(uow_id)
            if self._conn is None:
                return
            # and tell the workers waiting (``wait_for_change``), in the same round trip
            self._returning.append(uow_id)
            self._flush()

    def forget_changes(self) -> None:
        """Drop the changes told so far (``wait_for_change``): the caller is about to read
        the units afresh, which sees them."""
        if not self._postgres:
            return
        with self._lock:
            self._flush()
            try:
                for _ in self._listening().notifies(timeout=0.0):
                    pass
            except Exception:
                self._drop()

    def wait_for_change(self, seconds: float) -> bool | None:
        """Wait up to ``seconds`` for another process to give a unit back (its unit settled,
        or left): True as soon as one does, False after ``seconds`` without one, None when
        this process cannot be told (SQLite, or the connection failed): the caller sleeps
        instead. Told by ``NOTIFY`` on the intents' own connection, which listens on ``CHANNEL``."""
        if not self._postgres:
            return None
        with self._lock:
            self._flush()
            try:
                raw = self._listening()
                deadline = time.monotonic() + seconds
                while True:
                    for told in raw.notifies(timeout=max(0.0, deadline - time.monotonic()),
                                             stop_after=1):
                        if told.pid != raw.info.backend_pid:  # not our own give_back
                            return True
                    if time.monotonic() >= deadline:
                        return False
            except Exception:
                self._drop()
                return None

    def close(self) -> None:
        """End every intent now (a dead process's end when its connection does, a moment
        after: the server notices the closed connection)."""
        with self._lock:
            self._flush()  # and tell the waiting workers
            if self._conn is not None and self._held:
                try:
                    self._conn.execute(text("SELECT pg_advisory_unlock_all()"))
                except Exception:
                    pass
            self._drop()

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self._session.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT")
            try:
                conn.execute(text(f"LISTEN {CHANNEL}"))
            except Exception:
                conn.invalidate()
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _listening(self) -> Any:
        """The psycopg connection of the intents, which listens on ``CHANNEL``."""
        return self._connection().connection.dbapi_connection

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._held.clear()
        if conn is not None:
            try:
                conn.invalidate()  # never back to the pool with session locks held
                conn.close()
            except Exception:
                pass
