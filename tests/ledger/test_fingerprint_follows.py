"""A partition's new fingerprint is compared with the version it follows, read under the
partition's lock: a writer that records between the read and the lock cannot make the diff
compare with a version the new one does not follow (``Ledger.record_fingerprint(after=)``)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from twice.define.pipeline import Task
from twice.destinations.fingerprint import Fingerprint
from twice.engine.verification import (
    MeasuredPartition,
    PartitionDiff,
    SchemaChangeError,
    record_measured,
)
from twice.ledger import Ledger

DEST, PART = "sqlite:///out.db#t", "2024-01-01"
TASK = cast(Task, SimpleNamespace(name="load", destination=DEST))


def measured(rows: int, signature: str = "day:date,v:integer") -> MeasuredPartition:
    return MeasuredPartition(PART, signature, Fingerprint(rows, f"c{rows}", ("day", "v")),
                             "commit record")


def test_after_sees_the_version_it_follows_and_refusing_records_nothing(ledger: Ledger) -> None:
    seen: list[Any] = []
    first = ledger.record_fingerprint(DEST, PART, 10, "c10", after=seen.append)
    second = ledger.record_fingerprint(DEST, PART, 20, "c20", after=seen.append)
    assert seen[0] is None and seen[1].version == first.version == 1
    assert second.version == 2

    def refuse(before: Any) -> None:
        raise SchemaChangeError("no")

    with pytest.raises(SchemaChangeError):
        ledger.record_fingerprint(DEST, PART, 30, "c30", after=refuse)
    with ledger.transaction(), pytest.raises(SchemaChangeError):  # inside a transaction too
        ledger.record_fingerprint(DEST, PART, 30, "c30", after=refuse)
    assert [f.version for f in ledger.fingerprints(DEST, PART)] == [1, 2]


def test_a_schema_change_refused_records_nothing_and_accepted_is_flagged(ledger: Ledger) -> None:
    record_measured(ledger, TASK, None, None, measured(10))
    with pytest.raises(SchemaChangeError):
        record_measured(ledger, TASK, None, None, measured(10, "day:date"))
    assert len(ledger.fingerprints(DEST, PART)) == 1
    diff = record_measured(ledger, TASK, None, None, measured(12, "day:date"),
                           accept_schema_change=True)
    assert diff.schema_changed is True and diff.rows_before == 10 and diff.version == 2


@pytest.mark.postgres
def test_the_diff_compares_with_a_version_recorded_while_it_waited(postgres_url: str) -> None:
    """Another process records version 1 and holds its transaction open: the diff of the
    version recorded next is against that version 1 (before the fix, the previous version was
    read before the lock: none, beside a recorded version 2)."""
    with Ledger.open(postgres_url) as first, Ledger.open(postgres_url) as second:
        got: list[PartitionDiff] = []
        waiter = threading.Thread(
            target=lambda: got.append(record_measured(second, TASK, None, None, measured(20))))
        with first.transaction():
            first.record_fingerprint(DEST, PART, 10, "c10")
            waiter.start()
            time.sleep(0.5)
            assert waiter.is_alive()  # waits on the partition's lock
        waiter.join(10)
        (diff,) = got
        assert (diff.version, diff.rows_before, diff.checksum_before) == (2, 10, "c10")
