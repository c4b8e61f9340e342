"""The HTML report: structure, timeline marks, truthfulness badges, self-containment."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from tests.reports.dom import Element, parse
from tests.reports.story import AS_OF, StoryClock, StoryLedger, at, unit_for

from twice.ledger import Ledger
from twice.reports import Evidence, gather, render_html
from twice.reports.timeline_svg import slug


@pytest.fixture(scope="module")
def page(evidence: Evidence) -> str:
    return render_html(evidence)


@pytest.fixture(scope="module")
def dom(page: str) -> Element:
    return parse(page)


def timeline(dom: Element, story: StoryLedger, task: str) -> Element:
    return dom.one("svg", "timeline", id=f"timeline-{slug(story.uow[task])}")


def bar_classes(svg: Element) -> list[str]:
    return [next(c for c in bar.classes if c.startswith("outcome-"))
            for bar in svg.find_all("rect", "attempt-bar")]


def test_units_table_lists_every_unit(dom: Element, story: StoryLedger) -> None:
    table = dom.one("table", id="units-table")
    rows = table.find_all("tr", "unit-row")
    assert {row.attrs["data-uow"] for row in rows} == set(story.uow.values())
    by_uow = {row.attrs["data-uow"]: row for row in rows}
    load = by_uow[story.uow["load"]].all_text()
    assert "succeeded" in load and "2 of 4" in load and "_g1" in load
    assert "unit-state-unknown" in by_uow[story.uow["publish"]].classes


def test_one_timeline_per_unit_with_a_bar_per_attempt(dom: Element, evidence: Evidence,
                                                      story: StoryLedger) -> None:
    assert len(dom.find_all("svg", "timeline")) == len(story.uow)
    for unit in evidence.units:
        svg = dom.one("svg", "timeline", id=f"timeline-{slug(unit.uow_id)}")
        assert len(svg.find_all("rect", "attempt-bar")) == len(unit.attempts)
        assert len(svg.find_all("circle", "observation-marker")) == len(unit.observations)
        assert len(svg.find_all("polygon", "decision-marker")) == len(unit.decisions)
        assert len(svg.find_all("line", "deadline-line")) == 1


def test_bars_are_coloured_by_outcome_with_backoff_gaps(dom: Element, story: StoryLedger) -> None:
    extract = timeline(dom, story, "extract")
    assert bar_classes(extract) == ["outcome-failed-transient", "outcome-succeeded"]
    gap = extract.one("g", "backoff-gap")
    assert gap.attrs["data-before-attempt"] == "2"
    assert "backoff 4 min" in gap.all_text()
    assert bar_classes(timeline(dom, story, "transform")) == ["outcome-failed-transient"] * 2
    assert bar_classes(timeline(dom, story, "report_file")) == ["outcome-failed-permanent"]
    monitor = timeline(dom, story, "monitor").one("rect", "attempt-bar")
    assert "open-ended" in monitor.classes and "outcome-running" in monitor.classes


def _x(element: Element, name: str = "x") -> float:
    return float(element.attrs[name])


def test_bar_geometry_follows_time(dom: Element, story: StoryLedger) -> None:
    svg = timeline(dom, story, "extract")
    first, second = svg.find_all("rect", "attempt-bar")
    first_end = _x(first) + _x(first, "width")
    assert first_end < _x(second)  # the backoff gap is visible between the bars
    gap_line = svg.one("g", "backoff-gap").find_all("line")[0]
    assert _x(gap_line, "x1") == pytest.approx(first_end, abs=0.2)
    assert _x(gap_line, "x2") == pytest.approx(_x(second), abs=0.2)


def test_deadline_infeasible_attempt_crosses_the_deadline(dom: Element,
                                                          story: StoryLedger) -> None:
    svg = timeline(dom, story, "archive")
    withheld = svg.one("rect", "not-started-bar")
    assert withheld.attrs["data-attempt"] == "3"
    deadline = _x(svg.one("line", "deadline-line"), "x1")
    assert _x(withheld) < deadline < _x(withheld) + _x(withheld, "width")
    assert "deadline 06:00:00Z" in svg.one("text", "deadline-line-label").all_text()


def test_lost_acknowledgement_marks(dom: Element, story: StoryLedger) -> None:
    svg = timeline(dom, story, "load")
    assert bar_classes(svg) == ["outcome-unknown", "outcome-succeeded"]
    assert len(svg.find_all("rect", "unknown-span")) == 1
    markers = svg.find_all("circle", "observation-marker")
    assert ["kind-reconcile" in m.classes for m in markers] == [True, False, False]
    assert "has-duplicate" in markers[1].classes
    assert "gap 1 min" in svg.one("g", "backoff-gap").all_text()  # not called a backoff
    error_marker = timeline(dom, story, "report_file").one("circle", "observation-marker")
    assert "kind-done-with-error" in error_marker.classes


def test_every_basis_is_shown(dom: Element) -> None:
    badges = {c for e in dom.find_all("span", "basis") for c in e.classes}
    assert {"basis-decided", "basis-executed", "basis-observed", "basis-verified",
            "basis-assumed"} <= badges
    labels = {e.all_text() for e in dom.find_all("span", "basis")}
    assert {"assumed by the caller", "observed", "verified"} <= labels
    assumptions = dom.one("section", id="assumptions").all_text()
    assert "safe_repeat (safeRepeat) is asserted by the caller" in assumptions


def test_observation_rows_show_source_and_age(dom: Element, story: StoryLedger) -> None:
    article = dom.one("article", id=f"unit-{slug(story.uow['monitor'])}")
    (row,) = article.find_all("tr", "observation-row")
    text = row.all_text()
    assert "bigquery.jobs.get" in text and "15 min" in text and "stale" in text


def test_decision_rows_have_reasons(dom: Element, story: StoryLedger) -> None:
    article = dom.one("article", id=f"unit-{slug(story.uow['archive'])}")
    (row,) = article.find_all("tr", "decision-deadline-infeasible")
    text = row.all_text()
    assert "after the deadline" in text and "3 (not started)" in text
    assert row.one("span", "basis-decided") and row.one("span", "basis-assumed")
    assert row.one("span", "assumed-items").all_text() == "safeRepeat, estimated durations"


def test_fingerprint_versions_and_diffs(dom: Element) -> None:
    section = dom.one("section", id="fingerprints")
    changed = section.one("div", "partition", data_partition="2026-11-30")
    assert len(changed.find_all("tr", "fingerprint-version")) == 2
    diff = changed.one("tr", "fingerprint-diff")
    assert "diff-changed" in diff.classes
    cells = [td.all_text() for td in diff.find_all("td")]
    assert cells[1:5] == ["1000", "998", "-2", "yes"]
    unchanged = section.one("div", "partition", data_partition="2026-11-29")
    same = unchanged.one("tr", "fingerprint-diff")
    assert "diff-same" in same.classes and "identical" in same.all_text()


def test_page_is_self_contained(page: str, dom: Element) -> None:
    assert not dom.find_all("script") and not dom.find_all("link")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    assert not [a for a in dom.find_all("a") if not a.attrs.get("href", "").startswith("#")]


def test_hostile_text_is_escaped(tmp_path: Path) -> None:
    clock = StoryClock()
    clock.current = at(5, 0)
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("load")).uow_id
        attempt = ledger.begin_attempt(uow, holder='w"><script>x</script>').number
        ledger.finish_attempt(uow, attempt, "failed-permanent")
        ledger.record_error(uow, error_class="E", message="<script>alert(1)</script>",
                            classification="permanent", attempt=attempt)
        ledger.record_observation(uow, "<b>DONE</b>", source="a'b\"c", attempt=attempt)
        page = render_html(gather(ledger))
    assert "<script>" not in page and "<b>DONE</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_unit_without_evidence_and_far_as_of(tmp_path: Path) -> None:
    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        quiet = ledger.record_unit(unit_for("extract")).uow_id
        busy = ledger.record_unit(unit_for("load")).uow_id
        clock.current = at(5, 0)
        ledger.begin_attempt(busy, holder="w")
        clock.current = at(5, 1)
        ledger.finish_attempt(busy, 1, "succeeded")
        dom = parse(render_html(gather(ledger, as_of=AS_OF + timedelta(days=2))))
    assert "empty" in dom.one("svg", id=f"timeline-{slug(quiet)}").classes
    svg = dom.one("svg", id=f"timeline-{slug(busy)}")
    assert len(svg.find_all("rect", "attempt-bar")) == 1
    assert not svg.find_all("line", "as-of-line")  # two days later would flatten the plot


def test_empty_ledger_page(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as ledger:
        dom = parse(render_html(gather(ledger)))
    assert "records no units of work" in dom.one(id="units-table").all_text()


def test_attempts_are_counted_against_the_limit_of_their_run(tmp_path: Path) -> None:
    """Found by issue 39: "Attempts 2 of 1" for a task allowed 1 attempt per run that ran in
    two runs: the limit is per run, the count was of every run."""
    from tests.executor.helpers import ManualClock, day

    from twice.core.policy import RetryPolicy
    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule
    from twice.engine.executor import Executor

    pipeline = Pipeline("flaky", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=1, transient=(ConnectionError,)),
                   safe_repeat=True, timeout=30)
    def fetch(ctx: TaskContext) -> None:
        raise ConnectionError("the source is down")

    clock = ManualClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        for _ in range(2):
            Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())
            clock.advance(3600)
        page = render_html(gather(ledger))
    row = parse(page).one("table", id="units-table").one("tr", "unit-row").all_text()
    assert "2 of 1" not in row
    assert "1 of 1 in the latest run, 2 in all" in row, row
