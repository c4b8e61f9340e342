"""``twice resolve`` end to end: the command, its refusals, and how every report shows it.

A unit whose attempt became unknown (its worker's lease was taken over) is resolved by an
operator. ``status``, ``explain``, ``handover``, ``update`` and the HTML report must show its
outcome as asserted by an operator, with the name and the note, and never as verified.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.ledger.ledger_helpers import FakeClock, make_uow
from tests.reports.dom import parse

from twice.cli import cli
from twice.ledger import Ledger

NOTE = "checked warehouse.positions by hand: 18,204 rows, matches the source"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """Unit ``lost`` (day 5): attempt 1 unknown after a lease takeover; unit ``checked``
    (day 6): succeeded and validated by a named source (verified), for contrast."""
    path = tmp_path / "ledger.db"
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    lost, checked = make_uow(5), make_uow(6)
    with Ledger.open(path, clock=clock) as ledger:
        for uow in (lost, checked):
            ledger.record_unit(uow)
        ledger.acquire_lease(lost.uow_id, "worker-1", 30)
        ledger.begin_attempt(lost.uow_id, holder="worker-1")
        clock.advance(60)
        ledger.acquire_lease(lost.uow_id, "worker-2", 30)  # takeover: attempt 1 unknown
        ledger.begin_attempt(checked.uow_id, holder="worker-2")
        ledger.finish_attempt(checked.uow_id, 1, "succeeded")
        ledger.record_observation(checked.uow_id, "validated", source="twice.define.acceptance",
                                  attempt=1)
        ledger.release_lease(lost.uow_id, "worker-2")
    return path


def _lost() -> str:
    return make_uow(5).uow_id


def test_resolve_then_every_report_says_asserted_by_an_operator(
    ledger_path: Path, tmp_path: Path
) -> None:
    db = str(ledger_path)
    done = invoke("resolve", _lost(), "--as", "succeeded", "--note", NOTE, "--ledger", db,
                  env={"USER": "alice"})
    assert done.exit_code == 0, done.output
    assert "unknown -> succeeded, asserted by an operator (alice)" in done.stdout
    assert "not verified" in done.stdout

    status = invoke("status", "--ledger", db)
    assert status.exit_code == 0, status.output
    line = next(text for text in status.stdout.splitlines() if "#1 succeeded" in text
                and "2026-11-05" in text)
    assert "asserted by an operator (alice)" in line
    assert "asserted by an operator (alice): checked warehouse.positions" in status.stdout
    status_json = json.loads(invoke("status", "--ledger", db, "--json").stdout)
    rows = {row["id"]: row for row in status_json["units"]}
    lost = rows[_lost()]
    assert (lost["basis"], lost["asserted_by"], lost["assertion"]) == ("asserted", "alice", NOTE)
    assert rows[make_uow(6).uow_id]["basis"] is None

    explain = invoke("explain", _lost(), "--ledger", db)
    assert explain.exit_code == 0, explain.output
    resolved = [text for text in explain.stdout.splitlines()
                if "[asserted]" in text and not text.startswith("[asserted]:")]
    assert len(resolved) == 2  # the attempt closed, and the operator's observation
    assert explain.stdout.splitlines()[-1].startswith("[asserted]: an operator's resolution")
    assert all("asserted by an operator (alice)" in text for text in resolved)
    assert "verified" not in explain.stdout
    events = json.loads(invoke("explain", _lost(), "--ledger", db, "--json").stdout)["events"]
    assert [e["asserted_by"] for e in events if e["asserted_by"]] == ["alice", "alice"]

    handover = invoke("handover", "--ledger", db)
    assert handover.exit_code == 0, handover.output
    rows_md = [text for text in handover.stdout.splitlines() if "2026-11-05" in text]
    identifiers = next(text for text in rows_md if _lost() in text)
    assert identifiers.endswith("| succeeded (asserted by an operator (alice)) |")
    assert f"| succeeded | asserted by an operator (alice) | {NOTE} |" in handover.stdout
    assert "verified" not in " ".join(rows_md)

    update = invoke("update", "--ledger", db)
    assert update.exit_code == 0, update.output
    confirmed = next(t for t in update.stdout.splitlines() if t.startswith("Confirmed"))
    assert "1 of 2 verified succeeded" in confirmed  # only the validated unit
    assert ("Succeeded as asserted by an operator, not observed by twice: load 2026-11-05 "
            "(asserted by an operator (alice): checked") in confirmed

    page = tmp_path / "report.html"
    report = invoke("report", "--html", str(page), "--ledger", db)
    assert report.exit_code == 0, report.output
    dom = parse(page.read_text(encoding="utf-8"))
    row = dom.one("tr", "unit-row", **{"data-uow": _lost()})
    assert len(row.find_all("span", "basis-asserted")) == 2  # the outcome and its evidence
    assert not row.find_all("span", "basis-verified")
    assert "asserted by an operator (alice)" in row.all_text()
    article = dom.one("article", "unit", **{"data-uow": _lost()})
    heading = article.one("h3")
    assert heading.one("span", "basis-asserted") and not heading.find_all("span",
                                                                          "basis-verified")
    assert "asserted by an operator (alice)" in article.one("p", "status-text").all_text()
    # The only observed fact about this unit is the lease takeover twice itself observed.
    observed = [r for r in article.find_all("tr", "observation-row")
                if r.find_all("span", "basis-observed")]
    assert [r.all_text().count("lease-taken-over") for r in observed] == [1]
    attempt = article.one("tr", "attempt-row")
    assert attempt.one("span", "basis-asserted") and not attempt.find_all("span",
                                                                          "basis-executed")
    observation = [r for r in article.find_all("tr", "observation-row")
                   if "resolved-succeeded" in r.all_text()]
    assert len(observation) == 1 and observation[0].one("span", "basis-asserted")
    assert NOTE in article.all_text()
    legend = dom.one("ul", "legend", id="basis-legend")
    assert "asserted by an operator" in legend.all_text()
    other = dom.one("tr", "unit-row", **{"data-uow": make_uow(6).uow_id})
    assert other.find_all("span", "basis-verified")  # real validation still reads verified


def test_resolve_as_failed_and_json(ledger_path: Path) -> None:
    result = invoke("resolve", _lost(), "--as", "failed", "--note", "no load job for that id",
                    "--operator", "bob", "--attempt", "1", "--ledger", str(ledger_path),
                    "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert (body["asserted"], body["attempt_outcome"], body["previous_outcome"]) == (
        "failed", "failed-transient", "unknown")
    assert (body["source"], body["state"], body["basis"], body["repeated"]) == (
        "operator:bob", "resolved-failed", "asserted", False)
    again = invoke("resolve", _lost(), "--as", "failed", "--note", "still none",
                   "--operator", "bob", "--ledger", str(ledger_path), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["repeated"] is True


def test_operator_defaults_to_user_then_operator(ledger_path: Path) -> None:
    result = invoke("resolve", _lost(), "--as", "succeeded", "--note", NOTE, "--ledger",
                    str(ledger_path), "--json", env={"USER": ""})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["source"] == "operator:operator"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["nosuch.unit", "--as", "succeeded", "--note", "n"], "UOW_ID: unknown unit of work"),
        (["{lost}", "--as", "succeeded"], "--note: say what you checked"),
        (["{lost}", "--as", "succeeded", "--note", "   "], "--note: say what you checked"),
        (["{lost}", "--as", "succeeded", "--note", "n", "--attempt", "0"],
         "--attempt: attempts are numbered from 1"),
        (["{lost}", "--as", "succeeded", "--note", "n", "--attempt", "3"],
         "--attempt 3: unit of work"),
        (["{checked}", "--as", "failed", "--note", "n"],
         "UOW_ID (latest attempt): attempt 1 of"),
        (["{lost}", "--as", "succeeded", "--note", "n", "--operator", " "], "--operator:"),
        (["{lost}", "--as", "maybe", "--note", "n"], "'--as'"),
        (["{lost}", "--as", "succeeded", "--note", "n", "--ledger", "{missing}"],
         "--ledger: no ledger at"),
    ],
)
def test_bad_input_names_the_field_and_exits_2(
    ledger_path: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    values = {"lost": _lost(), "checked": make_uow(6).uow_id,
              "missing": str(tmp_path / "none.db")}
    given = [a.format(**values) for a in args]
    if "--ledger" not in given:
        given += ["--ledger", str(ledger_path)]
    result = invoke("resolve", *given)
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "none.db").exists()
    if "{checked}" in args:
        assert "is succeeded (recorded by twice), not unknown or running" in result.output
    with Ledger.open(ledger_path) as ledger:  # nothing was recorded
        assert ledger.resolutions(_lost()) == []


def test_ledger_faults_exit_1_with_the_message(ledger_path: Path) -> None:
    import sqlite3

    other = sqlite3.connect(ledger_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # someone holds the write lock for good
    try:
        from twice.ledger import store

        original = store.Ledger.open.__func__  # type: ignore[attr-defined]

        def quick(cls: type, *args: object, **kwargs: object) -> Ledger:
            kwargs.setdefault("busy_timeout", 0.05)
            kwargs.setdefault("retry_seconds", 0.3)
            return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store.Ledger, "open", classmethod(quick))
            result = invoke("resolve", _lost(), "--as", "succeeded", "--note", NOTE,
                            "--ledger", str(ledger_path))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert result.exit_code == 1, result.output
    assert "is unavailable: database is locked" in result.output
    assert "Traceback" not in result.output


def test_resolve_is_listed_in_help() -> None:
    result = invoke("--help")
    assert "resolve" in result.stdout and "asserted, not observed" in result.stdout
