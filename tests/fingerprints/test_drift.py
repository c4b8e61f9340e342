"""A backfill shows drift: the partition as it was before the rerun, against its last record.

Issue 18: a backfill compared only the new output with the last *recorded* version, so rows
deleted behind twice's back showed as "rows 10 -> 10, unchanged". Now the partition is measured
before the rerun writes: the drift (10 -> 8 behind twice's back) and the change (8 -> 10) are
printed, carried in the diff and recorded in the ledger as a ``drift`` observation.

Issue 38: a partition the backfill would skip as verified is measured only on request
(``--verify-untouched``, ``verify_untouched=True``); a forced rerun measures what it rewrites.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow.compute as pc
from fp_cli import D1, backfill, flat, unit_line, write_pipeline

from twice.define.load import load_pipeline
from twice.drivers.backfill import plan_backfill, run_backfill
from twice.ledger import Ledger


def _delete_two(target):  # type: ignore[no-untyped-def]
    target.edit(D1, sql=f"DELETE FROM {{t}} WHERE id < 2 AND day = {target.day_literal(D1)}",
                change=lambda table: table.filter(pc.greater_equal(table["id"], 2)))


def _drift_observations(ledger_url: str) -> list:  # type: ignore[type-arg]
    with Ledger.open(ledger_url) as ledger:
        units = {f.uow_id for f in ledger.latest_fingerprints() if f.uow_id}
        return [o for u in sorted(units) for o in ledger.observations(u) if o.state == "drift"]


def test_rows_deleted_by_hand_show_as_drift_in_the_next_backfill(engine: str, engines,
                                                                 tmp_path) -> None:
    target = engines.target(engine)
    pipeline = write_pipeline(tmp_path, target.spec)
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert backfill(pipeline, ledger).exit_code == 0
    _delete_two(target)
    plain = backfill(pipeline, ledger, "--dry-run", "--json")  # on the ledger's word
    assert {i["action"] for i in json.loads(plain.output)["items"]} == {"skip"}
    dry = backfill(pipeline, ledger, "--dry-run", "--json", "--verify-untouched")
    [item] = [i for i in json.loads(dry.output)["items"] if i["interval"].startswith(D1)]
    assert item["action"] == "run" and "10 -> 8 rows" in item["reason"]
    assert _drift_observations(ledger) == []  # a dry run records nothing
    result = backfill(pipeline, ledger, "--verify-untouched")
    assert result.exit_code == 0, result.output
    line = unit_line(result.output, D1)
    assert "v2: rows 10 -> 10" in line  # against the last record alone: looks unchanged
    assert "drift: 10 -> 8 rows behind twice's back (checksum changed, v1)" in line
    assert "change: 8 -> 10 rows (checksum changed)" in line
    assert "drift: 1 partition(s) had been changed behind twice's back" in flat(result.output)
    [observation] = _drift_observations(ledger)
    assert observation.source == "fingerprint"
    assert (observation.detail["rows_recorded"], observation.detail["rows_now"]) == (10, 8)
    assert observation.detail["columns"] == ["amount", "day", "id", "name"]
    assert observation.detail["version"] == 1 and observation.detail["drifted"] is True
    again = backfill(pipeline, ledger, "--verify-untouched")  # repaired: nothing to rerun
    assert "drift" not in again.output


def test_drift_is_in_the_json_diff_also_on_a_forced_backfill(engines, tmp_path) -> None:
    target = engines.target("duckdb", key_columns=("day", "id"))
    pipeline = write_pipeline(tmp_path, target.spec, mode="upsert")
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert backfill(pipeline, ledger).exit_code == 0
    target.sql(f"UPDATE {{t}} SET amount = -amount WHERE id = 7 AND day = DATE '{D1}'")
    result = backfill(pipeline, ledger, "--force", "--json")
    assert result.exit_code == 0, result.output
    runs = {r["interval"][:10]: r for r in json.loads(result.output)["runs"]}
    diff, drift = runs[D1]["diff"], runs[D1]["drift"]
    assert diff["drifted"] is True and diff["rows_now"] == 10 and diff["rows_before"] == 10
    assert diff["checksum_now"] != diff["checksum_before"] == diff["checksum_after"]
    assert drift["rows_now"] == 10 and drift["checksum_now"] == diff["checksum_now"]
    quiet = runs["2026-11-24"]
    assert quiet["diff"]["drifted"] is False and quiet["drift"]["drifted"] is False
    assert len(_drift_observations(ledger)) == 1


def test_the_api_carries_drift_into_the_partition_diff(engines, tmp_path) -> None:
    target = engines.target("parquet")
    pipeline = load_pipeline(write_pipeline(tmp_path, target.spec))
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    days = pipeline.schedule.intervals(datetime(2026, 11, 23, tzinfo=UTC),
                                       datetime(2026, 11, 24, tzinfo=UTC))
    with ledger:
        assert run_backfill(pipeline, ledger, days).ok
        _delete_two(target)
        [item] = plan_backfill(pipeline, ledger, days, verify_untouched=True).items
        assert item.drift is not None and item.drift.drifted and item.drift.rows_now == 8
        result = run_backfill(pipeline, ledger, days, verify_untouched=True)
        [diff] = result.diffs
        assert (diff.rows_before, diff.rows_now, diff.rows_after, diff.drifted) == (10, 8, 10, True)
        assert diff.verdict == "unchanged"  # the change against the record; the drift is apart
        assert result.runs[0].drift is not None and result.runs[0].drift.describe() == (
            "10 -> 8 rows, checksum changed")
