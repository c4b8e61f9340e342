"""The report model: what each unit's evidence says, how it is known, and as of when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.reports.story import AS_OF, DEADLINE, StoryClock, StoryLedger, at, unit_for

from twice.ledger import Ledger
from twice.reports import Evidence, Health, ReportError, UnitReport, gather, load_evidence


def unit(evidence: Evidence, story: StoryLedger, task: str) -> UnitReport:
    return evidence.unit(story.uow[task])


def test_states_of_the_story(evidence: Evidence, story: StoryLedger) -> None:
    states = {task: evidence.unit(uow).status.state for task, uow in story.uow.items()}
    assert states == {
        "extract": "verified",  # a fingerprint recorded by its uow_id and attempt 2
        "load": "unverified",  # DONE, but nothing checked its output
        "publish": "unknown",
        "report_file": "failed",
        "archive": "blocked",  # deadline-infeasible: attempt 3 not started
        "transform": "waiting",  # transient failure, backoff until 05:35
        "monitor": "stale-evidence",  # running, last observed 15 min ago (10 min limit)
    }
    assert all(isinstance(state, Health) for state in states.values())


def test_bases_follow_the_truthfulness_rule(evidence: Evidence, story: StoryLedger) -> None:
    # A fingerprint by the attempt makes "verified"; a clean finish is only "executed"; a
    # withheld attempt is "decided"; what a source saw is "observed", never "verified".
    assert unit(evidence, story, "extract").status.basis == "verified"
    assert unit(evidence, story, "load").status.basis == "executed"
    assert "nothing verified its output" in unit(evidence, story, "load").status.text
    assert unit(evidence, story, "archive").status.basis == "decided"
    assert unit(evidence, story, "monitor").status.basis == "observed"
    for report in evidence.units:
        assert {a.basis for a in report.attempts} <= {"executed"}
        assert {o.basis for o in report.observations} <= {"observed"}
        assert {d.basis for d in report.decisions} <= {"decided"}


def test_attempts_have_start_finish_and_backoff_gap(evidence: Evidence,
                                                     story: StoryLedger) -> None:
    first, second = unit(evidence, story, "extract").attempts
    assert (first.started_at, first.ended_at, first.outcome) == (
        at(5, 0), at(5, 1), "failed-transient")
    assert (second.started_at, second.ended_at, second.outcome) == (
        at(5, 5), at(5, 9), "succeeded")
    assert first.gap_before is None
    assert second.gap_before == timedelta(minutes=4)


def test_lost_acknowledgement_story(evidence: Evidence, story: StoryLedger) -> None:
    load = unit(evidence, story, "load")
    first, second = load.attempts
    assert first.outcome == "unknown" and first.unknown_since == at(5, 12)
    assert first.job_id == second.job_id == load.generations[0].job_id
    kinds = [sorted(o.kinds) for o in load.observations]
    assert kinds == [["reconcile"], ["duplicate"], []]
    assert load.generations[0].state == "succeeded"


def test_done_with_error_is_recognised(evidence: Evidence, story: StoryLedger) -> None:
    (observation,) = unit(evidence, story, "report_file").observations
    assert "done-with-error" in observation.kinds
    (clean_done,) = [o for o in unit(evidence, story, "load").observations
                     if o.record.state == "DONE"]
    assert "done-with-error" not in clean_done.kinds


def test_observation_age_and_staleness(evidence: Evidence, story: StoryLedger) -> None:
    monitor = unit(evidence, story, "monitor")
    latest = monitor.latest_observation
    assert latest is not None
    assert latest.age == timedelta(minutes=15)
    assert latest.stale is True and latest.stale_at == at(5, 25)
    assert monitor.max_observation_age == timedelta(minutes=10)


def test_decisions_carry_their_times_and_currency(evidence: Evidence,
                                                  story: StoryLedger) -> None:
    transform = unit(evidence, story, "transform")
    decision = transform.current_decision
    assert decision is not None and decision.record.decision == "wait-backoff"
    assert decision.earliest_start == at(5, 35)
    assert decision.estimated_finish == at(5, 50)
    assert decision.backoff == timedelta(minutes=8)
    extract = unit(evidence, story, "extract")
    assert extract.latest_decision is not None and extract.current_decision is None


def test_deadline_recorded_wins_over_given(story: StoryLedger) -> None:
    given = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
    evidence = load_evidence(story.url, as_of=AS_OF, deadline=given)
    archive = evidence.unit(story.uow["archive"])
    assert archive.deadline is not None
    assert (archive.deadline.at, archive.deadline.basis) == (DEADLINE, "decided")


def test_given_deadline_is_marked_assumed(tmp_path: Path) -> None:
    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("extract")).uow_id
        given = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
        evidence = gather(ledger, deadline=given)
    (report,) = evidence.units
    assert report.deadline is not None and report.deadline.basis == "assumed"
    assert report.uow_id == uow
    assert any("given by the caller" in a.text for a in evidence.assumptions)
    assert report.status.state == "never-run" and report.status.text == "no attempt recorded"


def test_safe_repeat_and_estimates_are_assumptions(evidence: Evidence) -> None:
    texts = [a.text for a in evidence.assumptions]
    assert any("safe_repeat (safeRepeat) is asserted by the caller" in t for t in texts)
    assert any("rests on estimated durations" in t for t in texts)
    safe = [a for a in evidence.assumptions if "safe_repeat" in a.text]
    assert len({a.subject for a in safe}) == 7  # one per task, not one per unit
    questions = " ".join(q.text for q in evidence.open_questions)
    assert "the outcome is unknown" in questions
    assert "nothing verified its output" in questions
    assert "went stale at 2026-12-02 05:25:00Z" in questions


def test_fingerprint_versions_and_diffs(evidence: Evidence) -> None:
    by_partition = {(p.destination, p.partition): p for p in evidence.partitions}
    changed = by_partition[("warehouse.positions", "2026-11-30")]
    assert [v.version for v in changed.versions] == [1, 2]
    first, second = changed.diffs
    assert first.before is None
    assert (second.row_delta, second.checksum_changed, second.comparable) == (-2, True, True)
    same = by_partition[("warehouse.positions", "2026-11-29")].diffs[-1]
    assert same.identical


def test_as_of_shows_only_what_was_known_then(story: StoryLedger) -> None:
    earlier = load_evidence(story.url, as_of=at(5, 12, 45))
    load = earlier.unit(story.uow["load"])
    assert [a.number for a in load.attempts] == [1]
    assert load.status.state == "unknown"
    assert [o.record.state for o in load.observations] == ["running"]
    assert load.observations[0].age == timedelta(seconds=15)
    changed = {(p.destination, p.partition): p for p in earlier.partitions}[
        ("warehouse.positions", "2026-11-30")]
    assert len(changed.versions) == 1
    assert earlier.left_out > 0
    # Units not yet recorded at as_of are left out too.
    assert load_evidence(story.url, as_of=at(4, 30)).units == ()


def test_pipeline_filter(story: StoryLedger) -> None:
    evidence = load_evidence(story.url, as_of=AS_OF, pipeline="funds_positions")
    assert len(evidence.units) == 7
    with pytest.raises(ReportError, match="no units of work for pipeline 'fund_positions'"):
        load_evidence(story.url, pipeline="fund_positions")


def test_lease_takeover_makes_an_attempt_unknown(tmp_path: Path) -> None:
    clock = StoryClock()
    clock.current = at(5, 0)
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("load")).uow_id
        ledger.acquire_lease(uow, "worker-1", ttl_seconds=60)
        ledger.begin_attempt(uow, holder="worker-1")
        clock.current = at(5, 5)
        ledger.acquire_lease(uow, "worker-2", ttl_seconds=60)
        evidence = gather(ledger)
    (report,) = evidence.units
    (attempt,) = report.attempts
    assert attempt.outcome == "unknown" and attempt.unknown_since == at(5, 5)
    assert attempt.changes[0].cause == "lease taken over"
    assert "lease-takeover" in report.observations[0].kinds
    assert report.status.state == "unknown"


@pytest.mark.parametrize("settled", ["resolved", "reconciled"])
def test_as_of_an_attempt_later_settled_was_unknown_not_running(tmp_path: Path,
                                                                settled: str) -> None:
    """Found by a probe: an attempt that ended unknown (or was taken over from a lost
    holder) and was settled later keeps only its last outcome in its row, so ``status`` and
    ``decide --ledger`` as of the time in between said it was running (observe-running),
    while ``update`` and the runbook, reading the journal, said unknown (reconcile-remote)."""
    from twice.core.decision import Decision
    from twice.core.policy import RetryPolicy
    from twice.engine.evidence import PlanSettings, gather_evidence, plan_unit

    settings = PlanSettings(policy=RetryPolicy(max_attempts=3), deadline=at(23, 0))

    clock = StoryClock()
    clock.current = at(5, 0)
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        timed_out = ledger.record_unit(unit_for("load")).uow_id
        taken = ledger.record_unit(unit_for("extract")).uow_id
        for uow in (timed_out, taken):
            ledger.acquire_lease(uow, "worker-1", ttl_seconds=60)
            ledger.begin_attempt(uow, holder="worker-1")
        clock.current = at(5, 1)
        ledger.finish_attempt(timed_out, 1, "unknown")
        clock.current = at(5, 5)
        ledger.acquire_lease(taken, "worker-2", ttl_seconds=60)  # worker-1's lease expired
        clock.current = at(5, 10)
        for uow in (timed_out, taken):
            if settled == "resolved":
                ledger.record_resolution(uow, outcome="succeeded", note="checked", operator="ann")
            else:
                ledger.finish_attempt(uow, 1, "succeeded")
        for uow, since in ((timed_out, at(5, 1)), (taken, at(5, 5))):
            then = gather_evidence(ledger, uow, as_of=at(5, 7), settings=settings)
            assert then.latest is not None and then.latest.outcome == "unknown"
            assert then.latest.finished_at == since
            decided = plan_unit(then)
            assert decided is not None and decided.decision is Decision.RECONCILE_REMOTE
            before = gather_evidence(ledger, uow, as_of=at(5, 0, 30))  # still running then
            assert before.latest is not None and before.latest.outcome == "running"
            now = gather_evidence(ledger, uow)
            assert now.latest is not None and now.latest.outcome == "succeeded"
        report = {u.unit.task: u for u in load_evidence(str(tmp_path / "l.db"),
                                                         as_of=at(5, 7)).units}
        assert report["load"].status.state == report["extract"].status.state == "unknown"
