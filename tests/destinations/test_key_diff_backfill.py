"""A backfill into a table with versions (Delta, Iceberg) records and prints each interval's
key diff (added, removed, changed keys, read from the table's versions) next to its
fingerprint diff."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from tests.destinations.key_diff_pipeline import SCHEDULE, SPECS, build

from twice.cli.backfill_cmd import describe_run
from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger


@pytest.mark.parametrize("engine", sorted(SPECS))
def test_backfill_records_and_prints_the_key_diff(tmp_path: Path, engine: str) -> None:
    spec = SPECS[engine].format(tmp=tmp_path)
    version = {"v": 1}
    pipeline = build(spec, version)
    spans = [SCHEDULE.interval_for(date(2026, 11, 1 + i)) for i in range(2)]
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        first = run_backfill(pipeline, ledger, spans, deadline=None)
        assert first.ok
        created = first.runs[0].diff
        assert created is not None and created.keys is not None
        assert (created.keys["added"], created.keys["removed"]) == (4, 0)
        version["v"] = 2
        second = run_backfill(pipeline, ledger, spans, force=True, deadline=None)
        assert second.ok
        for run in second.runs:
            assert run.diff is not None and run.diff.keys is not None
            keys = run.diff.keys
            assert (keys["added"], keys["removed"], keys["changed"]) == (1, 1, 1)
            assert (keys["added_keys"], keys["removed_keys"], keys["changed_keys"]) == (
                [{"id": 7}], [{"id": 0}], [{"id": 1}])
            line = describe_run(run.to_dict())
            assert "checksum CHANGED; keys +1 -1 ~1" in line, line
