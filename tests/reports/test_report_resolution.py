"""An operator's resolution in the report model: basis ``asserted``, never ``verified``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.ledger import Ledger
from twice.reports import BASES, BASIS_MEANING, gather, render_handover, render_html, render_update
from twice.reports.timeline_svg import timeline_svg


def _resolved_ledger(path: Path, clock: FakeClock, *, validate: bool = False,
                     outcome: str = "succeeded", operator: str = "alice",
                     note: str = "rows checked by hand") -> str:
    uow = make_uow()
    with Ledger.open(path, clock=clock) as ledger:
        ledger.record_unit(uow)
        ledger.begin_attempt(uow.uow_id, holder="w1")
        clock.advance(60)
        ledger.finish_attempt(uow.uow_id, 1, "unknown")
        clock.advance(600)
        ledger.record_resolution(uow.uow_id, outcome=outcome, operator=operator, note=note)
        if validate:
            clock.advance(60)
            ledger.record_observation(uow.uow_id, "validated", source="twice.define.acceptance",
                                      attempt=1)
        clock.advance(60)
    return uow.uow_id


def test_resolution_is_asserted_not_verified(tmp_path: Path) -> None:
    clock = FakeClock()
    uow_id = _resolved_ledger(tmp_path / "l.db", clock)
    assert "asserted" in BASES and "operator" in BASIS_MEANING["asserted"]
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        evidence = gather(ledger)
        before = gather(ledger, as_of=clock() - timedelta(seconds=120))
    unit = evidence.unit(uow_id)
    assert (unit.status.state, unit.status.basis) == ("asserted", "asserted")
    assert "asserted by an operator (alice): rows checked by hand" in unit.status.text
    assert "not observed by twice" in unit.status.text
    assert unit.outcome_label == "succeeded (asserted by an operator (alice))"
    attempt = unit.attempts[-1]
    assert attempt.basis == "asserted" and attempt.asserted is not None
    assert attempt.asserted.operator == "alice" and attempt.resolved_at is not None
    assert [c.cause for c in attempt.changes] == [
        "finished", "asserted by an operator (alice): rows checked by hand"]
    resolution = [o for o in unit.observations if o.asserted is not None]
    assert [(o.basis, o.kinds) for o in resolution] == [
        ("asserted", frozenset({"operator-resolution"}))]
    questions = [q.text for q in evidence.open_questions]
    assert any("asserted by an operator (alice)" in q for q in questions)
    assert not any("nothing verified its output" in q for q in questions)
    # As of before the resolution, the attempt was unknown and nobody had asserted anything.
    earlier = before.unit(uow_id)
    assert (earlier.status.state, earlier.status.basis) == ("unknown", "executed")
    svg = timeline_svg(unit, evidence.as_of)
    assert "Attempt 1: succeeded (asserted by an operator (alice): rows checked by hand)" in svg
    assert "(asserted, not observed;" in svg and "(verified," not in svg
    assert "asserted by an operator" in render_update(evidence)
    assert "succeeded (asserted by an operator (alice))" in render_handover(evidence)
    assert 'class="basis basis-asserted"' in render_html(evidence)


def test_a_later_validation_by_a_named_source_verifies_it(tmp_path: Path) -> None:
    clock = FakeClock()
    uow_id = _resolved_ledger(tmp_path / "l.db", clock, validate=True)
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        unit = gather(ledger).unit(uow_id)
    assert (unit.status.state, unit.status.basis) == ("verified", "verified")
    assert "asserted by an operator (alice)" in unit.status.text  # still says who asserted it
    assert unit.attempts[-1].basis == "asserted"  # the attempt's outcome is still a person's


def test_the_update_says_a_failure_was_asserted_by_an_operator(tmp_path: Path) -> None:
    """``twice resolve --as failed``: the unit waits for a retry, and the short update says
    whose word that failure is (it read as an observed failure, found by the adversarial
    probe: status and explain said so, the update did not)."""
    clock = FakeClock()
    uow_id = _resolved_ledger(tmp_path / "l.db", clock, outcome="failed", operator="bob",
                              note="gateway log: no request with that id")
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        evidence = gather(ledger)
    assert evidence.unit(uow_id).status.state == "waiting"
    text = render_update(evidence)
    waiting = next(line for line in text.splitlines() if "waiting:" in line)
    assert "asserted by an operator (bob)" in waiting, text
