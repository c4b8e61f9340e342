"""The side-effect part of the "Rerun, backfill and resolve" guide runs as written (issue 36).

docs/guides/rerun-backfill-resolve.md, "Side effects: held, not repeated", shows an unknown
outcome settled with ``twice resolve`` and what the next run then does. Its ``$`` command lines
run here in order, verbatim, through the real CLI, in a fresh directory holding the guide's own
``mail.py``. Each must exit as the guide says (a ``$ echo $?`` after it, else 0); every task row
the guide prints must show the same outcome; the resolve lines and the ``[asserted]`` timeline
lines it prints must be what the command prints. So the guide's claim that the run after
``--as failed`` executes the task is checked, not just shown. The incidents guide's "Settle and
retry" section repeats some of these commands: each must be one this test runs.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guides" / "rerun-backfill-resolve.md"
INCIDENTS = REPO / "docs" / "guides" / "incidents.md"
SECTION = ("## Side effects: held, not repeated", "## A new column in the output")


@dataclass
class Step:
    command: str  # continuation lines joined
    output: list[str] = field(default_factory=list)
    exit: int = 0


def section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def steps(markdown: str) -> list[Step]:
    """The ``$`` commands of the console blocks, with the output shown after each; a
    ``$ echo $?`` gives the exit code of the command before it."""
    found: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", markdown, re.S):
        lines = block.splitlines()
        n = 0
        while n < len(lines):
            line = lines[n]
            if not line.startswith("$ "):
                if found:
                    found[-1].output.append(line)
                n += 1
                continue
            command = line[2:]
            while command.endswith("\\"):
                n += 1
                command = command[:-1].rstrip() + " " + lines[n].strip()
            n += 1
            if command.strip() == "echo $?":
                found[-1].exit = int(lines[n].strip())
                n += 1
                continue
            found.append(Step(command))
    return found


def normal(command: str) -> str:
    return " ".join(shlex.split(command))


def run(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TWICE_", "MAIL_"))}
    env["COLUMNS"] = "250"
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "twice", command
    return subprocess.run([sys.executable, "-m", "twice", *words[1:]], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def task_rows(lines: list[str]) -> dict[str, list[str]]:
    """``task -> cells`` of the table rows that start a task's row: ``│``-separated with the
    task first (as the guide shows them), or ``twice run``'s table at any width, whose rows
    start with a unique prefix of the unit's id (``PIPELINE.TASK.DAY``), cells two spaces
    apart."""
    rows = {}
    for line in lines:
        if "│" in line:
            cells = [c.strip() for c in line.strip().strip("│").split("│")]
            if len(cells) > 2 and cells[0] and cells[0] != "task":
                rows[cells[0]] = cells
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) > 2 and cells[0].count(".") >= 2 and " " not in cells[0]:
            rows[cells[0].split(".")[1]] = [cells[0].split(".")[1], *cells[1:]]
    return rows


def check_step(step: Step, done: subprocess.CompletedProcess[str]) -> None:
    said = f"{step.command}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.returncode == step.exit, said
    assert "Traceback" not in done.stderr, said
    printed = done.stdout.splitlines()
    shown = task_rows(step.output)
    real = task_rows(printed)
    for task, cells in shown.items():
        assert task in real, said
        assert cells[1] in real[task], (f"the guide shows {task} {cells[1]}", said)
    flat = " ".join(done.stdout.split())
    for line in step.output:
        if line.startswith(("Resolved attempt", "Next run:")):
            assert " ".join(line.split()) in flat, (line, said)
        if "[asserted]" in line and not line.startswith("[asserted]:"):
            event = " ".join(line.split()[1:])  # its time is the run's own
            assert event in flat, (line, said)


def test_the_resolve_guide_runs_as_written(tmp_path: Path) -> None:
    text = section(GUIDE.read_text(encoding="utf-8"), *SECTION)
    (mail,) = re.findall(r"```python\n(.*?)```", text, re.S)
    (tmp_path / "mail.py").write_text(mail, encoding="utf-8")
    (tmp_path / "twice-demo" / "run").mkdir(parents=True)
    commands = steps(text)
    resolves = [s.command for s in commands if " resolve " in f" {s.command}"]
    assert any("--as failed " in c for c in resolves), "the guide shows no --as failed"
    assert any("--as failed-after-acting" in c for c in resolves)
    for step in commands:
        check_step(step, run(tmp_path, step.command))


def test_the_incidents_guide_settles_with_commands_tested_here() -> None:
    text = INCIDENTS.read_text(encoding="utf-8")
    settle = section(text, "## 7. Settle and retry", "## 8.")
    shown = [normal(s.command) for s in steps(settle)]
    assert any(" resolve " in c for c in shown)
    tested = {normal(s.command) for s in steps(section(GUIDE.read_text(encoding="utf-8"),
                                                        *SECTION))}
    untested = [c for c in shown if c not in tested]
    assert not untested, f"incidents.md commands the resolve guide test does not run: {untested}"


def test_a_wrong_outcome_in_the_guide_fails_the_check() -> None:
    """The check can fail: a guide row saying ``succeeded`` where the run held the unit."""
    step = Step("twice run mail.py", [" send │ succeeded │ 1 (2) │ finished without error"])
    held = subprocess.CompletedProcess(
        [], 0, "│ send │ 2026-11-30 │ held │ 0 (1) │ held: ... (--repeat send) │\n", "")
    try:
        check_step(step, held)
    except AssertionError as exc:
        assert "the guide shows send succeeded" in str(exc)
    else:
        raise AssertionError("a held run passed for a guide that shows it succeeded")
