"""One health vocabulary: status, update, handover and report agree unit by unit.

The ledgers here are written by REAL runs through the engine (``tests.reports.faulted`` for a
faulted run with one unit in most states; the funds_positions example for a fully verified
run), never by hand, and every command is invoked through the CLI as an operator would.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from tests.reports.dom import Element, parse
from tests.reports.faulted import DAYS, EXPECTED, NOTE, FaultedRun, run_faulted

from twice.cli import cli
from twice.reports import health as health_module
from twice.reports import load_evidence, render_update
from twice.reports.health import (
    BASIS_LABEL,
    HEALTH_MEANING,
    HEALTH_ORDER,
    NEEDS_ATTENTION,
    Health,
)
from twice.reports.timeline_svg import slug


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWICE_LEDGER", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> FaultedRun:
    return run_faulted(tmp_path_factory.mktemp("faulted") / "run")


@pytest.fixture(scope="module")
def outputs(faulted: FaultedRun, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every command's text and JSON over the faulted ledger, as of the same instant."""
    at = faulted.as_of.isoformat()
    page = tmp_path_factory.mktemp("page") / "report.html"
    common = ("--ledger", faulted.url, "--as-of", at)
    report = run("report", "--html", str(page), "--json", *common)
    return {
        "status": run("status", *common).stdout,
        "status.json": json.loads(run("status", "--json", *common).stdout),
        "update": run("update", *common).stdout,
        "update.json": json.loads(run("update", "--json", *common).stdout),
        "handover": run("handover", *common).stdout,
        "handover.json": json.loads(run("handover", "--json", *common).stdout),
        "report.json": json.loads(report.stdout),
        "report.html": page.read_text(encoding="utf-8"),
    }


def by_id(document: dict[str, Any]) -> dict[str, str]:
    return {unit["id"]: unit["health"] for unit in document["units"]}


def test_the_faulted_run_really_ran(faulted: FaultedRun) -> None:
    evidence = load_evidence(faulted.url, as_of=faulted.as_of)
    attempts = {(u.unit.task, u.unit.interval.start.date()): u.attempts for u in evidence.units}
    assert [a.outcome for a in attempts[("extract", DAYS[0])]] == [
        "failed-transient", "succeeded"]  # retried by the engine after the injected error
    assert [a.outcome for a in attempts[("flaky", DAYS[1])]] == ["failed-transient"] * 3
    assert len(attempts[("notify", DAYS[0])]) == 1  # held: never executed again
    assert (faulted.root / "notify.log").read_text().count("2026-11-30") == 1
    assert attempts[("archive", DAYS[0])] == ()  # blocked behind the failed report


def test_each_unit_has_the_health_of_its_fault(faulted: FaultedRun) -> None:
    evidence = load_evidence(faulted.url, as_of=faulted.as_of)
    found = {(u.unit.task, u.unit.interval.start.date()): u.status for u in evidence.units}
    assert {key: str(status.state) for key, status in found.items()} == EXPECTED
    assert "--repeat notify" in found[("notify", DAYS[0])].text
    assert "acceptance failed" in found[("check", DAYS[0])].text
    assert "fingerprint v1" in found[("extract", DAYS[0])].text
    asserted = found[("publish", DAYS[1])]
    assert asserted.basis == "asserted" and "asserted by an operator (alice)" in asserted.text
    assert NOTE in asserted.text and "verified" not in asserted.text
    assert "attempts-exhausted" in found[("flaky", DAYS[1])].text
    assert "a retry is allowed" in found[("flaky", DAYS[0])].text


def test_every_json_agrees_unit_by_unit(faulted: FaultedRun, outputs: dict[str, Any]) -> None:
    expected = faulted.expected()
    status_rows = {row["id"]: row["health"] for row in outputs["status.json"]["units"]}
    assert status_rows == expected
    for name in ("update.json", "handover.json", "report.json"):
        document = outputs[name]
        assert by_id(document) == expected, name
        assert document["schema"] == "twice.health/v1"
        assert document["command"] == name.split(".")[0]
    headlines = {outputs[name]["headline"] for name in
                 ("status.json", "update.json", "handover.json", "report.json")}
    assert headlines == {
        "needs attention: 1 unknown, 1 held, 2 refused, 3 failed, 1 unverified, 2 blocked; "
        "in progress: 1 waiting; 2/14 verified, 1 asserted by an operator (not verified)"
    }
    counts = outputs["update.json"]["counts"]
    assert counts == {"unknown": 1, "held": 1, "refused": 2, "failed": 3, "unverified": 1,
                      "blocked": 2, "waiting": 1, "asserted": 1, "verified": 2}


def test_the_html_agrees_unit_by_unit(faulted: FaultedRun, outputs: dict[str, Any]) -> None:
    dom = parse(outputs["report.html"])
    expected = faulted.expected()
    cells = dom.one("table", id="interval-grid").find_all("td", "cell")
    assert {c.attrs["data-uow"]: c.attrs["data-health"] for c in cells} == expected
    assert all(f"health-{c.attrs['data-health']}" in c.classes for c in cells)
    rows = dom.one("table", id="units-table").find_all("tr", "unit-row")
    assert {r.attrs["data-uow"]: _health_of(r) for r in rows} == expected
    articles = dom.find_all("article", "unit")
    assert {a.attrs["data-uow"]: _health_of(a.one("h3")) for a in articles} == expected
    headline = dom.one("p", id="headline")
    assert headline.all_text() == outputs["report.json"]["headline"]


def _health_of(element: Element) -> str:
    (state,) = [s for s in element.find_all("span", "state") if "data-health" in s.attrs]
    return state.attrs["data-health"]


def test_the_markdown_handover_agrees(faulted: FaultedRun, outputs: dict[str, Any]) -> None:
    text = outputs["handover"]
    expected = faulted.expected()
    identifiers = text[text.index("## 1. Identifiers"):text.index("## 2. Job locations")]
    found = {}
    for line in identifiers.splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 8 and cells[0].strip("`") in expected:
            found[cells[0].strip("`")] = cells[6]
    assert found == expected
    publish = faulted.uow[("publish", DAYS[1])]
    row = next(line for line in identifiers.splitlines() if publish in line)
    assert row.endswith("| asserted | succeeded (asserted by an operator (alice)) |")
    assert f"- Health: {outputs['update.json']['headline']}" in text


def test_the_status_table_agrees(faulted: FaultedRun, outputs: dict[str, Any]) -> None:
    text = outputs["status"]
    lines = text.splitlines()
    assert lines[0] == outputs["status.json"]["headline"]
    found = {}
    for line in lines:
        cells = line.split()  # unit (a unique prefix of its id), interval, health, ...
        if len(cells) > 3 and cells[0].startswith("ops."):
            found[(cells[0].split(".")[1], cells[1])] = cells[2]
    assert found == {(task, day.isoformat()): state for (task, day), state in EXPECTED.items()}
    # The planner's validate-output is not shown as something to do for a verified unit.
    verified_rows = [line for line in lines if " verified " in line]
    assert verified_rows and all("validate-output" not in line for line in verified_rows)


def test_the_update_text_agrees(faulted: FaultedRun, outputs: dict[str, Any]) -> None:
    text = outputs["update"]
    lines = text.splitlines()
    assert lines[1] == outputs["update.json"]["headline"]
    names = {key: f"{key[0]} {key[1].isoformat()}" for key in EXPECTED}
    groups = {**_groups(_line(lines, "Needs attention"), names),
              **_groups(_line(lines, "In progress"), names)}
    confirmed = _line(lines, "Confirmed")
    for key, state in EXPECTED.items():
        if state in ("verified", "asserted"):
            assert names[key] in confirmed, key
        else:
            assert names[key] in groups[state], (key, state)


def _line(lines: list[str], label: str) -> str:
    return next(line for line in lines if line.startswith(f"{label}: "))


def _groups(line: str, names: dict[Any, str]) -> dict[str, str]:
    """``state: items`` groups of an update line; a group starts with a unit's name."""
    alternation = "|".join(re.escape(n) for n in names.values())
    states = "|".join(re.escape(str(h)) for h in HEALTH_ORDER)
    pattern = re.compile(rf"(?:^[A-Z][a-z ]+: |; )({states}): (?=(?:{alternation})\b)")
    marks = list(pattern.finditer(line))
    return {m.group(1): line[m.end():marks[i + 1].start() if i + 1 < len(marks) else None]
            for i, m in enumerate(marks)}


def test_attention_comes_first_everywhere(outputs: dict[str, Any]) -> None:
    rank = {str(state): i for i, state in enumerate(HEALTH_ORDER)}
    for name in ("status.json", "update.json", "handover.json", "report.json"):
        order = [rank[unit["health"]] for unit in outputs[name]["units"]]
        assert order == sorted(order), name
    attention = [u["health"] for u in outputs["report.json"]["needs_attention"]]
    assert attention == ["unknown", "held", "refused", "refused", "failed", "failed", "failed",
                         "unverified", "blocked", "blocked"]
    dom = parse(outputs["report.html"])
    items = dom.one("ul", id="attention-list").find_all("li", "attention-item")
    assert [i.attrs["data-health"] for i in items] == attention
    handover = outputs["handover"]
    assert handover.index("## Health: needs attention first") < handover.index("## 1. ")


def test_bases_never_mix(outputs: dict[str, Any]) -> None:
    dom = parse(outputs["report.html"])
    labels = {e.all_text() for e in dom.find_all("span", "basis")}
    assert {"decided", "executed", "observed", "verified", "assumed by the caller",
            "asserted by an operator"} <= labels
    assert len(set(BASIS_LABEL.values())) == len(BASIS_LABEL)
    # An observation is observed, never verified; a verified badge only on verified output.
    for row in dom.find_all("tr", "observation-row"):
        assert not row.find_all("span", "basis-verified")
    for article in dom.find_all("article", "unit"):
        heading = article.one("h3")
        if heading.find_all("span", "basis-verified"):
            assert _health_of(heading) == "verified"
    assumed = dom.one("section", id="assumptions").all_text()
    assert "safe_repeat (safeRepeat) is asserted by the caller" in assumed
    assert "safe_repeat" in _line(outputs["update"].splitlines(),
                                  "Assumed by the caller, not verified")
    assert any("safe_repeat" in a["text"] and a["basis"] == "assumed by the caller"
               for a in outputs["update.json"]["assumed"])


def test_the_vocabulary_is_defined_once() -> None:
    assert set(HEALTH_MEANING) == set(Health) and list(HEALTH_ORDER) == list(Health)
    doc = health_module.__doc__ or ""
    for state in Health:
        assert f"``{state}``" in doc, state
    assert list(NEEDS_ATTENTION[:5]) == ["unknown", "held", "refused", "failed",
                                         "stale-evidence"]


# -- a fully verified run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verified_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """The funds_positions example through faults, then a forced rerun of one day."""
    from tests.backfill import helpers

    from twice.drivers.backfill import run_backfill
    from twice.ledger import Ledger

    tmp = tmp_path_factory.mktemp("verified")
    root = helpers.make_workdir(tmp / "wh", days=3)
    faults = helpers.example().FaultPlan(
        transient_extract={date(2026, 11, 24): 2}, lost_ack_load={date(2026, 11, 25)}
    )
    url = f"sqlite:///{tmp / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        pipeline = helpers.example().build_pipeline(root, faults)
        spans = helpers.intervals(3)
        assert run_backfill(pipeline, ledger, spans).ok
        assert run_backfill(pipeline, ledger, spans[1:2], force=True).ok
        units = len(ledger.units())
    return url, units


def test_a_fully_verified_run_reads_done(verified_run: tuple[str, int], tmp_path: Path) -> None:
    url, units = verified_run
    done = f"done: {units}/{units} verified"
    assert units == 12
    update = run("update", "--ledger", url).stdout.splitlines()
    assert update[1] == done
    assert len(update) == 3 and update[2].startswith("Assumed by the caller, not verified:")
    assert "safe_repeat for aggregate, extract, load, transform" in update[2]
    assert run("status", "--ledger", url).stdout.splitlines()[0] == done
    assert f"- Health: {done}" in run("handover", "--ledger", url).stdout
    page = tmp_path / "report.html"
    report = json.loads(run("report", "--ledger", url, "--html", str(page), "--json").stdout)
    assert (report["headline"], report["done"], report["needs_attention"]) == (done, True, [])
    dom = parse(page.read_text(encoding="utf-8"))
    headline = dom.one("p", id="headline")
    assert headline.all_text() == done and "done" in headline.classes
    assert dom.one("p", id="attention-none")
    for name in ("update", "handover"):
        assert json.loads(run(name, "--ledger", url, "--json").stdout)["headline"] == done


def test_verified_evidence_does_not_go_stale(verified_run: tuple[str, int],
                                             tmp_path: Path) -> None:
    """Judged against what a decision needs: days later a verified run is still done, with
    nothing to refresh; the planner's validate-output/refresh-observation is not an action."""
    url, units = verified_run
    from twice.ledger import Ledger

    with Ledger.open(url) as ledger:
        later = (ledger.now() + timedelta(days=3)).isoformat()
    status = json.loads(run("status", "--ledger", url, "--json", "--as-of", later).stdout)
    assert status["done"] is True
    assert {row["health"] for row in status["units"]} == {"verified"}
    assert {row["next_action"] for row in status["units"]} == {None}
    assert {row["decision"] for row in status["units"]} <= {"refresh-observation",
                                                            "validate-output"}
    table = run("status", "--ledger", url, "--as-of", later).stdout
    assert "refresh-observation" not in table
    update = run("update", "--ledger", url, "--as-of", later).stdout
    assert update.splitlines()[1] == f"done: {units}/{units} verified"
    assert "refresh" not in update and "stale" not in update
    page = tmp_path / "later.html"
    run("report", "--ledger", url, "--as-of", later, "--html", str(page))
    dom = parse(page.read_text(encoding="utf-8"))
    assert not dom.find_all(cls="stale")
    evidence = load_evidence(url, as_of=__import__("datetime").datetime.fromisoformat(later))
    assert not [q for q in evidence.open_questions if "stale" in q.text]


def test_running_evidence_goes_stale_by_its_limit(tmp_path: Path) -> None:
    """A running attempt needs fresh evidence: fresh, then stale-evidence past the limit."""
    from tests.reports.story import StoryClock, at, unit_for

    from twice.ledger import Ledger
    from twice.reports import gather

    clock = StoryClock()
    with Ledger.open(tmp_path / "l.db", clock=clock) as ledger:
        uow = ledger.record_unit(unit_for("monitor")).uow_id
        clock.current = at(5, 0)
        ledger.begin_attempt(uow, holder="w1")
        ledger.record_decision(uow, "observe-running", reason="running", as_of=at(5, 0),
                               attempt=1, detail={"max_observation_age": 600})
        clock.current = at(5, 5)
        ledger.record_observation(uow, "running", source="bigquery.jobs.get", attempt=1)
        fresh = gather(ledger, as_of=at(5, 14)).unit(uow).status
        stale = gather(ledger, as_of=at(5, 16)).unit(uow).status
    assert fresh.state == Health.RUNNING and fresh.stale_at == at(5, 15)
    assert stale.state == Health.STALE_EVIDENCE and stale.basis == "observed"
    assert "over the 10 min limit" in stale.text


def test_a_superseded_unit_is_not_counted(tmp_path: Path) -> None:
    """A changed input is a new unit (the engine's identify step); the old one is set aside."""
    import pyarrow as pa

    from twice.define.pipeline import Pipeline
    from twice.define.schedule import Schedule
    from twice.engine.executor import Executor
    from twice.ledger import Ledger

    source = tmp_path / "source.txt"
    source.write_text("v1")
    pipeline = Pipeline("tiny", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=f"duckdb://{tmp_path / 'wh.duckdb'}?partition_column=day#t",
                   write="replace", safe_repeat=True,
                   input_version=lambda _interval: source.read_text())
    def extract(ctx: Any) -> Any:
        return pa.table({"day": pa.array([ctx.interval.start.date()], pa.date32()),
                         "v": pa.array([source.read_text()])})

    day = Schedule.daily("UTC").interval_for(date(2026, 11, 30))
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        assert Executor(pipeline, ledger).run(day).ok
        source.write_text("v2")
        assert Executor(pipeline, ledger).run(day).ok
        assert len(ledger.units()) == 2
    document = json.loads(run("update", "--ledger", url, "--json").stdout)
    assert document["headline"] == "done: 1/1 verified (1 superseded unit not counted)"
    assert sorted(u["health"] for u in document["units"]) == ["superseded", "verified"]
    text = run("update", "--ledger", url).stdout
    assert render_update(load_evidence(url)).splitlines()[1] == text.splitlines()[1]


def test_report_needs_an_output(faulted: FaultedRun) -> None:
    result = CliRunner().invoke(cli, ["report", "--ledger", faulted.url])
    assert result.exit_code == 2 and "give --html FILE" in result.stderr


def test_the_grid_links_every_cell_to_its_unit(outputs: dict[str, Any]) -> None:
    dom = parse(outputs["report.html"])
    ids = {e.attrs["id"] for e in dom.iter() if "id" in e.attrs}
    grid = dom.one("table", id="interval-grid")
    rows = grid.find_all("tr", "grid-row")
    assert [r.attrs["data-interval"][:10] for r in rows] == [d.isoformat() for d in DAYS]
    for cell in grid.find_all("td", "cell"):
        link = cell.one("a")
        assert link.attrs["href"] == f"#unit-{slug(cell.attrs['data-uow'])}"
        assert link.attrs["href"][1:] in ids
    headers = [th.all_text() for th in grid.find_all("th") if "data-task" in th.attrs]
    assert headers[0] == "extract"  # the engine's order: extract before what depends on it
    assert headers.index("check") > headers.index("extract")


def test_settled_cards_are_folded_and_attention_cards_open(faulted: FaultedRun,
                                                          outputs: dict[str, Any]) -> None:
    """Issue 39: the page stays small to read. A card whose unit needs nothing from a person
    (verified, asserted, superseded) shows its heading and status line, its timeline and
    evidence folded away; a card that needs attention or is in progress opens with them."""
    dom = parse(outputs["report.html"])
    expected = faulted.expected()
    seen: set[str] = set()
    for article in dom.find_all("article", "unit"):
        health = _health_of(article.one("h3"))
        body = article.one("details", "card-body")
        assert body.find_all("svg"), article.attrs["id"]  # the evidence is there, folded or not
        assert ("open" in body.attrs) == (Health(health) in health_module.AWAITING_ACTION), health
        seen.add(health)
    assert {"verified", "unknown", "failed"} <= seen == set(expected.values())


def test_recorded_details_are_inert_text_without_escaped_quotes(outputs: dict[str, Any]) -> None:
    """A recorded detail's JSON is text content: ``<`` and ``&`` are escaped, quotes need not
    be (they are most of the bytes of every detail)."""
    page = outputs["report.html"]
    codes = re.findall(r'<details class="detail"><summary>[^<]*</summary><code>(.*?)</code>',
                       page, re.S)
    assert codes and all("&quot;" not in c and '"' in c and "<" not in c for c in codes)
