"""``twice report``, ``twice update`` and ``twice handover`` on the command line.

Bad input (a missing, unreadable or foreign ledger, an unknown pipeline, a bad time) is answered
with one message naming it and exit 2, never a traceback, and never by creating a ledger.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.reports.dom import parse
from tests.reports.story import StoryLedger

from twice.cli import cli

AS_OF = "2026-12-02T05:30:00Z"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def refused(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert re.match(r"twice [a-z]+: error: ", result.stderr), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


@pytest.fixture(autouse=True)
def _no_ledger_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWICE_LEDGER", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_report_writes_the_page(story: StoryLedger, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run("report", "--html", str(out), "--ledger", story.url, "--as-of", AS_OF)
    assert result.exit_code == 0, result.output
    assert "7 units of work, 3 fingerprinted partitions" in result.output
    dom = parse(out.read_text(encoding="utf-8"))
    assert len(dom.find_all("rect", "attempt-bar")) == 11


def test_report_pipeline_filter_and_deadline_option(story: StoryLedger, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run("report", "--html", str(out), "--ledger", str(story.path), "--pipeline",
                 "funds_positions", "--as-of", AS_OF, "--deadline", "2026-12-02T07:00:00Z")
    assert result.exit_code == 0, result.output
    assert "pipeline funds_positions" in out.read_text(encoding="utf-8")


def test_update_prints_a_few_lines(story: StoryLedger) -> None:
    result = run("update", "--ledger", story.url, "--as-of", AS_OF)
    assert result.exit_code == 0, result.output
    assert 4 <= len(result.output.splitlines()) <= 8
    assert result.output.splitlines()[1].startswith("needs attention: 1 unknown")
    assert "Needs attention: unknown: publish attempt 1" in result.output


def test_update_reads_twice_ledger_from_the_environment(story: StoryLedger) -> None:
    result = run("update", "--as-of", AS_OF, env={"TWICE_LEDGER": story.url})
    assert result.exit_code == 0, result.output
    assert story.url in result.output


def test_handover_to_file_and_stdout(story: StoryLedger, tmp_path: Path) -> None:
    out = tmp_path / "runbook.md"
    result = run("handover", "--ledger", story.url, "--as-of", AS_OF, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("# RUN handover")
    printed = run("handover", "--ledger", story.url, "--as-of", AS_OF)
    assert printed.output == out.read_text(encoding="utf-8")


def test_handover_with_pipeline_file(story: StoryLedger, tmp_path: Path) -> None:
    path = tmp_path / "funds.py"
    path.write_text(textwrap.dedent("""\
        from twice.define.pipeline import Pipeline
        from twice.define.schedule import Schedule
        pipeline = Pipeline("funds_positions", schedule=Schedule.daily("UTC"),
                            owners={"escalation": "ops-oncall@example.com"})
        @pipeline.task
        def extract(ctx):
            return None
        """))
    result = run("handover", "--ledger", story.url, "--as-of", AS_OF, "--pipeline-file",
                 str(path))
    assert result.exit_code == 0, result.output
    assert "| escalation | ops-oncall@example.com |" in result.output


@pytest.mark.parametrize("command", ["report", "update", "handover"])
def test_missing_ledger_is_refused_not_created(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    extra = ["--html", str(tmp_path / "r.html")] if command == "report" else []
    refused(run(command, *extra, "--ledger", str(missing)), "ledger not found", str(missing))
    assert not missing.exists()


def test_default_ledger_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    refused(run("update"), "twice-ledger.db (the default; set --ledger or $TWICE_LEDGER)")
    assert not (tmp_path / "twice-ledger.db").exists()


def test_env_ledger_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "env.db")
    refused(run("update", env={"TWICE_LEDGER": missing}), f"{missing} (from $TWICE_LEDGER)")


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_text("this is not a database " * 100)
    refused(run("update", "--ledger", str(garbage)), "cannot read ledger", "not a database")


def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    refused(run("handover", "--ledger", str(foreign)), "is not a twice ledger")
    with sqlite3.connect(foreign) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"customers"}


def test_unsupported_url_is_refused(tmp_path: Path) -> None:
    refused(run("update", "--ledger", "mysql://x/y"), "unsupported ledger URL")


def test_unknown_pipeline_is_refused(story: StoryLedger) -> None:
    refused(run("update", "--ledger", story.url, "--pipeline", "fund_positions"),
            "no units of work for pipeline 'fund_positions'", "funds_positions")


def test_bad_times_are_refused(story: StoryLedger, tmp_path: Path) -> None:
    refused(run("update", "--ledger", story.url, "--as-of", "yesterday"), "--as-of")
    refused(run("update", "--ledger", story.url, "--as-of", "2026-12-02T05:30:00"),
            "no UTC offset")
    refused(run("report", "--html", str(tmp_path / "r.html"), "--ledger", story.url,
                "--deadline", "soon"), "--deadline")


def test_unwritable_output_is_refused(story: StoryLedger, tmp_path: Path) -> None:
    target = tmp_path / "missing-folder" / "r.html"
    refused(run("report", "--html", str(target), "--ledger", story.url), "cannot write")
    refused(run("handover", "--ledger", story.url, "-o", str(target)), "cannot write")


def test_missing_pipeline_file_is_refused(story: StoryLedger, tmp_path: Path) -> None:
    refused(run("handover", "--ledger", story.url, "--pipeline-file", str(tmp_path / "x.py")),
            "pipeline file not found")


def test_commands_import_heavy_modules_lazily() -> None:
    code = ("import sys, twice.cli.report_cmd, twice.cli.update_cmd, twice.cli.handover_cmd; "
            "print(sorted(m for m in ('sqlalchemy', 'twice.reports', 'twice.ledger') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("command", ["report", "handover"])
def test_a_report_never_overwrites_its_ledger_or_a_database(command: str, story: StoryLedger,
                                                            tmp_path: Path) -> None:
    """Found by a probe: ``report --html`` and ``handover -o`` naming the ledger (or a
    warehouse) replaced it with the page, exit 0: all evidence gone."""
    import duckdb

    ledger = tmp_path / "ledger.db"
    ledger.write_bytes(story.path.read_bytes())
    warehouse = tmp_path / "wh.duckdb"
    duckdb.connect(str(warehouse)).close()
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("create table t (x)").connection.close()
    option = "--html" if command == "report" else "-o"
    for target, said in ((ledger, "is the ledger"), (tmp_path / "ledger.db-wal", "is the ledger"),
                         (warehouse, "database or data file"), (other, "database or data file")):
        before = target.read_bytes() if target.is_file() else None
        result = run(command, option, str(target), "--ledger", str(ledger), "--as-of", AS_OF)
        refused(result, "--html" if command == "report" else "--output", said)
        assert (target.read_bytes() if target.is_file() else None) == before
    # an earlier report is replaced, as before
    page = tmp_path / "page.out"
    page.write_text("old")
    assert run(command, option, str(page), "--ledger", str(ledger), "--as-of",
               AS_OF).exit_code == 0
    assert page.read_text() != "old"


@pytest.mark.parametrize("command", ["status", "update", "handover", "report --json",
                                     "explain x", "decide --format json", "verify"])
def test_a_reading_command_writes_nothing_to_what_it_is_pointed_at(command: str,
                                                                   story: StoryLedger,
                                                                   tmp_path: Path) -> None:
    """Found by probes: ``status`` turned an empty file into a full ledger and migrated an
    older ledger in place; ``verify`` created a ledger at a typo'd path (after which every
    report on that path said "nothing to report", exit 0). A reading command opens the
    ledger read-only and creates nothing."""
    empty = tmp_path / "empty.db"
    empty.touch()
    missing = tmp_path / "typo" / "ledger.db"
    missing.parent.mkdir()
    older = tmp_path / "older.db"
    older.write_bytes(story.path.read_bytes())
    with sqlite3.connect(older) as conn:  # as if written by a twice of schema version 1
        conn.execute("DELETE FROM twice_schema WHERE version > 1")
    conn.close()
    def schema_rows() -> list[tuple[object, ...]]:  # read through SQLite: the WAL counts
        with sqlite3.connect(older) as conn:
            rows = conn.execute("SELECT * FROM twice_schema ORDER BY version").fetchall()
        conn.close()
        return rows

    before = schema_rows()
    args = command.split()
    for target in (empty, missing):
        result = run(*args, "--ledger", str(target))
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
    assert empty.read_bytes() == b"" and not missing.exists()
    assert sorted(p.name for p in missing.parent.iterdir()) == []
    run(*args, "--ledger", str(older))
    assert schema_rows() == before  # not migrated
    # (SQLite's WAL mode may add its -wal and -shm files beside a ledger it reads)
    assert sorted(p.name for p in tmp_path.iterdir()
                  if not p.name.endswith(("-wal", "-shm"))) == ["empty.db", "older.db", "typo"]


@pytest.mark.parametrize("command", ["report", "handover"])
def test_a_report_can_still_be_written_to_a_pipe(command: str, story: StoryLedger,
                                                 tmp_path: Path) -> None:
    """Found by a probe: checking what the output file held read from it, and a FIFO (or a
    terminal) waited for ever for bytes to read. Only a regular file is looked into."""
    import os
    import threading

    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    option = "--html" if command == "report" else "-o"
    done = subprocess.run([sys.executable, "-m", "twice", command, option, str(fifo),
                           "--ledger", story.url, "--as-of", AS_OF],
                          capture_output=True, text=True, timeout=60)
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert received and len(received[0]) > 1000


def test_decide_ledger_json_does_not_tell_settled_units_to_validate(tmp_path: Path) -> None:
    """Found by a probe: every verified unit carried the reason "finished without error,
    which is not yet success: validate the output", and the summary counted them all under
    validate-output, contradicting their health (the table showed "-")."""
    import json

    pipeline = tmp_path / "p.py"
    pipeline.write_text(textwrap.dedent(f"""
        from twice import Pipeline, RetryPolicy, Schedule
        pipeline = Pipeline("settled", schedule=Schedule.daily("UTC"))
        @pipeline.task(destination="sqlite:///{tmp_path}/w.db?partition_column=day#t",
                       write="replace", safe_repeat=True)
        def t(ctx):
            return [{{"day": ctx.interval.start.date(), "v": 1}}]
        @pipeline.task(retry=RetryPolicy(max_attempts=1))
        def fails(ctx):
            raise ValueError("bad row")
    """))
    ledger = str(tmp_path / "l.db")
    run("run", str(pipeline), "--start", "2026-11-01", "--end", "2026-11-03", "--ledger", ledger,
        "--deadline", "none")
    result = run("decide", "--ledger", ledger, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    settled = [t for t in report["tasks"] if t["next_action"] is None and t["decision"]]
    assert any(t["health"] == "verified" for t in settled)
    for task in settled:
        assert task["reason"] == task["health_reason"]
        assert "validate the output" not in task["reason"]
    assert report["summary"].get("settled") == len(settled)
    awaiting = [t for t in report["tasks"] if t["next_action"] is not None]
    assert sum(v for k, v in report["summary"].items() if k not in ("settled", "undecided")) \
        == len(awaiting)
