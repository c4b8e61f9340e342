"""The short English update: confirmed, unknown, next action, next evidence, nothing more."""

from __future__ import annotations

from pathlib import Path

from tests.reports.story import StoryClock, StoryLedger, at, unit_for

from twice.ledger import Ledger
from twice.reports import Evidence, gather, load_evidence, render_update


def lines_of(evidence: Evidence) -> dict[str, str]:
    text = render_update(evidence)
    assert len(text.splitlines()) <= 8, text
    return {line.split(":", 1)[0]: line for line in text.splitlines()[1:]}


def test_update_answers_the_four_questions(evidence: Evidence) -> None:
    text = render_update(evidence)
    assert text.startswith("Status update, pipeline funds_positions, interval 2026-12-01, as of "
                           "2026-12-02 05:30:00Z")
    lines = lines_of(evidence)
    assert set(lines) >= {"Confirmed", "Outcome still unknown", "Next action (planner decisions)",
                          "Next evidence"}


def test_confirmed_is_only_what_was_validated(evidence: Evidence) -> None:
    confirmed = lines_of(evidence)["Confirmed"]
    verified, _, unvalidated = confirmed.partition("Finished without error but not yet validated")
    assert "1 of 7 verified succeeded" in verified
    assert "extract (validated via twice.acceptance, evidence 20 min old)" in verified
    assert "load" not in verified
    assert "load (DONE via bigquery.jobs.get, evidence 15 min old)" in unvalidated


def test_unknown_outcome_is_named_with_its_job(evidence: Evidence, story: StoryLedger) -> None:
    unknown = lines_of(evidence)["Outcome still unknown"]
    job = evidence.unit(story.uow["publish"]).attempts[0].job_id
    assert f"publish attempt 1 (job {job}) unknown since 05:25:00Z" in unknown
    assert "do not retry before reconciling it" in unknown
    assert "monitor attempt 1 still running since 05:05:00Z" in unknown


def test_next_action_comes_from_the_planner_decisions(evidence: Evidence) -> None:
    action = lines_of(evidence)["Next action (planner decisions)"]
    assert action.index("deadline-infeasible for archive") < action.index("reconcile-remote")
    assert "communicate the impact" in action
    assert "repair-cause for report_file" in action
    assert "wait-backoff for transform until 05:35:00Z" in action
    assert "extract" not in action  # its decision is superseded by later evidence


def test_next_evidence_times(evidence: Evidence) -> None:
    due = lines_of(evidence)["Next evidence"]
    now, _, later = due.partition("; then ")
    assert "refresh monitor" in now and "went stale at 05:25:00Z" in now
    assert "reconcile publish" in now and "validate load's output" in now
    assert later.startswith("05:35:00Z transform backoff ends, attempt 3 may start")
    assert "deadline 06:00:00Z" in later


def test_assumptions_are_flagged_not_promised(evidence: Evidence) -> None:
    assumed = lines_of(evidence)["Assumed, not verified"]
    assert "safeRepeat for 7 unit(s)" in assumed


def test_update_as_of_earlier(story: StoryLedger) -> None:
    evidence = load_evidence(story.url, as_of=at(5, 12, 45))
    unknown = lines_of(evidence)["Outcome still unknown"]
    assert "load attempt 1" in unknown and "unknown since 05:12:00Z" in unknown
    assert "later records left out" in render_update(evidence).splitlines()[0]


def test_update_for_an_empty_ledger(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as ledger:
        text = render_update(gather(ledger))
    assert "no units of work" in text


def test_nothing_unknown_and_nothing_scheduled(tmp_path: Path) -> None:
    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("extract")).uow_id
        clock.current = at(5, 0)
        ledger.begin_attempt(uow, holder="w")
        clock.current = at(5, 1)
        ledger.finish_attempt(uow, 1, "succeeded")
        lines = lines_of(gather(ledger))
    assert lines["Confirmed"].startswith("Confirmed: none of the 1 units is verified succeeded")
    assert "not yet validated: extract (no observation recorded)" in lines["Confirmed"]
    assert lines["Outcome unknown"].endswith("every recorded attempt has a known outcome.")
    assert "No current decision for extract" in lines["Next action"]
    assert lines["Next evidence"] == "Next evidence: none scheduled by the recorded decisions."
