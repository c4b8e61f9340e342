"""The short English update: confirmed, unknown, next action, next evidence, nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reports.story import StoryClock, StoryLedger, at, unit_for

from twice.ledger import Ledger
from twice.reports import Evidence, gather, load_evidence, render_update


def lines_of(evidence: Evidence) -> dict[str, str]:
    text = render_update(evidence)
    assert len(text.splitlines()) <= 8, text
    return {line.split(":", 1)[0]: line for line in text.splitlines()[1:]}


def test_update_opens_with_the_headline(evidence: Evidence) -> None:
    text = render_update(evidence)
    assert text.startswith("Status update, pipeline funds_positions, interval 2026-12-01, as of "
                           "2026-12-02 05:30:00Z")
    assert text.splitlines()[1] == (
        "needs attention: 1 unknown, 1 failed, 1 stale-evidence, 1 unverified, 1 blocked; "
        "in progress: 1 waiting; 1/7 verified")
    lines = lines_of(evidence)
    assert set(lines) >= {"Needs attention", "Confirmed", "In progress",
                          "Next action (planner decisions)", "Next evidence"}


def test_attention_comes_in_the_vocabulary_order(evidence: Evidence, story: StoryLedger) -> None:
    attention = lines_of(evidence)["Needs attention"]
    order = [attention.index(f"{state}: ") for state in
             ("unknown", "failed", "stale-evidence", "unverified", "blocked")]
    assert order == sorted(order)
    job = evidence.unit(story.uow["publish"]).attempts[0].job_id
    assert f"unknown: publish attempt 1 (job {job}) unknown since 05:25:00Z" in attention
    assert "do not retry before settling it" in attention
    assert "failed: report_file (BadRequest: Column amount missing)" in attention
    assert ("stale-evidence: monitor attempt 1 running since 05:05:00Z (last evidence 15 min "
            "old, over the 10 min limit)") in attention
    assert "unverified: load (DONE via bigquery.jobs.get, evidence 15 min old" in attention
    assert "blocked: archive (deadline-infeasible)" in attention
    assert lines_of(evidence)["In progress"] == (
        "In progress: waiting: transform (attempt 3 may start at 05:35:00Z).")


def test_confirmed_is_only_what_was_verified(evidence: Evidence) -> None:
    confirmed = lines_of(evidence)["Confirmed"]
    assert "1 of 7 verified succeeded" in confirmed
    assert "extract (validated via twice.define.acceptance, evidence 20 min old)" in confirmed
    assert "load" not in confirmed


def test_next_action_comes_from_the_planner_decisions(evidence: Evidence) -> None:
    action = lines_of(evidence)["Next action (planner decisions)"]
    assert action.index("deadline-infeasible for archive") < action.index("reconcile-remote")
    assert "communicate the impact" in action
    # the impact itself: which interval misses which deadline, with alternatives
    assert "Impact: archive (deadline 2026-12-02 06:00:00Z) cannot be delivered" in action
    assert "Alternatives:" in action
    assert "repair-cause for report_file" in action
    assert "wait-backoff for transform until 05:35:00Z" in action
    assert "extract" not in action  # its decision is superseded by later evidence


def test_next_evidence_times(evidence: Evidence) -> None:
    due = lines_of(evidence)["Next evidence"]
    now, _, later = due.partition("; then ")
    assert "refresh monitor" in now and "went stale at 05:25:00Z" in now
    assert "reconcile publish" in now and "validate load's output" in now
    assert "extract" not in due  # verified: it needs no fresh evidence
    assert "05:35:00Z transform backoff ends, attempt 3 may start" in later
    assert "deadline 06:00:00Z" in later


def test_assumptions_are_flagged_not_promised(evidence: Evidence) -> None:
    assumed = lines_of(evidence)["Assumed by the caller, not verified"]
    assert "safe_repeat for archive, extract, load, monitor, publish, report_file, " \
           "transform" in assumed


def test_update_as_of_earlier(story: StoryLedger) -> None:
    evidence = load_evidence(story.url, as_of=at(5, 12, 45))
    attention = lines_of(evidence)["Needs attention"]
    assert "unknown: load attempt 1" in attention and "unknown since 05:12:00Z" in attention
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
    assert lines["Confirmed"] == "Confirmed: none of the 1 units is verified."
    assert lines["Needs attention"] == (
        "Needs attention: unverified: extract (no observation recorded; validate its output).")
    assert "No current decision for extract" in lines["Next action"]
    assert lines["Next evidence"] == "Next evidence: due now: validate extract's output."


def test_every_line_stays_short_with_many_units(tmp_path: Path) -> None:
    """An update is pasted into an incident channel: with 40 units awaiting one action, the
    next-action line names a few and counts the rest, like every other line."""
    from dataclasses import replace
    from datetime import timedelta

    from twice.core.interval import Interval

    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        first = unit_for("extract")
        for day in range(40):
            span = Interval(first.interval.start + timedelta(days=day),
                            first.interval.end + timedelta(days=day))
            uow = ledger.record_unit(replace(first, interval=span)).uow_id
            clock.current = at(5, 0)
            ledger.begin_attempt(uow, holder="w")
            ledger.finish_attempt(uow, 1, "unknown")
        text = render_update(gather(ledger))
    action = next(line for line in text.splitlines() if line.startswith("Next action"))
    assert len(action) < 600, action
    assert "more" in action
    assert max(len(line) for line in text.splitlines()) < 800


def test_status_as_of_leaves_out_units_recorded_later(tmp_path: Path) -> None:
    """Found by a probe: ``status --as-of`` before a unit was recorded listed it (with a
    decision planned from nothing) under a headline saying no unit was recorded."""

    from click.testing import CliRunner

    from twice.cli import cli

    clock = StoryClock()
    url = str(tmp_path / "l.db")
    with Ledger.open(url, clock=clock) as ledger:
        clock.current = at(5, 0)
        early = ledger.record_unit(unit_for("extract")).uow_id
        clock.current = at(5, 30)
        late = ledger.record_unit(unit_for("load")).uow_id
    for args in (["status"], ["decide", "--json"]):
        out = CliRunner().invoke(cli, [*args, "--ledger", url, "--as-of",
                                       "2026-12-02T05:10:00Z", *(["--json"] if args == ["status"]
                                                                 else [])])
        assert out.exit_code in (0, 1), out.output
        assert early in out.output and late not in out.output, (args, out.output)


def test_explain_reads_only_the_units_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a probe: explaining one unit of a 10,000-unit ledger took 18 s, because its
    health was gathered over every unit of the pipeline. A unit's health depends on its slot
    only (the units of its task and interval): explain reads those timelines, whatever the
    ledger's size, and the health is the same as the whole ledger's report gives."""
    from dataclasses import replace
    from datetime import timedelta

    from click.testing import CliRunner

    from twice.cli import cli
    from twice.core.interval import Interval
    from twice.ledger import Ledger as LedgerClass

    clock = StoryClock()
    url = str(tmp_path / "l.db")
    with Ledger.open(url, clock=clock) as ledger:
        first = unit_for("extract")
        ids = []
        for day in range(30):
            span = Interval(first.interval.start + timedelta(days=day),
                            first.interval.end + timedelta(days=day))
            uow = ledger.record_unit(replace(first, interval=span)).uow_id
            ledger.begin_attempt(uow, holder="w")
            ledger.finish_attempt(uow, 1, "failed-permanent")
            ids.append(uow)
        whole = {u.uow_id: str(u.status.state) for u in gather(ledger).units}
    reads: list[str] = []
    timeline = LedgerClass.timeline

    def counted(self: LedgerClass, uow_id: str) -> object:
        reads.append(uow_id)
        return timeline(self, uow_id)

    monkeypatch.setattr(LedgerClass, "timeline", counted)
    out = CliRunner().invoke(cli, ["explain", ids[7], "--ledger", url])
    assert out.exit_code == 0, out.output
    assert set(reads) == {ids[7]}
    assert f"health: {whole[ids[7]]}" in out.output


def test_the_json_names_each_units_next_action(evidence: Evidence) -> None:
    """``needsAttention`` and ``units`` give the planner's next action, as the JSON reference
    says (found by a probe: only the health and the reason were there); settled: none."""
    from twice.reports.health import health_document

    document = health_document(evidence, "update")
    attention = {entry["label"].split()[0].split(".")[-1]: entry["nextAction"]
                 for entry in document["needsAttention"]}
    assert attention["report_file"] == "repair-cause"
    assert attention["archive"] == "deadline-infeasible"
    units = {unit["task"]: unit["nextAction"] for unit in document["units"]}
    assert units["extract"] is None  # verified: nothing to do
    assert units["transform"] == "wait-backoff"
