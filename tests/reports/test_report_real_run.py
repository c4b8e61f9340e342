"""Reports over a ledger produced by a REAL run of the funds_positions example with faults.

The ledger here is not hand-written: a faulted backfill (transient extract errors, a lost load
acknowledgement, a slow transform) writes it, and the update, handover and HTML report must tell
that story from it.
"""

from __future__ import annotations

from datetime import date

import pytest
from tests.backfill import helpers

from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger
from twice.reports import load_evidence, render_handover, render_html, render_update


@pytest.fixture(scope="module")
def faulted_ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    tmp = tmp_path_factory.mktemp("real-run")
    root = helpers.make_workdir(tmp / "wh", days=3)
    faults = helpers.example().FaultPlan(
        transient_extract={date(2026, 11, 24): 2}, lost_ack_load={date(2026, 11, 25)}
    )
    url = f"sqlite:///{tmp / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        pipeline = helpers.example().build_pipeline(root, faults)
        result = run_backfill(pipeline, ledger, helpers.intervals(3))
        assert result.ok, result.counts()
        units = len(ledger.units())
        transient = [
            a for u in ledger.units() for a in ledger.attempts(u.uow_id)
            if a.outcome == "failed-transient"
        ]
        assert len(transient) == 2  # the two injected extract failures, really retried
    return url, units


def test_update_states_what_the_run_recorded(faulted_ledger: tuple[str, int]) -> None:
    url, units = faulted_ledger
    text = render_update(load_evidence(url))
    assert f"{units} units of work" in text
    # Every fault was retried or reconciled and every output verified: one line says so.
    assert text.splitlines()[1] == f"done: {units}/{units} verified"
    assert "Needs attention" not in text and "Next action" not in text


def test_handover_lists_every_unit_and_the_retries(faulted_ledger: tuple[str, int]) -> None:
    url, _ = faulted_ledger
    evidence = load_evidence(url)
    text = render_handover(evidence)
    with Ledger.open(url) as ledger:
        for unit in ledger.units():
            assert unit.uow_id in text
    assert "transient" in text.lower()
    assert text.count("\n## ") >= 5


def test_html_draws_one_bar_per_recorded_attempt(faulted_ledger: tuple[str, int]) -> None:
    url, _ = faulted_ledger
    page = render_html(load_evidence(url))
    with Ledger.open(url) as ledger:
        attempts = sum(len(ledger.attempts(u.uow_id)) for u in ledger.units())
    assert page.count('class="attempt-bar') == attempts
    assert "outcome-failed-transient" in page
