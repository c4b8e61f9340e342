"""A task's error message, an operator's note or name cannot drive the operator's terminal or
forge a report (found by an adversarial probe: an error printed raw cleared the screen, retitled
the window, and its newlines added a line indistinguishable from a real timeline entry; the
Markdown handover passed ``<script>`` through).

Every command's output goes through ``twice.core.inert``: control and bidirectional characters
are shown as escapes, one-line fields keep to one line, Markdown cells escape HTML.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from twice.cli import cli
from twice.core.inert import inert

FORGED = "2026-12-05T00:00:00.000000Z  attempt-finished  #1  attempt 1 finished: succeeded"
HOSTILE = (
    "boom \x1b[2J\x1b[H\x1b]0;PWNED\x07\x1b[32mALL GOOD\x1b[0m\r\n" + FORGED
    + "\n| fake | row |\n## 11. Injected heading\n<script>alert(1)</script>\u202eevil\u202c"
)

PIPELINE = """\
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule

pipeline = Pipeline("hostile", schedule=Schedule.daily("UTC"))

@pipeline.task(destination="sqlite:///{root}/w.db?partition_column=day#t", write="replace",
               safe_repeat=True)
def perm(ctx):
    raise ValueError({message!r})

@pipeline.task(timeout=0.1)
def effect(ctx):
    import time
    time.sleep(0.5)
"""

#: What a terminal would act on: C0/C1 controls but tab and newline, DEL, bidi formatting.
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    path = tmp_path / "p.py"
    path.write_text(PIPELINE.format(root=tmp_path, message=HOSTILE))
    url = str(tmp_path / "l.db")
    runner = CliRunner()
    for task in ("perm", "effect"):
        runner.invoke(cli, ["run", str(path), "--interval", "2026-11-05", "--tasks", task,
                            "--deadline", "none", "--ledger", url])
    return url


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.output


def test_inert_escapes_what_a_terminal_acts_on() -> None:
    assert inert("a\x1b[2Jb\nc\u202ed") == "a\\x1b[2Jb\\nc\\u202ed"
    assert inert("a\tb\nc\x07", lines=True) == "a\tb\nc\\x07"
    assert inert("plain text, é and 名前") == "plain text, é and 名前"


def test_reports_show_a_hostile_error_inert_and_on_its_line(ledger: str, tmp_path: Path) -> None:
    outputs = {
        "explain": _run("explain", "hostile.perm.20261105", "--ledger", ledger),
        "status": _run("status", "--ledger", ledger),
        "update": _run("update", "--ledger", ledger),
        "handover": _run("handover", "--ledger", ledger),
    }
    _run("handover", "--ledger", ledger, "--output", str(tmp_path / "h.md"))
    outputs["handover file"] = (tmp_path / "h.md").read_text()
    for name, text in outputs.items():
        assert name == "status" or "boom" in text, name  # the error is shown ...
        assert not ACTIVE.search(text), (name, ACTIVE.search(text))  # ... inert
        assert not any(line.startswith(FORGED[:27]) for line in text.splitlines()), name
        assert not any(line.startswith("## 11.") for line in text.splitlines()), name
    assert "\\x1b]0;PWNED\\x07" in outputs["explain"]
    for markdown in (outputs["handover"], outputs["handover file"]):
        assert "<script>" not in markdown and "&lt;script&gt;" in markdown
        assert "| fake | row |" not in markdown


def test_an_operator_name_and_note_are_shown_inert(ledger: str) -> None:
    uow = "hostile.effect.20261105"
    out = _run("resolve", uow, "--as", "succeeded", "--note", "ok\x1b]0;X\x07\nforged line",
               "--operator", "alice\x1b[8m", "--ledger", ledger)
    assert "alice" in out and not ACTIVE.search(out)
    for text in (_run("explain", uow, "--ledger", ledger), _run("status", "--ledger", ledger),
                 _run("update", "--ledger", ledger), _run("handover", "--ledger", ledger)):
        assert "alice\\x1b[8m" in text and not ACTIVE.search(text)
        assert not any(line.startswith("forged line") for line in text.splitlines())


MARKUP = ("no input under any of [/mnt/share/in, /mnt/backup/in]; see "
          "[link=http://evil.example/x]the runbook[/link]")

BRACKETS = """\
import pyarrow as pa
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule

pipeline = Pipeline("brackets", schedule=Schedule.daily("UTC"))

@pipeline.task(destination="sqlite:///{root}/w.db?partition_column=day#t", write="replace",
               safe_repeat=True)
def load(ctx):
    if ctx.interval.start.day == 1:
        raise FileNotFoundError({message!r})
    return pa.table({{"day": [ctx.interval.start.date()], "v": [1]}})
"""


@pytest.mark.parametrize("command", ["backfill", "worker"])
def test_brackets_in_an_error_are_printed_as_written(tmp_path: Path, command: str) -> None:
    """Found by a probe: an error holding ``[/mnt/a, /mnt/b]`` was read as Rich markup, so
    ``twice backfill`` died with a MarkupError traceback after one interval, and
    ``[link=...]`` printed a hidden hyperlink; a worker named ``[/]x`` crashed likewise."""
    path = tmp_path / "p.py"
    path.write_text(BRACKETS.format(root=tmp_path, message=MARKUP))
    url = str(tmp_path / "l.db")
    args = [command, str(path), "--start", "2024-02-01", "--end", "2024-02-04", "--ledger", url,
            "--deadline", "none"]
    if command == "worker":
        args += ["--once", "--name", "[/]x"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output  # one interval failed: nothing crashed
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "\x1b]8" not in result.output
    if command == "backfill":
        assert "[/mnt/share/in, /mnt/backup/in]" in result.output
    status = _run("status", "--ledger", url)
    assert status.count("brackets.load") == 3  # every interval ran


def test_the_html_report_holds_no_control_character(ledger: str, tmp_path: Path) -> None:
    """Found by a probe: ``report --html`` wrote an error's ESC, BEL and bidi override raw,
    so the page reversed text and ``cat`` of it drove the terminal."""
    page = tmp_path / "r.html"
    _run("report", "--html", str(page), "--ledger", ledger)
    text = page.read_text()
    assert "boom" in text and not ACTIVE.search(text)
    assert "<script>alert(1)</script>" not in text
