"""``twice demo`` end to end, as a user runs it: a subprocess that must exit 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_exits_0_and_all_fingerprints_equal(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "twice", "demo", "--workdir", str(tmp_path / "demo"),
         "--days", "3"],
        capture_output=True, text=True, timeout=120, env={"COLUMNS": "120", "PATH": ""},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fingerprints: 12/12 equal to a clean run; duplicate rows: 0" in proc.stdout
    assert "reconciled job" in proc.stdout and "transient -> retried" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_demo_refuses_a_foreign_workdir(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    proc = subprocess.run([sys.executable, "-m", "twice", "demo", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_demo_ends_with_its_ledger_warehouse_and_three_commands_that_run(tmp_path: Path) -> None:
    """The demo says where its ledger and warehouse are and what to run next; each printed
    command runs as printed, on the demo's own ledger."""
    import shlex

    workdir = tmp_path / "a demo"  # a space: the printed commands must quote it
    proc = subprocess.run(
        [sys.executable, "-m", "twice", "demo", "--workdir", str(workdir), "--days", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tail = proc.stdout[proc.stdout.index("fingerprints:"):]
    assert f"ledger: {workdir / 'run' / 'ledger.db'}" in tail
    assert f"warehouse: {workdir / 'run' / 'warehouse.duckdb'}" in tail
    commands = [line.strip() for line in tail.splitlines() if line.strip().startswith("twice ")]
    assert len(commands) == 3
    for command in commands:
        args = shlex.split(command)
        done = subprocess.run([sys.executable, "-m", "twice", *args[1:]], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
    assert (workdir / "run" / "report.html").is_file()
