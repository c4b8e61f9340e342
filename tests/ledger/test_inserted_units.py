"""A transaction that inserts a unit of work knows its other tables hold nothing about it but
what the same transaction writes (``twice.ledger.inserted``): those reads are skipped, and a
table written since is read again. On SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from tests.ledger.ledger_helpers import make_uow

from twice.ledger import Ledger


@contextmanager
def selects(ledger: Ledger) -> Iterator[Counter[str]]:
    """The tables the block's SELECTs read from, counted."""
    engine = ledger._session.engine
    seen: Counter[str] = Counter()

    def on_execute(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        found = re.match(r"\s*SELECT\b.*?\bFROM (\w+)", statement, re.DOTALL | re.IGNORECASE)
        if found:
            seen[found.group(1)] += 1

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


UNIT_TABLES = ("twice_attempts", "twice_leases", "twice_observations", "twice_decisions",
               "twice_errors", "twice_nonfatal_errors", "twice_job_generations")


def test_a_new_units_tables_are_not_read_in_its_transaction(ledger: Ledger) -> None:
    uow = make_uow()
    with ledger.transaction(), selects(ledger) as read:
        ledger.record_unit(uow)
        assert ledger.attempts(uow.uow_id) == []
        assert ledger.lease(uow.uow_id) is None
        assert ledger.observations(uow.uow_id) == []
        assert ledger.decisions(uow.uow_id) == []
        assert ledger.errors(uow.uow_id) == []
        assert ledger.nonfatal_errors(uow.uow_id) == []
        assert ledger.job_generations(uow.uow_id) == []
    assert not {table: n for table, n in read.items() if table in UNIT_TABLES}, read


def test_what_the_transaction_writes_is_read_back(ledger: Ledger) -> None:
    uow = make_uow()
    with ledger.transaction():
        ledger.record_unit(uow)
        assert ledger.acquire_lease(uow.uow_id, "h", 60).acquired
        held = ledger.lease(uow.uow_id)
        assert held is not None and held.holder == "h"
        generation = ledger.generation_for_attempt(uow.uow_id)
        assert [g.generation for g in ledger.job_generations(uow.uow_id)] == [
            generation.generation]
        first = ledger.begin_attempt(uow.uow_id, holder="h")
        assert [a.number for a in ledger.attempts(uow.uow_id)] == [1] == [first.number]
        ledger.record_observation(uow.uow_id, "running", source="test", attempt=1)
        assert [o.state for o in ledger.observations(uow.uow_id)] == ["running"]
        ledger.record_decision(uow.uow_id, "retry-eligible", reason="test", attempt=1)
        assert [d.decision for d in ledger.decisions(uow.uow_id)] == ["retry-eligible"]
        ledger.record_error(uow.uow_id, error_class="E", message="m",
                            classification="transient", attempt=1)
        assert [e.error_class for e in ledger.errors(uow.uow_id)] == ["E"]
        ledger.record_nonfatal(uow.uow_id, "warned", attempt=1)
        assert len(ledger.nonfatal_errors(uow.uow_id)) == 1
        assert ledger.begin_attempt(uow.uow_id, holder="h").number == 2


def test_a_unit_recorded_earlier_is_read(ledger: Ledger) -> None:
    uow = make_uow()
    ledger.record_unit(uow)
    ledger.begin_attempt(uow.uow_id, holder="h")
    with ledger.transaction(), selects(ledger) as read:
        ledger.record_unit(uow)  # already there: this transaction knows nothing more
        assert [a.number for a in ledger.attempts(uow.uow_id)] == [1]
        assert ledger.observations(uow.uow_id) == []
    assert read["twice_attempts"] >= 1 and read["twice_observations"] >= 1, read


def test_appended_rows_are_answered_from_the_transaction_exactly_as_a_read(
    ledger: Ledger,
) -> None:
    """Observations, decisions and errors are append-only: in the transaction that inserted
    their unit, they are returned from what it wrote, equal to what a read returns after
    commit (times in UTC, observations in observed order)."""
    from datetime import timedelta, timezone

    uow = make_uow()
    paris = timezone(timedelta(hours=1))
    now = ledger._session.now()  # the fixture's clock
    with ledger.transaction(), selects(ledger) as read:
        ledger.record_unit(uow)
        ledger.begin_attempt(uow.uow_id, holder="h")
        ledger.record_observation(uow.uow_id, "running", source="late",
                                  observed_at=(now - timedelta(seconds=5)).astimezone(paris),
                                  attempt=1, detail={"n": 1})
        ledger.record_observation(uow.uow_id, "queued", source="early",
                                  observed_at=now - timedelta(seconds=60), attempt=1)
        ledger.record_decision(uow.uow_id, "retry-eligible", reason="r", attempt=1)
        ledger.record_error(uow.uow_id, error_class="E", message="m",
                            classification="transient", attempt=1)
        ledger.record_nonfatal(uow.uow_id, "warned", attempt=1)
        inside = (ledger.observations(uow.uow_id), ledger.decisions(uow.uow_id),
                  ledger.errors(uow.uow_id), ledger.nonfatal_errors(uow.uow_id))
    for table in ("twice_observations", "twice_decisions", "twice_errors",
                  "twice_nonfatal_errors"):
        assert read[table] == 0, read
    assert [o.source for o in inside[0]] == ["early", "late"]
    after = (ledger.observations(uow.uow_id), ledger.decisions(uow.uow_id),
             ledger.errors(uow.uow_id), ledger.nonfatal_errors(uow.uow_id))
    assert inside == after
    assert [str(o.observed_at.utcoffset()) for o in inside[0]] == ["0:00:00"] * 2
