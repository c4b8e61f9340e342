"""Batched reads of a range of intervals, for planning a backfill without one query per unit.

A backfill over a year of hourly units decides, for each of its 26,280 units, whether the unit
is already verified: recorded, its latest attempt succeeded, and its partition's latest
fingerprint recorded by it. Read one unit at a time, that is several queries a unit (about a
millisecond each) before the first new unit starts, and again on every rerun. These functions
read the same facts for a window of intervals in a few statements, all in one read snapshot:

* :func:`range_facts`: a window's units, their latest attempts and the latest fingerprints of
  their partitions, only the columns the plan decides with;
* :func:`latest_fingerprints_of`: the latest fingerprint of each (destination, partition);
* :func:`latest_schemas_of`: only the schema recorded with each partition's latest one;
* :func:`latest_units`: a task's units with the latest intervals (``twice.engine.timeout_advice``);
* :func:`unsettled_of_slot`: the other units of a task and interval whose latest attempt is
  unsettled (``twice.engine.siblings``).

Read-only: a read snapshot of its own (or the caller's transaction).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from sqlalchemy import ARRAY, Select, and_, bindparam, func, or_, select, true
from sqlalchemy.engine import Connection

from twice.core.outcomes import UNSETTLED_OUTCOMES
from twice.ledger.engine import is_postgres, one_of
from twice.ledger.prepared import prepare, run
from twice.ledger.records import FingerprintRecord, UnitRecord
from twice.ledger.rows import FINGERPRINT, UNIT
from twice.ledger.schema import attempts, fingerprints, units

if TYPE_CHECKING:
    from twice.ledger.store import Ledger

T = TypeVar("T")

#: Bound values per ``IN (...)`` statement (SQLite allows 32,766 a statement; PostgreSQL
#: 65,535): a longer list is read in several statements of this many.
CHUNK = 900


class WindowUnit(NamedTuple):
    """A recorded unit as the plan's window needs it: no record built, no instant parsed
    (``label`` is the interval's, from the identity strings the ledger stores)."""

    uow_id: str
    task: str
    label: str
    input_version: str


class WindowAttempt(NamedTuple):
    """A unit's latest attempt as the plan's window needs it (whether it settled the unit)."""

    number: int
    outcome: str | None
    started_at: datetime


@dataclass(frozen=True)
class RangeFacts:
    """What the ledger holds for a window of intervals, read at once (see the module).

    ``partitions``: the partitions whose latest fingerprints were read (those of the window's
    units): for them, a slot absent from ``fingerprints`` has none recorded."""

    units: tuple[WindowUnit, ...]
    latest_attempts: dict[str, WindowAttempt]  # uow_id -> its latest attempt
    fingerprints: dict[tuple[str, str], FingerprintRecord]  # (destination, partition) -> latest
    partitions: frozenset[str]


def _retried(read: Callable[..., T]) -> Callable[..., T]:
    """``read(ledger, ...)`` run again whole on a transient fault, as every ``Ledger`` read
    is (``Session.retrying``); inside the caller's transaction or retry, once."""
    @functools.wraps(read)
    def call(ledger: Ledger, *args: Any, **kwargs: Any) -> T:
        session = ledger._session
        if session.current() is not None or session.in_retry():
            return read(ledger, *args, **kwargs)
        return session.retrying(lambda: read(ledger, *args, **kwargs),
                                what=f"{read.__name__}()")
    return call


@_retried
def range_facts(ledger: Ledger, pipeline: str, first_start: datetime, last_start: datetime,
                destinations: Collection[str], tasks: Collection[str]) -> RangeFacts:
    """The units of ``pipeline``'s ``tasks`` whose interval starts in ``[first_start,
    last_start]`` with each one's latest attempt, and the latest fingerprint in each of
    ``destinations`` of their intervals' partitions (``partition_key``: the interval's label):
    one read snapshot, a few statements (not one a unit).

    On PostgreSQL the window is two statements whose cost follows the window, not the ledger:
    the units with their latest attempts (``LATERAL``, one index probe a unit) and the latest
    fingerprints of every destination and partition (the same). Joined by ``IN`` lists and
    grouped, the planner reads whole tables once the window is a few percent of them: about
    70 ms a window of 1,500 units in a ledger of 20,000, where these take about 10."""
    with ledger.snapshot(), ledger._session.read() as conn:
        if is_postgres(conn):
            found, latest = _window_units_with_attempts(conn, pipeline, tasks, first_start,
                                                        last_start)
        else:
            found = _window_units(conn, pipeline, tasks, first_start, last_start)
            latest = _window_attempts(conn, [unit.uow_id for unit in found])
        labels = frozenset(unit.label for unit in found)
        prints = _latest_fingerprints(conn, destinations, labels)
    return RangeFacts(tuple(found), latest, prints, labels)


def _window_query(pipeline: str, tasks: Collection[str], first_start: datetime,
                  last_start: datetime, conn: Connection, *extra: Any) -> Select[Any]:
    """The window's units (on the units' (pipeline, task, start) index: the tasks are named),
    only the columns the plan's window reads, in interval order; ``extra`` columns after."""
    return (select(units.c.uow_id, units.c.task, units.c.interval_start, units.c.interval_end,
                   units.c.input_version, *extra)
            .where(units.c.pipeline == pipeline,
                   one_of(conn, units.c.task, sorted(tasks)),
                   units.c.interval_start_utc >= first_start,
                   units.c.interval_start_utc <= last_start)
            .order_by(units.c.interval_start_utc, units.c.task, units.c.uow_id))


def _window_units(conn: Connection, pipeline: str, tasks: Collection[str],
                  first_start: datetime, last_start: datetime) -> list[WindowUnit]:
    """The window's units (one statement)."""
    query = _window_query(pipeline, tasks, first_start, last_start, conn)
    return [WindowUnit(uow_id, task, f"{start}/{end}", version)
            for uow_id, task, start, end, version in conn.execute(query).all()]


def _window_units_with_attempts(
    conn: Connection, pipeline: str, tasks: Collection[str], first_start: datetime,
    last_start: datetime,
) -> tuple[list[WindowUnit], dict[str, WindowAttempt]]:
    """The window's units and each one's latest attempt, in one statement (PostgreSQL)."""
    newest = (select(attempts.c.number, attempts.c.outcome, attempts.c.started_at)
              .where(attempts.c.uow_id == units.c.uow_id)
              .order_by(attempts.c.number.desc()).limit(1).lateral("newest"))
    query = (_window_query(pipeline, tasks, first_start, last_start, conn, newest.c.number,
                           newest.c.outcome, newest.c.started_at)
             .select_from(units.outerjoin(newest, true())))
    found: list[WindowUnit] = []
    latest: dict[str, WindowAttempt] = {}
    for uow_id, task, start, end, version, number, outcome, started_at in conn.execute(
            query).all():  # fetched at once: iterating fetches row by row
        found.append(WindowUnit(uow_id, task, f"{start}/{end}", version))
        if number is not None:
            latest[uow_id] = WindowAttempt(number, outcome, started_at)
    return found, latest


@_retried
def latest_units(ledger: Ledger, pipeline: str, task: str, limit: int) -> list[UnitRecord]:
    """The ``limit`` units of ``pipeline``'s ``task`` with the latest intervals, in interval
    order (``ledger.units(...)[-limit:]`` without reading every unit of the task)."""
    query = (select(units)
             .where(units.c.pipeline == pipeline, units.c.task == task)
             .order_by(units.c.interval_start_utc.desc(), units.c.pipeline.desc(),
                       units.c.task.desc(), units.c.uow_id.desc())
             .limit(limit))
    with ledger._session.read() as conn:
        return [UNIT(row) for row in conn.execute(query).mappings()][::-1]


def _window_attempts(conn: Connection, uow_ids: Sequence[str]) -> dict[str, WindowAttempt]:
    """Each unit's latest attempt (highest number), only the three columns the plan's window
    reads; a unit without attempts is absent. One statement per ``CHUNK`` units."""
    found: dict[str, WindowAttempt] = {}
    for ids in _chunks(uow_ids):
        newest = (select(attempts.c.uow_id, func.max(attempts.c.number).label("number"))
                  .where(one_of(conn, attempts.c.uow_id, ids))
                  .group_by(attempts.c.uow_id).subquery())
        query = select(attempts.c.uow_id, attempts.c.number, attempts.c.outcome,
                       attempts.c.started_at).join(newest, and_(
                           attempts.c.uow_id == newest.c.uow_id,
                           attempts.c.number == newest.c.number))
        for uow_id, number, outcome, started_at in conn.execute(query).all():
            found[uow_id] = WindowAttempt(number, outcome, started_at)
    return found


@_retried
def unsettled_of_slot(ledger: Ledger, pipeline: str, task: str, start: datetime, end: datetime,
                      other_than: str) -> list[str]:
    """The units of ``pipeline``'s ``task`` for the interval ``[start, end)``, other than
    ``other_than``, whose latest attempt is ``running`` or ``unknown``, in unit id order. One
    statement on the units' (pipeline, task, start) index, built once (``prepared``): it runs
    in every claim of a unit that owns a destination, and nothing is found in the usual case."""
    values = {"pipeline": pipeline, "task": task, "start": start, "end": end,
              "other_than": other_than}
    with ledger._session.read() as conn:
        return [row["uow_id"] for row in run(conn, _UNSETTLED_OF_SLOT, values).all()]


def _unsettled_of_slot() -> Any:
    newest = (select(attempts.c.uow_id, func.max(attempts.c.number).label("number"))
              .join(units, units.c.uow_id == attempts.c.uow_id)
              .where(units.c.pipeline == bindparam("pipeline"),
                     units.c.task == bindparam("task"),
                     units.c.interval_start_utc == bindparam("start"),
                     units.c.interval_end_utc == bindparam("end"),
                     units.c.uow_id != bindparam("other_than"))
              .group_by(attempts.c.uow_id).subquery())
    return prepare(select(attempts.c.uow_id)
                   .join(newest, and_(attempts.c.uow_id == newest.c.uow_id,
                                      attempts.c.number == newest.c.number))
                   # each compared alone: IN (...) expands per execution and so would run
                   # through SQLAlchemy every time instead of as the string compiled once
                   .where(or_(*(attempts.c.outcome == outcome
                                for outcome in UNSETTLED_OUTCOMES)))
                   .order_by(attempts.c.uow_id))


_UNSETTLED_OF_SLOT = _unsettled_of_slot()


@_retried
def latest_fingerprints_of(ledger: Ledger, destinations: Collection[str],
                           partitions: Collection[str]
                           ) -> dict[tuple[str, str], FingerprintRecord]:
    """The latest fingerprint of each ``destinations`` x ``partitions`` slot that has one.
    One statement on PostgreSQL; elsewhere one per destination and ``CHUNK`` partitions."""
    with ledger._session.read() as conn:
        return _latest_fingerprints(conn, destinations, partitions)


def _latest_fingerprints(conn: Connection, destinations: Collection[str],
                         partitions: Collection[str]
                         ) -> dict[tuple[str, str], FingerprintRecord]:
    found: dict[tuple[str, str], FingerprintRecord] = {}
    for query in _newest_queries(conn, destinations, partitions, fingerprints):
        for row in conn.execute(query).mappings().all():
            record = FINGERPRINT(row)
            found[(record.destination, record.partition)] = record
    return found


@_retried
def latest_schemas_of(ledger: Ledger, destination: str, partitions: Collection[str]
                      ) -> dict[str, str | None]:
    """The schema signature recorded with the latest fingerprint of each of ``destination``'s
    ``partitions`` that has one (``schema_conflicts``' check of a whole range before it
    starts): two columns a partition, no record built. One statement on PostgreSQL; elsewhere
    one per ``CHUNK``."""
    found: dict[str, str | None] = {}
    with ledger._session.read() as conn:
        for query in _newest_queries(conn, [destination], partitions, fingerprints.c.partition,
                                     fingerprints.c.schema_signature):
            found.update((partition, schema) for partition, schema in conn.execute(query).all())
    return found


@_retried
def recorded_schemas(ledger: Ledger, destination: str) -> set[str | None]:
    """Every schema signature any fingerprint of ``destination`` recorded, whatever its
    partition or version: when it is one, every partition's latest agrees without reading
    them (``schema_conflicts``). One statement."""
    query = (select(fingerprints.c.schema_signature)
             .where(fingerprints.c.destination == destination).distinct())
    with ledger._session.read() as conn:
        return {schema for (schema,) in conn.execute(query)}


def _newest_queries(conn: Connection, destinations: Collection[str],
                    partitions: Collection[str], *columns: Any) -> list[Select[Any]]:
    """The statements reading ``columns`` of the latest fingerprint of every ``destinations`` x
    ``partitions`` slot that has one: on PostgreSQL one (:func:`_newest_by_probe`), elsewhere
    one per destination and ``CHUNK`` partitions (:func:`_newest_fingerprints`)."""
    chosen, keys = sorted(set(destinations)), sorted(set(partitions))
    if not chosen or not keys:
        return []
    if is_postgres(conn):
        return [_newest_by_probe(chosen, keys, *columns)]
    return [_newest_fingerprints(conn, destination, batch, *columns)
            for destination in chosen for batch in _chunks(keys)]


def _newest_fingerprints(conn: Connection, destination: str, keys: Sequence[str], *columns: Any
                         ) -> Select[Any]:
    """``columns`` of the latest fingerprint (highest version) of each of ``destination``'s
    partitions ``keys`` that has one."""
    newest = (select(fingerprints.c.partition, func.max(fingerprints.c.version).label("version"))
              .where(fingerprints.c.destination == destination,
                     one_of(conn, fingerprints.c.partition, keys))
              .group_by(fingerprints.c.partition).subquery())
    return select(*columns).join(newest, and_(fingerprints.c.destination == destination,
                                              fingerprints.c.partition == newest.c.partition,
                                              fingerprints.c.version == newest.c.version))


def _newest_by_probe(destinations: Sequence[str], keys: Sequence[str], *columns: Any
                     ) -> Select[Any]:
    """:func:`_newest_fingerprints` for every ``destinations`` x ``keys`` slot at once, on
    PostgreSQL: the slots are two array parameters, and each slot's latest version is one
    backward probe of the (destination, partition, version) index (``LATERAL ... LIMIT 1``)."""
    slot_type = ARRAY(fingerprints.c.partition.type)
    dest = func.unnest(bindparam(None, list(destinations), type_=slot_type)).table_valued(
        "destination").render_derived("dest")
    part = func.unnest(bindparam(None, list(keys), type_=slot_type)).table_valued(
        "partition").render_derived("part")
    newest = (select(*columns)
              .where(fingerprints.c.destination == dest.c.destination,
                     fingerprints.c.partition == part.c.partition)
              .order_by(fingerprints.c.version.desc()).limit(1).lateral("newest"))
    return select(*newest.c).select_from(dest.join(part, true()).join(newest, true()))


def _chunks(values: Iterable[str]) -> Iterable[list[str]]:
    batch: list[str] = []
    for value in values:
        batch.append(value)
        if len(batch) == CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch
