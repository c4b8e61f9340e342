"""``Ledger.record_resolution``: an operator settles an outcome twice could not see."""

from __future__ import annotations

import pytest
from tests.ledger.ledger_helpers import FakeClock

from twice.core.unit import UnitOfWork
from twice.ledger import (
    RESOLVED_FAILED_STATE,
    RESOLVED_SUCCEEDED_STATE,
    Ledger,
    LedgerError,
    UnknownUnitError,
)


def _unknown_attempt(ledger: Ledger, uow: UnitOfWork) -> int:
    attempt = ledger.begin_attempt(uow.uow_id, holder="w1")
    ledger.finish_attempt(uow.uow_id, attempt.number, "unknown")
    return attempt.number


def test_resolving_an_unknown_attempt_as_succeeded(
    ledger: Ledger, uow: UnitOfWork, clock: FakeClock
) -> None:
    number = _unknown_attempt(ledger, uow)
    clock.advance(600)
    resolved = ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="alice",
                                        note="  18,204 rows in warehouse.positions  ")
    assert (resolved.outcome, resolved.operator, resolved.note, resolved.repeated) == (
        "succeeded", "alice", "18,204 rows in warehouse.positions", False)
    assert resolved.resolved_at == clock()
    attempt = ledger.attempt(uow.uow_id, number)
    assert attempt == resolved.attempt
    assert attempt is not None and (attempt.outcome, attempt.finished_at) == ("succeeded", clock())
    observation = ledger.latest_observation(uow.uow_id)
    assert observation == resolved.observation
    assert observation is not None
    assert (observation.state, observation.source, observation.attempt) == (
        RESOLVED_SUCCEEDED_STATE, "operator:alice", number)
    assert observation.detail["note"] == "18,204 rows in warehouse.positions"
    assert observation.detail["previous_outcome"] == "unknown"
    kinds = [(e.kind, e.attempt) for e in ledger.timeline(uow.uow_id)][-2:]
    assert kinds == [("attempt-finished", number), ("observation", number)]
    finished = ledger.timeline(uow.uow_id)[-2]
    assert "asserted by an operator (alice), not observed by twice" in finished.summary
    assert finished.detail["resolved_by"] == "operator:alice"
    assert ledger.resolutions(uow.uow_id) == [resolved]


def test_failed_means_the_effect_did_not_happen_so_it_is_transient(
    ledger: Ledger, uow: UnitOfWork
) -> None:
    ledger.begin_attempt(uow.uow_id, holder="w1")
    ledger.finish_attempt(uow.uow_id, 1, "failed-transient")
    _unknown_attempt(ledger, uow)
    resolved = ledger.record_resolution(uow.uow_id, attempt=2, outcome="failed",
                                        operator="bob", note="no job in the history")
    assert resolved.attempt.outcome == "failed-transient"
    assert resolved.observation.state == RESOLVED_FAILED_STATE


def test_resolving_again_the_same_way_is_harmless_another_way_is_refused(
    ledger: Ledger, uow: UnitOfWork
) -> None:
    _unknown_attempt(ledger, uow)
    first = ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="alice",
                                     note="checked")
    events = len(ledger.timeline(uow.uow_id))
    again = ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="carol",
                                     note="checked too")
    assert again.repeated and again.observation == first.observation
    assert len(ledger.timeline(uow.uow_id)) == events
    with pytest.raises(LedgerError, match=r"attempt 1 of .* is succeeded \(resolved by "
                                          r"operator:alice\), not unknown or running"):
        ledger.record_resolution(uow.uow_id, outcome="failed", operator="bob", note="no")


def test_only_unsettled_attempts_can_be_resolved(
    ledger: Ledger, uow: UnitOfWork, clock: FakeClock
) -> None:
    with pytest.raises(LedgerError, match="has no attempt to resolve: it never started"):
        ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="a", note="n")
    ledger.begin_attempt(uow.uow_id, holder="w1")
    ledger.finish_attempt(uow.uow_id, 1, "succeeded")
    with pytest.raises(LedgerError, match=r"is succeeded \(recorded by twice\), not unknown "
                                          "or running"):
        ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="a", note="n")
    with pytest.raises(LedgerError, match="has no attempt 5"):
        ledger.record_resolution(uow.uow_id, attempt=5, outcome="failed", operator="a",
                                 note="n")
    # A running attempt whose holder still holds the lease may yet finish: not resolvable.
    ledger.acquire_lease(uow.uow_id, "w2", 30)
    ledger.begin_attempt(uow.uow_id, holder="w2")
    with pytest.raises(LedgerError, match="is running and w2 holds the unit's lease until"):
        ledger.record_resolution(uow.uow_id, outcome="failed", operator="a", note="n")
    clock.advance(31)  # the worker vanished: its lease expired, the attempt still "running"
    resolved = ledger.record_resolution(uow.uow_id, outcome="failed", operator="a", note="n")
    assert (resolved.attempt.number, resolved.observation.detail["previous_outcome"]) == (
        2, "running")


def test_bad_input_is_refused(ledger: Ledger, uow: UnitOfWork) -> None:
    _unknown_attempt(ledger, uow)
    with pytest.raises(UnknownUnitError):
        ledger.record_resolution("nobody", outcome="succeeded", operator="a", note="n")
    with pytest.raises(LedgerError, match="outcome must be one of succeeded, failed"):
        ledger.record_resolution(uow.uow_id, outcome="done", operator="a",  # type: ignore[arg-type]
                                 note="n")
    with pytest.raises(LedgerError, match="note must be a non-empty string"):
        ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="a", note="   ")
    for operator in ("", "  ", "two\nlines", ":x", "x" * 151):
        with pytest.raises(LedgerError, match="operator"):
            ledger.record_resolution(uow.uow_id, outcome="succeeded", operator=operator,
                                     note="n")
    with pytest.raises(LedgerError, match="attempt must be an integer >= 1"):
        ledger.record_resolution(uow.uow_id, attempt=0, outcome="succeeded", operator="a",
                                 note="n")
    attempt = ledger.attempt(uow.uow_id, 1)
    assert attempt is not None and attempt.outcome == "unknown"  # nothing was changed
    assert ledger.observations(uow.uow_id) == []


def test_attempt_and_observation_are_one_transaction(ledger: Ledger, uow: UnitOfWork) -> None:
    _unknown_attempt(ledger, uow)
    with pytest.raises(RuntimeError), ledger.transaction():
        ledger.record_resolution(uow.uow_id, outcome="succeeded", operator="a", note="n")
        raise RuntimeError("rolled back")
    attempt = ledger.attempt(uow.uow_id, 1)
    assert attempt is not None and attempt.outcome == "unknown"
    assert ledger.observations(uow.uow_id) == [] and ledger.resolutions(uow.uow_id) == []
