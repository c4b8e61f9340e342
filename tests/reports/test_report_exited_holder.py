"""A running attempt whose process on this host has exited (``kill -9``, an OOM kill) is shown
as what it is: its outcome unknown, seen by the report now (basis ``observed``, recorded
nowhere), and the planner says reconcile, not "observe it, it is running". A live holder, a
holder another host or a person named, and a view of the past (``--as-of``) stay running."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.ledger.ledger_helpers import make_uow

from twice.cli.app import cli
from twice.cli.ledger_decide import unit_rows
from twice.core.policy import RetryPolicy
from twice.engine.evidence import PlanSettings
from twice.ledger import Ledger
from twice.reports import gather
from twice.reports.health import Health

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux")


SETTINGS = PlanSettings(policy=RetryPolicy(), max_observation_age=3600)


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped
    return child.pid


@pytest.fixture
def alive() -> Iterator[int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child.pid
    child.kill()
    child.wait()


def _ledger_with(tmp_path: Path, holders: dict[int, str]) -> tuple[str, dict[int, str]]:
    """A SQLite ledger with one running attempt per day, started by each holder."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ids = {}
    with Ledger.open(url) as ledger:
        for day, holder in holders.items():
            uow = make_uow(day)
            ledger.record_unit(uow)
            ledger.begin_attempt(uow.uow_id, holder=holder)
            ids[day] = uow.uow_id
    return url, ids


def test_an_attempt_whose_process_exited_is_unknown_and_to_be_reconciled(
    tmp_path: Path, alive: int
) -> None:
    host = socket.gethostname()
    url, ids = _ledger_with(tmp_path, {
        5: f"{host}:{_gone_pid()}:0123abcd",  # killed
        6: f"{host}:{alive}:0123abcd",  # still running
        7: f"another-host.example:{_gone_pid()}:0123abcd",  # cannot be seen from here
        8: "worker-7",  # a name a person gave: never judged
    })
    with Ledger.open(url) as ledger:
        report = gather(ledger)
        status = {day: report.unit(uow_id).status for day, uow_id in ids.items()}
        assert status[5].state == Health.UNKNOWN and status[5].basis == "observed"
        assert "has exited" in status[5].text and "not yet recorded" in status[5].text
        assert status[5].source == "process table"
        assert report.unit(ids[5]).planned is not None
        assert report.unit(ids[5]).planned.decision == "reconcile-remote"
        for day in (6, 7, 8):
            assert status[day].state == Health.RUNNING, status[day]
        rows = unit_rows(ledger, None, lambda _unit: SETTINGS)[1]
        decided = {row["id"]: row["decision"] for row in rows}
        assert decided[ids[5]] == "reconcile-remote"
        assert {decided[ids[day]] for day in (6, 7, 8)} == {"observe-running"}

        # the past cannot be judged by today's process table
        then = ledger.now() + timedelta(seconds=1)
        assert gather(ledger, as_of=then).unit(ids[5]).status.state == Health.RUNNING
        past = unit_rows(ledger, then, lambda _unit: SETTINGS)[1]
        assert {row["decision"] for row in past} == {"observe-running"}
        # nothing was written: a report only reads
        assert [a.outcome for a in ledger.attempts(ids[5])] == ["running"]


def test_twice_status_shows_it(tmp_path: Path) -> None:
    url, _ = _ledger_with(tmp_path, {5: f"{socket.gethostname()}:{_gone_pid()}:0123abcd"})
    shown = CliRunner().invoke(cli, ["status", "--ledger", url, "--json"],
                               catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    row = json.loads(shown.output)["units"][0]
    assert (row["health"], row["health_basis"]) == ("unknown", "observed")
    assert row["needs_attention"] is True and "has exited" in row["health_reason"]
    # the evidence column agrees with explain and update (found by a probe: it said
    # "executor (attempt record)", aged from the attempt's start)
    assert row["source"] == "process table" and row["age"] < 60


def test_the_update_does_not_date_the_unknown_from_its_own_clock(tmp_path: Path) -> None:
    """Found by a probe: the update said the killed attempt was "unknown since" the report's
    own time, a moment that moved with every report. When the process died is not known:
    the update says it started then and was seen exited by this report."""
    url, _ = _ledger_with(tmp_path, {5: f"{socket.gethostname()}:{_gone_pid()}:0123abcd"})
    with Ledger.open(url) as ledger:
        started = ledger.attempts(ledger.units()[0].uow_id)[0].started_at
    shown = CliRunner().invoke(cli, ["update", "--ledger", url], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    line = next(text for text in shown.output.splitlines() if "attempt 1" in text)
    assert "unknown since" not in line, line
    assert f"running since {started:%H:%M}" in line and "process has exited" in line
    assert "do not retry before settling it" in line
