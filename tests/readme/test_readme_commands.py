"""Every command the README shows runs as written (issue 20): drift fails CI.

The README's ```bash blocks run in order, in one shell, in a fresh directory holding the
repository's ``examples`` and ``labs`` (as after a clone), through the mechanism in
``tests/readme/runner.py`` (shared with the guides' test, ``tests/docs/test_guides_run.py``).
Each command must exit 0, or the code its own comment states (``# exit 1: ...``). An HTML
comment just before a block may say ``<!-- readme-test: skip: WHY -->``, ``instead: COMMAND``
or ``needs postgres|airflow`` (``TWICE_TEST_POSTGRES_URL``; ``TWICE_AIRFLOW_VENV``, linked as
``.venv-airflow``, whose creating lines are then skipped); a block left out is printed with why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.readme.runner import (
    blocks,
    environment,
    existing_databases,
    mark_databases_made_here,
    script,
)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DATABASES = ("twice",)  # the README's PostgreSQL section creates it when it is missing


def test_the_parser_sees_each_command_once_with_its_expected_exit() -> None:
    sample = ("<!-- readme-test: skip: install -->\n```bash\npip install x\n```\n\n```bash\n"
              "twice a \\\n  --b c   # exit 1: refused\n# a comment\ntwice d\n```\n")
    parsed = blocks(sample)
    assert [b.directive for b in parsed] == [("skip", "install"), None]
    assert [(c.line, c.text, c.exit) for c in parsed[1].commands] == [
        (7, "twice a  --b c   # exit 1: refused", 1), (10, "twice d", 0)]
    text, left_out, _ = script("README.md", parsed, set())
    assert "rc=$?; [ $rc -eq 1 ]" in text and "pip install" not in text and len(left_out) == 1


def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    for folder in ("examples", "labs"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    postgres = os.environ.get("TWICE_TEST_POSTGRES_URL")
    env, available = environment(tmp_path, DATABASES)  # drops a database this test made
    before = existing_databases(postgres) if postgres else set()
    text, left_out, _ = script("README.md", blocks(README.read_text(encoding="utf-8")),
                               available)
    (tmp_path / "readme.sh").write_text(text)
    ran = subprocess.run(["bash", "readme.sh"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=1500, check=False)
    if postgres:
        mark_databases_made_here(postgres, DATABASES, before)
    for line in left_out:
        print(line)
    assert ran.returncode == 0, ran.stderr[-4000:] + "\n--- stdout ---\n" + ran.stdout[-4000:]


def test_the_readme_test_fails_when_a_command_breaks(tmp_path: Path) -> None:
    broken = blocks("```bash\ntwice status --no-such-option\n```\n")
    text, _, _ = script("README.md", broken, set())
    (tmp_path / "readme.sh").write_text(text)
    ran = subprocess.run(["bash", "readme.sh"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{Path(sys.executable).parent}"
                              f"{os.pathsep}{os.environ['PATH']}"}, check=False)
    assert ran.returncode == 1 and "README.md:2: exit 2 (expected 0)" in ran.stderr
