"""The RUN handover runbook: the seed's sections, examples from the ledger, open assumptions."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
from tests.reports.story import AS_OF, StoryClock, StoryLedger, at, unit_for

from twice.define.load import load_pipeline
from twice.ledger import Ledger
from twice.reports import Evidence, gather, load_evidence, render_handover

SECTIONS = (
    "## 1. Identifiers (units of work)", "## 2. Job locations", "## 3. State sources",
    "## 4. Error classification", "## 5. Attempt limits", "## 6. Validation criteria",
    "## 7. Escalation owners", "## 8. Examples from this ledger",
    "## 9. Current state and planner decisions", "## 10. Unresolved assumptions",
)
EXAMPLES = ("### Duplicate after a lost response", "### DONE with an error",
            "### Deadline-infeasible")

PIPELINE_FILE = """\
from datetime import time, timedelta
from twice.define.acceptance import AcceptanceCriteria
from twice.define.pipeline import Pipeline
from twice.core.policy import RetryPolicy
from twice.define.schedule import Schedule

pipeline = Pipeline("funds_positions", schedule=Schedule.daily("UTC"),
                    workflow_timeout=timedelta(hours=1), deadline=time(6, 0),
                    owners={"escalation": "ops-oncall@example.com", "data": "positions team"})

@pipeline.task(retry=RetryPolicy(max_attempts=4, initial_delay=240, max_delay=720,
                                 transient=(ConnectionError,)), timeout=600,
               acceptance=AcceptanceCriteria(min_rows=1000), safe_repeat=True,
               destination="duckdb:///warehouse.duckdb?partition_column=day#raw_positions",
               estimated_duration=300, validation_duration=120)
def extract(ctx):
    return None

@pipeline.task(depends_on=[extract], timeout=600)
def load(ctx):
    return None
"""


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def section(text: str, heading: str) -> str:
    """The body under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading) + len(heading)
    following = re.search(rf"^#{{1,{len(level)}}} ", text[start:], re.MULTILINE)
    return text[start:start + following.start()] if following else text[start:]


@pytest.fixture(scope="module")
def runbook(evidence: Evidence) -> str:
    return render_handover(evidence)


def test_sections_in_the_seed_order(runbook: str) -> None:
    positions = [runbook.index(heading) for heading in SECTIONS]
    assert positions == sorted(positions)


def test_identifiers_and_job_locations(runbook: str, story: StoryLedger,
                                       evidence: Evidence) -> None:
    identifiers = section(runbook, SECTIONS[0])
    assert all(f"`{uow}`" in identifiers for uow in story.uow.values())
    locations = section(runbook, SECTIONS[1])
    load = evidence.unit(story.uow["load"])
    row = next(line for line in locations.splitlines() if load.generations[0].job_id in line)
    assert "| 1 |" in row and "succeeded" in row and "| 1, 2 |" in row and "EU" in row


def test_state_sources_and_error_classification(runbook: str) -> None:
    sources = section(runbook, SECTIONS[2])
    assert "`bigquery.jobs.get`" in sources and "10 min" in sources
    errors = section(runbook, SECTIONS[3])
    assert "transient: 5, permanent: 1, unknown: 2" in errors


def test_attempt_limits_from_decision_detail(runbook: str) -> None:
    limits = section(runbook, SECTIONS[4])
    assert "2 of 4" in limits and "max_attempts 4 (counts the first try)" in limits
    assert "decision detail" in limits


def test_the_three_examples_are_found(runbook: str, story: StoryLedger) -> None:
    examples = section(runbook, SECTIONS[7])
    duplicate = section(examples, EXAMPLES[0])
    assert story.uow["load"] in duplicate
    assert "outcome unknown since 2026-12-02 05:12:00Z" in duplicate
    assert "`duplicate` via `bigquery.jobs.insert`" in duplicate
    done = section(examples, EXAMPLES[1])
    assert story.uow["report_file"] in done and "Column amount missing" in done
    assert story.uow["load"] not in done  # DONE without errorResult is not an example
    deadline = section(examples, EXAMPLES[2])
    assert story.uow["archive"] in deadline and "attempt 3 not started" in deadline
    assert "estimated finish incl. validation 2026-12-02 06:06:00Z" in deadline


def test_unresolved_assumptions_are_listed(runbook: str) -> None:
    unresolved = section(runbook, SECTIONS[9])
    assert "safe_repeat (safeRepeat) is asserted by the caller" in unresolved
    assert "the outcome is unknown" in unresolved
    assert "nothing verified its output" in unresolved


def test_without_pipeline_file_owners_are_not_guessed(runbook: str) -> None:
    assert "give --pipeline-file" in section(runbook, SECTIONS[6])
    assert "give --pipeline-file" in section(runbook, SECTIONS[5])


def test_pipeline_file_adds_owners_policy_and_criteria(story: StoryLedger,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "funds.py"
    path.write_text(textwrap.dedent(PIPELINE_FILE))
    pipeline = load_pipeline(path)
    text = render_handover(load_evidence(story.url, as_of=AS_OF, pipeline=pipeline.name),
                           pipeline)
    owners = section(text, SECTIONS[6])
    assert "| escalation | ops-oncall@example.com |" in owners
    limits = section(text, SECTIONS[4])
    extract_row = next(line for line in limits.splitlines() if ".extract " in line)
    assert "pipeline file" in extract_row and "transient: ConnectionError" in extract_row
    assert "attempt_timeout 600" in extract_row
    assert "min_rows=1000" in section(text, SECTIONS[5])
    unresolved = section(text, SECTIONS[9])
    assert "safe_repeat=True is the pipeline author's assertion" in unresolved


def test_examples_say_none_recorded(tmp_path: Path) -> None:
    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("extract")).uow_id
        clock.current = at(5, 0)
        ledger.begin_attempt(uow, holder="w")
        clock.current = at(5, 1)
        ledger.finish_attempt(uow, 1, "succeeded")
        text = render_handover(gather(ledger))
    examples = section(text, SECTIONS[7])
    for heading in EXAMPLES:
        assert section(examples, heading).strip() == "_None recorded._"
    assert "_None recorded._" in section(text, SECTIONS[3])


def test_a_job_still_running_is_not_a_duplicate_example(tmp_path: Path) -> None:
    """Found by issue 39: an attempt that timed out (unknown) while its job kept running, the
    reconcile saying RUNNING, was listed under "Duplicate after a lost response". Nothing was
    resubmitted and nothing answered "duplicate": it is a job still running."""
    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("load")).uow_id
        clock.current = at(5, 0)
        ledger.begin_attempt(uow, holder="w", generation=1, job_id="job-1")
        clock.current = at(5, 10)
        ledger.finish_attempt(uow, 1, "unknown")
        clock.current = at(5, 11)
        ledger.record_observation(uow, "running", source="reconcile", attempt=1,
                                  detail={"job_id": "job-1", "state": "RUNNING"})
        text = render_handover(gather(ledger))
    assert section(section(text, SECTIONS[7]), EXAMPLES[0]).strip() == "_None recorded._"
