"""Tables fit 100 columns without breaking ids; ``twice run`` shows its units as they end
(a line each when not on a terminal, a bar on one: docs/assets/run-progress-100cols.txt is
that bar and table at 100 columns); a closed pipe ends quietly."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

import twice.cli.console
from twice.cli import cli
from twice.cli.console import unit_prefixes

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "docs" / "assets" / "run-progress-100cols.txt"
SRC = str(Path(twice.cli.console.__file__).resolve().parents[2])


def test_unit_prefixes_are_unique_readable_and_never_shorter_than_the_day() -> None:
    ids = ["p.load.20261123T0000.aaaa11", "p.load.20261123T0000.aabb22",
           "p.load.20261124T0000.cccc33", "p.extract.20261123T0000.dddd44"]
    prefixes = unit_prefixes(ids)
    assert prefixes["p.load.20261124T0000.cccc33"] == "p.load.20261124"
    assert prefixes["p.extract.20261123T0000.dddd44"] == "p.extract.20261123"
    assert prefixes["p.load.20261123T0000.aaaa11"] == "p.load.20261123T0000.aaa"
    for uow_id, prefix in prefixes.items():
        assert [other for other in ids if other.startswith(prefix)] == [uow_id]


class Uncropped(Console):
    """A 100-column terminal that shows what a table drew past its width (a console crops
    it, so a line cut at 100 columns would pass for one that fits)."""

    def __init__(self) -> None:
        super().__init__(file=io.StringIO(), width=100, force_terminal=True,
                         force_interactive=False, record=True, color_system=None)

    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*objects, **{**options, "crop": False})


@pytest.mark.parametrize("command", [["status"], ["worker", "PIPELINE", "--start", "2026-11-23",
                                                  "--end", "2026-11-26", "--deadline", "none",
                                                  "--once"]])
def test_tables_fit_100_columns_and_ids_are_whole(command: list[str], ran: str,
                                                  pipeline_file: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    console = Uncropped()
    monkeypatch.setattr(twice.cli.console, "make_console", lambda **_options: console)
    args = [str(pipeline_file) if arg == "PIPELINE" else arg for arg in command]
    result = CliRunner().invoke(cli, [*args, "--ledger", ran])
    assert result.exit_code in (0, 1), result.output
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, text
    assert "…" not in text  # nothing cut
    # each unit's id prefix is printed (folded only when longer than its column), and any
    # command taking UOW_ID accepts it
    ids = [record["id"] for record in json.loads(CliRunner().invoke(
        cli, ["status", "--ledger", ran, "--json"]).stdout)["units"]]
    prefixes = unit_prefixes(ids)
    column = "".join(line.split()[0] if line.startswith(" ") and line.strip() else ""
                     for line in lines)
    assert all(prefix in column for prefix in prefixes.values()), column
    for prefix in prefixes.values():
        explained = CliRunner().invoke(cli, ["explain", prefix, "--ledger", ran, "--json"])
        assert explained.exit_code == 0, explained.output


def test_run_prints_a_line_per_unit_as_it_ends_when_not_on_a_terminal(
        pipeline_file: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["run", str(pipeline_file), "--start", "2026-11-24",
                                      "--end", "2026-11-26", "--deadline", "none",
                                      "--ledger", str(tmp_path / "l.db")])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    ended = [line for line in lines if line.startswith("2026-11-2")]
    assert len(ended) == 4
    assert any(line.startswith("2026-11-25 reconcile_against_general_ledger failed-permanent "
                               "attempts 1 uow settlement_positions_nightly.") and
               line.endswith("trailer row") for line in ended)
    # before the table
    assert lines.index(ended[-1]) < next(n for n, line in enumerate(lines)
                                         if line.startswith("twice run "))


def _run_on_a_terminal(pipeline_file: Path, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> str:
    """``twice run`` drawn on a 100-column terminal (Rich records what it drew)."""
    console = Uncropped()
    monkeypatch.setattr(twice.cli.console, "make_console", lambda **_options: console)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", str(pipeline_file), "--start", "2026-11-23",
                                      "--end", "2026-11-26", "--deadline", "none",
                                      "--ledger", "ledger.db", "--seed", "1"])
    assert result.exit_code == 1, result.output
    return console.export_text()


def test_run_shows_a_progress_bar_on_a_terminal_within_100_columns(
        pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run_on_a_terminal(pipeline_file, tmp_path, monkeypatch)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, text
    bar = next(line for line in lines if line.startswith("twice run: units"))
    assert "6/6" in bar and "not succeeded 1" in bar
    assert any(line.startswith("2026-11-25 reconcile_against_general_ledger failed-permanent")
               for line in lines)
    # a unit id too long for its column breaks where it has parts, never inside a name
    header = next(n for n, line in enumerate(lines) if line.lstrip().startswith("unit "))
    start, end = lines[header].index("unit"), lines[header].index("outcome")
    rows = lines[header + 2:]
    rows = rows[:next((n for n, line in enumerate(rows) if not line.strip()), len(rows))]
    cells = [line[start:end].strip() for line in rows if line[start:end].strip()]
    names = {"settlement_positions_nightly", "extract_custodian_positions",
             "reconcile_against_general_ledger", "20261123", "20261124", "20261125"}
    assert cells and all(part in names for cell in cells for part in cell.strip(".").split(".")
                         if part), cells
    # nothing cropped: the table's last cell ends with the error's last words
    table = " ".join(" ".join(lines[lines.index(bar) + 1:]).split())
    assert table.count("finished without error") == 5 and "its trailer row" in table
    if os.environ.get("TWICE_WRITE_CAPTURES"):
        CAPTURE.parent.mkdir(exist_ok=True)
        CAPTURE.write_text(text, encoding="utf-8")
    # the capture in the docs is this output (times and paths aside)
    captured = CAPTURE.read_text(encoding="utf-8").splitlines()
    assert max(len(line) for line in captured) <= 100
    def shape(text: list[str]) -> list[list[str]]:  # a log record's time is its own
        return [line.split()[:2] for line in text
                if line.strip() and not re.match(r"\d{4}-\d\d-\d\dT", line)][:8]

    assert shape(captured) == shape(lines)


def _closed_reader(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``twice ARGS`` with its standard output a pipe whose reader is gone."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(REPO)])}
    try:
        return subprocess.run([sys.executable, "-m", "twice", *args], stdout=write,
                              stderr=subprocess.PIPE, env=env, timeout=120, check=False)
    finally:
        os.close(write)


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["update"]])
def test_a_closed_pipe_ends_quietly_with_0(command: list[str], ran: str) -> None:
    done = _closed_reader([*command, "--ledger", ran])
    assert done.returncode == 0
    assert done.stderr == b""


def test_a_closed_pipe_keeps_the_code_the_work_earned(pipeline_file: Path,
                                                      tmp_path: Path) -> None:
    done = _closed_reader(["run", str(pipeline_file), "--interval", "2026-11-25",
                           "--deadline", "none", "--ledger", str(tmp_path / "l.db")])
    assert done.returncode == 1  # a unit failed: the closed pipe does not hide it
    assert b"Traceback" not in done.stderr and b"Exception ignored" not in done.stderr
