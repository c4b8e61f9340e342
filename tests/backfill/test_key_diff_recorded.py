"""A backfill into a table with versions (Delta, Iceberg) records each verified write's key diff
in the ledger as a ``rows-changed`` observation of the unit and attempt that wrote it (issue 21),
and that observation changes no planning or health decision."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.destinations.key_diff_pipeline import SCHEDULE, SPECS, build

from twice.cli.app import cli
from twice.core.decision import Decision
from twice.core.policy import RetryPolicy
from twice.drivers.backfill import (
    KEY_DIFF_SAMPLES,
    ROWS_CHANGED_SOURCE,
    ROWS_CHANGED_STATE,
    run_backfill,
)
from twice.engine.evidence import EXECUTOR_SOURCE, PlanSettings, gather_evidence, plan_unit
from twice.ledger import Ledger, ObservationRecord
from twice.reports import gather


class WithoutRowsChanged:
    """The ledger as it would read had no ``rows-changed`` observation been recorded."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def observations(self, uow_id: str) -> list[ObservationRecord]:
        return [o for o in self._ledger.observations(uow_id) if o.state != ROWS_CHANGED_STATE]

    def history(self, uow_id: str) -> Any:
        unit, attempts, _, decisions = self._ledger.history(uow_id)
        return unit, attempts, self.observations(uow_id), decisions

    def timeline(self, uow_id: str) -> list[Any]:
        return [e for e in self._ledger.timeline(uow_id)
                if not (e.kind == "observation" and e.detail.get("state") == ROWS_CHANGED_STATE)]


def rows_changed(ledger: Ledger, uow_id: str) -> list[ObservationRecord]:
    return [o for o in ledger.observations(uow_id) if o.state == ROWS_CHANGED_STATE]


def table_versions(spec: str) -> list[int]:
    from twice.destinations import open_destination

    with open_destination(spec) as dest:
        return list(dest.versions())


@pytest.fixture(params=sorted(SPECS))
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    return SPECS[request.param].format(tmp=tmp_path), f"sqlite:///{tmp_path / 'ledger.db'}"


def test_rerun_records_the_key_diff_of_the_attempt_that_wrote(setup: tuple[str, str]) -> None:
    spec, url = setup
    version = {"v": 1}
    pipeline = build(spec, version)
    span = SCHEDULE.interval_for(date(2026, 11, 1))
    with Ledger.open(url) as ledger:
        first = run_backfill(pipeline, ledger, [span], deadline=None)
        assert first.ok
        uow_id = first.runs[0].uow_id
        [created] = rows_changed(ledger, uow_id)
        [v0] = table_versions(spec)
        assert (created.source, created.attempt) == (ROWS_CHANGED_SOURCE, 1)
        assert created.detail == {
            "destination": spec, "partition": first.runs[0].diff.partition,  # type: ignore[union-attr]
            "fingerprint_version": 1, "key_columns": ["id"], "rows_before": 0, "rows_after": 4,
            "added": 4, "removed": 0, "changed": 0, "unchanged": 0,
            "added_keys": [{"id": 0}, {"id": 1}, {"id": 2}][:KEY_DIFF_SAMPLES],
            "removed_keys": [], "changed_keys": [], "changed_columns": {},
            "sample_limit": KEY_DIFF_SAMPLES, "from_version": None, "to_version": v0,
            "observed_by": "backfill",
        }

        version["v"] = 2
        second = run_backfill(pipeline, ledger, [span], force=True, deadline=None)
        assert second.ok and second.runs[0].uow_id == uow_id
        assert second.runs[0].attempts == [(2, "succeeded")]
        found = rows_changed(ledger, uow_id)
        assert [o.attempt for o in found] == [1, 2]  # once per verified write
        rerun = found[-1]
        assert table_versions(spec) == [v0, rerun.detail["to_version"]]
        assert {k: rerun.detail[k] for k in (
            "added", "removed", "changed", "unchanged", "rows_before", "rows_after",
            "added_keys", "removed_keys", "changed_keys", "changed_columns",
            "fingerprint_version", "from_version", "observed_by")} == {
            "added": 1, "removed": 1, "changed": 1, "unchanged": 2, "rows_before": 4,
            "rows_after": 4, "added_keys": [{"id": 7}], "removed_keys": [{"id": 0}],
            "changed_keys": [{"id": 1}], "changed_columns": {"v": 1},
            "fingerprint_version": 2, "from_version": v0, "observed_by": "backfill",
        }
        # the attempt it is attached to is the one that recorded the partition's new version
        fingerprint = ledger.latest_fingerprint(spec, first.runs[0].diff.partition)  # type: ignore[union-attr]
        assert fingerprint is not None
        assert (fingerprint.uow_id, fingerprint.attempt, fingerprint.version) == (uow_id, 2, 2)
        # it is read from the committed table versions once the attempt has finished
        latest = ledger.attempts(uow_id)[-1]
        assert latest.finished_at is not None and rerun.observed_at >= latest.finished_at

        # The planner and the health report decide exactly as without it.
        at = ledger.now()
        settings = PlanSettings(RetryPolicy(max_attempts=1), safe_repeat=True)
        plain = WithoutRowsChanged(ledger)
        evidence = gather_evidence(ledger, uow_id, as_of=at, settings=settings)
        without = gather_evidence(plain, uow_id, as_of=at, settings=settings)  # type: ignore[arg-type]
        # (it is the freshest evidence, by the destination's log: only its time and source)
        assert (evidence.observed_at, evidence.source) == (rerun.observed_at, ROWS_CHANGED_SOURCE)
        assert without.source == EXECUTOR_SOURCE
        decided, plain_decided = plan_unit(evidence), plan_unit(without)
        assert decided is not None and plain_decided is not None
        assert decided.decision is plain_decided.decision is Decision.VALIDATE_OUTPUT
        health = gather(ledger, as_of=at).unit(uow_id).status
        assert health.state == "verified"
        assert health.state == gather(plain, as_of=at).unit(uow_id).status.state  # type: ignore[arg-type]

        # A third backfill without force skips the unit as verified and records nothing new.
        third = run_backfill(pipeline, ledger, [span], deadline=None)
        assert third.ok and [r.status for r in third.runs] == ["skipped"]
        assert "verified" in third.runs[0].reason
        assert len(rows_changed(ledger, uow_id)) == 2


def explain(url: str, spec: str) -> tuple[str, str]:
    """Backfill twice (the rerun changes keys), then ``twice explain`` the unit."""
    version = {"v": 1}
    pipeline = build(spec, version)
    span = SCHEDULE.interval_for(date(2026, 11, 1))
    with Ledger.open(url) as ledger:
        assert run_backfill(pipeline, ledger, [span], deadline=None).ok
        version["v"] = 2
        result = run_backfill(pipeline, ledger, [span], force=True, deadline=None)
        assert result.ok
        uow_id = result.runs[0].uow_id
    shown = CliRunner().invoke(cli, ["explain", uow_id, "--ledger", url],
                               catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    return uow_id, shown.output


def test_explain_shows_the_rows_changed_observation(setup: tuple[str, str]) -> None:
    spec, url = setup
    _, output = explain(url, spec)
    lines = [line for line in output.splitlines() if "rows changed in " in line]
    assert len(lines) == 2, output
    assert "by attempt 1: +4 -0 ~0 (0 unchanged)" in lines[0], output
    assert "by attempt 2: +1 -1 ~1 (2 unchanged); keys added id=7; removed id=0; changed id=1" \
        in lines[1], output
