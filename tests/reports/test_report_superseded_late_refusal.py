"""Which unit of a task and interval is current: the one the engine took up last (recorded,
run started, attempt begun), not the one with the latest record of any kind. A process paused
past its lease on an older unit (an earlier input version) resumes after the newer unit
succeeded; its write is fenced and its attempt ends refused, the latest record of all. It
must not make the older unit current: status would say "refused, repair the cause" forever
for a slot holding the newer unit's verified output (found by the adversarial race probe)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from tests.ledger.ledger_helpers import make_uow

from twice.ledger import Ledger
from twice.reports import gather
from twice.reports.health import Health
from twice.testing import ManualClock


def test_a_late_fenced_attempt_of_an_older_unit_does_not_make_it_current(
    tmp_path: Path,
) -> None:
    clock = ManualClock(datetime(2026, 12, 1, 6, tzinfo=UTC))
    old = make_uow(5)
    new = replace(old, input_version="v2")  # the source was corrected: a new unit of work
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as ledger:
        ledger.record_unit(old)
        paused = ledger.begin_attempt(old.uow_id, holder="paused")
        clock.advance(300)
        ledger.record_unit(new)
        taker = ledger.begin_attempt(new.uow_id, holder="taker")
        clock.advance(2)
        ledger.finish_attempt(new.uow_id, taker.number, "succeeded")
        clock.advance(60)  # the paused process resumes: fenced, refused
        ledger.record_error(old.uow_id, error_class="FencedWriteError",
                            message="write refused: a newer token is committed",
                            classification="permanent", attempt=paused.number)
        ledger.finish_attempt(old.uow_id, paused.number, "failed-permanent")
        report = gather(ledger)
    assert report.unit(old.uow_id).status.state == Health.SUPERSEDED
    assert report.unit(new.uow_id).status.state != Health.SUPERSEDED
    assert not report.in_state(Health.REFUSED)
