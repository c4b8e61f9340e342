"""Every command the README shows runs as written (issue 20): drift fails CI.

The README's ```bash blocks run in order, in one shell, in a fresh directory holding the
repository's ``examples`` and ``labs`` (as after a clone). Each command must exit 0, or the code
its own comment states (``# exit 1: ...``). An HTML comment just before a block may say:

- ``<!-- readme-test: skip: WHY -->``: not run (the set-up's install, the test command itself);
- ``<!-- readme-test: instead: COMMAND -->``: run COMMAND in its place (the set-up command's
  last step, without creating a virtual environment inside the test);
- ``<!-- readme-test: needs postgres|airflow -->``: run only where that test environment exists
  (``TWICE_TEST_POSTGRES_URL``; ``TWICE_AIRFLOW_VENV``, linked as ``.venv-airflow``, whose
  creating lines are then skipped); otherwise the block is reported as skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DIRECTIVE = re.compile(r"<!--\s*readme-test:\s*(skip|instead|needs)\s*:?\s*(.*?)\s*-->")
EXPECTED_EXIT = re.compile(r"#\s*exit (\d+)\b")


@dataclass
class Block:
    line: int  # README line of the opening fence
    commands: list[tuple[int, str]]  # (README line, command with continuations joined)
    directive: tuple[str, str] | None


def blocks(text: str) -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    directive: tuple[str, str] | None = None
    n = 0
    while n < len(lines):
        line = lines[n]
        match = DIRECTIVE.search(line)
        if match:
            directive = (match.group(1), match.group(2))
        elif line.strip() == "```bash":
            start, commands, pending, first = n + 1, [], "", 0
            n += 1
            while lines[n].strip() != "```":
                current = lines[n]
                if not pending:
                    first = n + 1
                if current.rstrip().endswith("\\"):
                    pending += current.rstrip()[:-1] + " "
                else:
                    command = (pending + current).strip()
                    pending = ""
                    if command and not command.startswith("#"):
                        commands.append((first, command))
                n += 1
            found.append(Block(start, commands, directive))
            directive = None
        elif line.strip():
            directive = None if not line.startswith("<!--") else directive
        n += 1
    return found


def script(all_blocks: list[Block], environment: set[str]) -> tuple[str, list[str]]:
    """The shell script that runs the README, and the blocks it leaves out (with why)."""
    out = ["set -u", "fail() { echo \"README.md:$1: exit $2 (expected $3): $4\" >&2; exit 1; }"]
    left_out = []
    for block in all_blocks:
        kind, argument = block.directive or ("", "")
        if kind == "skip":
            left_out.append(f"README.md:{block.line}: skipped: {argument}")
            continue
        if kind == "needs" and argument not in environment:
            left_out.append(f"README.md:{block.line}: needs {argument}, not here")
            continue
        commands = block.commands
        if kind == "instead":
            commands = [(block.line, argument)]
        for line, command in commands:
            if kind == "needs" and argument == "airflow" and "venv .venv-airflow" in command:
                continue  # the test's Airflow venv stands in for the one this line creates
            expected = EXPECTED_EXIT.search(command)
            code = int(expected.group(1)) if expected else 0
            quoted = command.replace("'", "'\"'\"'")
            out.append(f"echo '$ {quoted}' >&2")
            out.append(command)
            out.append(f"rc=$?; [ $rc -eq {code} ] || fail {line} $rc {code} '{quoted}'")
    return "\n".join(out) + "\n", left_out


def test_the_parser_sees_each_command_once_with_its_expected_exit() -> None:
    sample = ("<!-- readme-test: skip: install -->\n```bash\npip install x\n```\n\n```bash\n"
              "twice a \\\n  --b c   # exit 1: refused\n# a comment\ntwice d\n```\n")
    parsed = blocks(sample)
    assert [b.directive for b in parsed] == [("skip", "install"), None]
    assert parsed[1].commands == [(7, "twice a    --b c   # exit 1: refused"), (10, "twice d")]
    text, left_out = script(parsed, set())
    assert "rc=$?; [ $rc -eq 1 ]" in text and "pip install" not in text and len(left_out) == 1


def _environment(workdir: Path) -> tuple[dict[str, str], set[str]]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TWICE_", "AIRFLOW"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    available = set()
    postgres = os.environ.get("TWICE_TEST_POSTGRES_URL")
    if postgres:
        _create_database(postgres, "twice")
        available.add("postgres")
    venv = os.environ.get("TWICE_AIRFLOW_VENV")
    if venv and Path(venv, "bin", "airflow").exists():
        (workdir / ".venv-airflow").symlink_to(venv)
        available.add("airflow")
    return env, available


MARK = "created by the twice README test"


def _create_database(url: str, name: str) -> None:
    """The README's PostgreSQL ledger (database ``twice``) on the tests' server, fresh each time
    if this test created it (so a unit id prefix stays unique); one it did not create is used
    as it is."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,)).fetchone()
        if found is not None and found[0] != MARK:
            return
        if found is not None:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{MARK}'")


def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    for folder in ("examples", "labs"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    env, available = _environment(tmp_path)
    text, left_out = script(blocks(README.read_text(encoding="utf-8")), available)
    (tmp_path / "readme.sh").write_text(text)
    ran = subprocess.run(["bash", "readme.sh"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=1500, check=False)
    for line in left_out:
        print(line)
    assert ran.returncode == 0, ran.stderr[-4000:] + "\n--- stdout ---\n" + ran.stdout[-4000:]


def test_the_readme_test_fails_when_a_command_breaks(tmp_path: Path) -> None:
    broken = blocks("```bash\ntwice status --no-such-option\n```\n")
    text, _ = script(broken, set())
    (tmp_path / "readme.sh").write_text(text)
    ran = subprocess.run(["bash", "readme.sh"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{Path(sys.executable).parent}"
                              f"{os.pathsep}{os.environ['PATH']}"}, check=False)
    assert ran.returncode == 1 and "README.md:2: exit 2 (expected 0)" in ran.stderr
