"""What workers read and hold to choose their next unit (``twice.ledger.claims``): many units'
state in one read, and claim intents that let a second claimer skip a unit instead of waiting."""

from __future__ import annotations

import pytest
from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.ledger import Ledger


def test_claim_states_reads_every_unit_as_its_own_reads_would(ledger: Ledger,
                                                              clock: FakeClock) -> None:
    done, leased, fresh, ended = (make_uow(day) for day in (1, 2, 3, 4))
    never = make_uow(5)  # never recorded
    for unit in (done, leased, fresh, ended):
        ledger.record_unit(unit)
    ledger.acquire_lease(done.uow_id, "w1", 60)
    first = ledger.begin_attempt(done.uow_id, holder="w1")
    ledger.finish_attempt(done.uow_id, first.number, "failed-transient")
    second = ledger.begin_attempt(done.uow_id, holder="w1")
    ledger.finish_attempt(done.uow_id, second.number, "succeeded")
    ledger.release_lease(done.uow_id, "w1")
    ledger.acquire_lease(leased.uow_id, "w2", 600)
    ledger.begin_attempt(leased.uow_id, holder="w2")
    ledger.acquire_lease(ended.uow_id, "w3", 60)
    third = ledger.begin_attempt(ended.uow_id, holder="w3")
    ledger.finish_attempt(ended.uow_id, third.number, "failed-transient")
    clock.advance(120)  # w3's lease expired without release

    ids = [u.uow_id for u in (done, leased, fresh, ended, never)]
    states = ledger.claim_states([*ids, done.uow_id])  # a repeated id is read once
    assert list(states) == ids
    for uow_id, state in states.items():
        assert state.uow_id == uow_id
        assert state.latest == ledger.latest_attempt(uow_id)
        assert state.lease == ledger.lease(uow_id)
    assert [states[i].recorded for i in ids] == [True, True, True, True, False]
    latest = states[done.uow_id].latest
    assert latest is not None and (latest.number, latest.outcome) == (2, "succeeded")
    lease = states[leased.uow_id].lease
    assert lease is not None and lease.holder == "w2" and lease.active(ledger.now())
    held = states[ended.uow_id].lease
    assert held is not None and not held.active(ledger.now())
    assert states[fresh.uow_id].latest is None and states[fresh.uow_id].lease is None
    assert ledger.claim_states([]) == {}


def test_claim_states_reads_more_units_than_one_statement_takes(ledger: Ledger,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    from twice.ledger import claims

    monkeypatch.setattr(claims, "BATCH", 2)
    units = [make_uow(day) for day in range(1, 8)]
    for unit in units[:5]:
        ledger.record_unit(unit)
        ledger.acquire_lease(unit.uow_id, "w", 60)
    states = ledger.claim_states([u.uow_id for u in units])
    assert [s.recorded for s in states.values()] == [True] * 5 + [False] * 2
    assert all((s.lease is not None) == s.recorded for s in states.values())


@pytest.mark.postgres
def test_a_claim_intent_is_held_by_one_process_at_a_time(postgres_url: str) -> None:
    with Ledger.open(postgres_url) as first, Ledger.open(postgres_url) as second:
        mine, theirs = first.claim_intents(), second.claim_intents()
        try:
            assert mine.take("unit-a")
            assert mine.take("unit-a")  # held already: still ours
            assert not theirs.take("unit-a")  # being claimed: skip it, do not wait
            assert theirs.take("unit-b")  # per unit, never ledger-wide
            assert not mine.take("unit-b")
            mine.give_back("unit-a")
            assert theirs.take("unit-a")
            mine.give_back("unit-never-taken")  # nothing to give back: nothing happens
        finally:
            theirs.close()  # a closed holder (a dead worker's connection) ends its intents
        assert mine.take("unit-a") and mine.take("unit-b")
        mine.close()


@pytest.mark.postgres
def test_an_intent_given_back_later_ends_with_the_next_round_trip(postgres_url: str) -> None:
    """``give_back_later``: a worker's intent on the unit it ran ends in the statement that
    takes its next one (one round trip a unit, not two), or at ``flush``, at a wait for
    others' units, at ``close``; never later. Waiting workers are told then."""
    with Ledger.open(postgres_url) as first, Ledger.open(postgres_url) as second:
        mine, theirs = first.claim_intents(), second.claim_intents()
        try:
            assert mine.take("unit-a")
            theirs.forget_changes()
            mine.give_back_later("unit-a")
            assert not theirs.take("unit-a")  # not ended yet
            assert mine.take("unit-b")  # ends unit-a in the same statement
            assert theirs.wait_for_change(5.0) is True  # and tells who waits
            assert theirs.take("unit-a")
            assert not theirs.take("unit-b")
            mine.give_back_later("unit-b")
            assert mine.take("unit-b")  # the same unit again: still held, once
            mine.give_back_later("unit-b")
            assert not theirs.take("unit-b")
            mine.flush()
            assert theirs.take("unit-b")
            theirs.give_back_later("unit-a")
            theirs.give_back_later("unit-b")
            assert mine.wait_for_change(0.2) is False  # nothing ended yet
        finally:
            theirs.close()  # ends both, and tells
        assert mine.wait_for_change(5.0) is True
        assert mine.take("unit-a") and mine.take("unit-b")
        mine.give_back_later("unit-a")
        mine.give_back_later("unit-b")
        assert mine.wait_for_change(0.0) is False  # its own news is not news
        with Ledger.open(postgres_url) as third:
            other = third.claim_intents()
            assert other.take("unit-a") and other.take("unit-b")  # the wait ended them
            other.close()
        mine.close()


def test_claim_intents_are_always_granted_on_sqlite(sqlite_url: str) -> None:
    """SQLite serialises its writers (BEGIN IMMEDIATE): a claim never waits on a row lock."""
    with Ledger.open(sqlite_url) as first, Ledger.open(sqlite_url) as second:
        mine, theirs = first.claim_intents(), second.claim_intents()
        assert mine.take("unit-a") and theirs.take("unit-a")
        mine.give_back("unit-a")
        mine.close()
        theirs.close()


def test_claim_states_says_who_wrote_a_succeeded_units_slot_last(ledger: Ledger) -> None:
    """What ``overwritten_by`` reads per unit, read for the batch: a success stands for its
    slot only while the slot's latest fingerprint is its own (or names no unit)."""
    kept, overwritten, unwritten, failed = (make_uow(day) for day in (1, 2, 3, 4))
    later = make_uow(2, task="other")  # another unit writing the same slot afterwards
    for unit in (kept, overwritten, unwritten, failed, later):
        ledger.record_unit(unit)
    for unit in (kept, overwritten, unwritten):
        number = ledger.begin_attempt(unit.uow_id, holder="w").number
        ledger.finish_attempt(unit.uow_id, number, "succeeded")
    number = ledger.begin_attempt(failed.uow_id, holder="w").number
    ledger.finish_attempt(failed.uow_id, number, "failed-permanent")
    ledger.record_fingerprint("db.t", "p1", 10, 1, uow_id=kept.uow_id)
    ledger.record_fingerprint("db.t", "p2", 10, 2, uow_id=overwritten.uow_id)
    ledger.record_fingerprint("db.t", "p2", 10, 3, uow_id=later.uow_id)
    ledger.record_fingerprint("db.t", "p4", 10, 4, uow_id=later.uow_id)
    slots = {kept.uow_id: ("db.t", "p1"), overwritten.uow_id: ("db.t", "p2"),
             unwritten.uow_id: ("db.t", "p3"), failed.uow_id: ("db.t", "p4")}
    states = ledger.claim_states([*slots, later.uow_id], slots)
    assert states[kept.uow_id].slot_read and states[kept.uow_id].slot_writer == kept.uow_id
    assert states[overwritten.uow_id].slot_writer == later.uow_id
    assert states[unwritten.uow_id].slot_read and states[unwritten.uow_id].slot_writer is None
    assert not states[failed.uow_id].slot_read  # not succeeded: nothing to stand for
    assert not states[later.uow_id].slot_read  # no slot given
