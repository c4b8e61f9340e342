"""The schema check before a backfill (``schema_conflicts``) reads each partition's latest schema
only when the destination ever recorded more than one: a restart over a year of verified units
must not read every partition before its first new unit, and a destination with one schema
cannot disagree with itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.backfill import helpers

import twice.ledger.ranges as ranges
from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    root = helpers.make_workdir(tmp_path / "wh")
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield root, ledger, helpers.example().build_pipeline(root)
    ledger.close()


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = ranges.latest_schemas_of

    def spied(ledger: Ledger, destination: str, partitions: Any) -> Any:
        read.append(destination)
        return real(ledger, destination, partitions)

    monkeypatch.setattr(ranges, "latest_schemas_of", spied)
    return read


def test_one_recorded_schema_reads_no_partition(setup: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, ledger, pipeline = setup
    spans = helpers.intervals(3)
    assert run_backfill(pipeline, ledger, spans).ok
    read = _spy(monkeypatch)
    again = run_backfill(pipeline, ledger, spans)
    assert again.ok and set(again.counts()) == {"skipped"}
    assert read == []


def test_an_older_schema_is_read_per_partition_and_only_the_latest_counts(
        setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition whose older version recorded another schema: the range is read partition by
    partition, and since every latest version agrees with the table, nothing is refused."""
    _, ledger, pipeline = setup
    spans = helpers.intervals(2)
    assert run_backfill(pipeline, ledger, spans).ok
    task = pipeline.get_task("transform")
    latest = ledger.latest_fingerprint(task.destination, spans[0].label)
    assert latest is not None and latest.schema
    ledger.record_fingerprint(task.destination, spans[0].label, latest.row_count,
                              latest.checksum, schema="older: a different schema")
    ledger.record_fingerprint(task.destination, spans[0].label, latest.row_count,
                              latest.checksum, uow_id=latest.uow_id, attempt=latest.attempt,
                              columns=latest.columns, algorithm=latest.algorithm,
                              schema=latest.schema)
    read = _spy(monkeypatch)
    again = run_backfill(pipeline, ledger, spans)
    assert again.refusal is None, again.refusal
    assert task.destination in read
