"""A backfill plan's window (``twice.ledger.ranges.range_facts``) against the ledger read one unit
at a time, on both engines: the same units, latest attempts and latest fingerprints, whatever
the mix of attempts, versions, other pipelines and tasks. On PostgreSQL the window is two
statements, whatever its size (each unit's latest attempt and each slot's latest fingerprint
is an index probe, so a window's cost does not grow with the ledger)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event
from tests.ledger.ledger_helpers import START

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.ledger import Ledger
from twice.ledger.ranges import (
    latest_fingerprints_of,
    latest_schemas_of,
    range_facts,
    recorded_schemas,
)

TASKS = ("extract", "load", "report")
DESTINATIONS = ("warehouse.a", "warehouse.b")
HOURS = 30


def _unit(pipeline: str, task: str, hour: int, version: str) -> UnitOfWork:
    start = START + timedelta(hours=hour)
    return UnitOfWork(pipeline=pipeline, task=task, interval=Interval(start, start + timedelta(
        hours=1)), destination=f"warehouse.{task}", transform_version="t1",
        input_partition=f"h{hour}", input_version=version)


def _fill(ledger: Ledger, seed: int) -> None:
    """Units of three tasks, a task the window is not asked for and another pipeline, with
    0-3 attempts each (the last one of any outcome) and 0-3 fingerprint versions a slot."""
    rng = random.Random(seed)
    for hour in range(HOURS):
        for pipeline, task in [("funds", t) for t in TASKS] + [("funds", "gone"),
                                                                ("other", "extract")]:
            for version in ("v1", "v2")[:rng.randint(0, 2)]:
                uow = _unit(pipeline, task, hour, version)
                ledger.record_unit(uow)
                count = rng.randint(0, 3)
                for number in range(1, count + 1):
                    ledger.begin_attempt(uow.uow_id, holder="h")
                    outcome = ("succeeded" if number == count and rng.random() < 0.6
                               else rng.choice(["failed-transient", "unknown", "running"]))
                    if outcome != "running" or number < count:
                        ledger.finish_attempt(uow.uow_id, number, "failed-transient"
                                              if outcome == "running" else outcome)
        label = Interval(START + timedelta(hours=hour), START + timedelta(hours=hour + 1)).label
        for destination in DESTINATIONS:
            for _ in range(rng.randint(0, 3)):
                ledger.record_fingerprint(destination, label, rng.randint(0, 9), "c",
                                          schema=rng.choice(["s1", "s2", None]))


def _expected(ledger: Ledger, first: int, last: int, tasks: tuple[str, ...]
              ) -> tuple[list[Any], dict[str, Any], dict[Any, Any]]:
    """The window's facts from the ledger's one-unit reads."""
    found, latest, prints = [], {}, {}
    for record in ledger.units(pipeline="funds"):
        hours = (record.interval.start - START) / timedelta(hours=1)
        if record.task not in tasks or not first <= hours <= last:
            continue
        found.append((record.uow_id, record.task, record.interval.label, record.input_version))
        attempts = ledger.attempts(record.uow_id)
        if attempts:
            newest = attempts[-1]
            latest[record.uow_id] = (newest.number, newest.outcome, newest.started_at)
        for destination in DESTINATIONS:
            recorded = ledger.latest_fingerprint(destination, record.interval.label)
            if recorded is not None:
                prints[(destination, record.interval.label)] = recorded
    return found, latest, prints


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_window_holds_what_the_ledger_holds_unit_by_unit(ledger: Ledger, seed: int) -> None:
    _fill(ledger, seed)
    for first, last, tasks in [(0, HOURS, TASKS), (5, 12, TASKS), (3, 20, ("load",)),
                               (40, 50, TASKS)]:
        facts = range_facts(ledger, "funds", START + timedelta(hours=first),
                            START + timedelta(hours=last), DESTINATIONS, tasks)
        found, latest, prints = _expected(ledger, first, last, tasks)
        assert sorted(tuple(unit) for unit in facts.units) == sorted(found)
        assert [unit.label for unit in facts.units] == sorted(
            unit.label for unit in facts.units)  # in interval order
        assert {uow_id: tuple(attempt) for uow_id, attempt in facts.latest_attempts.items()
                } == latest
        assert facts.fingerprints == prints
        assert facts.partitions == {label for _, _, label, _ in found}


def test_latest_fingerprints_and_schemas_of_many_slots(ledger: Ledger) -> None:
    _fill(ledger, 7)
    labels = [*sorted({unit.interval.label for unit in ledger.units()}), "no/such"]
    assert latest_fingerprints_of(ledger, DESTINATIONS, labels) == {
        (destination, label): recorded for destination in DESTINATIONS for label in labels
        if (recorded := ledger.latest_fingerprint(destination, label)) is not None}
    assert latest_schemas_of(ledger, "warehouse.a", labels) == {
        label: recorded.schema for label in labels
        if (recorded := ledger.latest_fingerprint("warehouse.a", label)) is not None}
    assert recorded_schemas(ledger, "warehouse.a") == {
        recorded.schema for label in labels
        for recorded in ledger.fingerprints("warehouse.a", label)}
    assert latest_fingerprints_of(ledger, DESTINATIONS, []) == {}


@pytest.mark.postgres
def test_on_postgresql_a_window_is_two_statements(postgres_url: str) -> None:
    with Ledger.open(postgres_url) as ledger:
        _fill(ledger, 4)
        sent: list[str] = []

        def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                sent.append(statement)

        event.listen(ledger._session.engine, "before_cursor_execute", seen)
        facts = range_facts(ledger, "funds", START, START + timedelta(hours=HOURS),
                            DESTINATIONS, TASKS)
        assert facts.units and facts.fingerprints
        assert len(sent) == 2, sent
