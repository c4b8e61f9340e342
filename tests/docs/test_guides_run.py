"""Every command block of every guide runs as written (issue 37): docs that drift fail CI.

Each ``docs/guides/*.md`` runs by the README's mechanism (``tests/readme/runner.py``): its
```bash and ```console blocks in order, in one shell, in a fresh directory holding the
repository's ``examples`` and ``labs`` (as after a clone), with ``COLUMNS=100``: the guides
show what a terminal 100 columns wide prints. Every command must exit as the guide
says (0 unless it states ``$ echo $?`` or ``# exit N``), and what a console block shows must be
what the command printed: each table row's outcome, each backfill line's, and every line that
holds nothing that changes from run to run. A block that needs an environment this machine lacks
(``<!-- docs-test: needs postgres -->``, ``airflow``, ``spark``, ``dbt``) or cannot run here at
all (``skip: WHY``) is printed with its reason, so a skip is visible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.readme.runner import (
    blocks,
    environment,
    existing_databases,
    mark_databases_made_here,
    output_problems,
    script,
)

REPO = Path(__file__).resolve().parents[2]
GUIDES = REPO / "docs" / "guides"
#: PostgreSQL databases a guide creates itself (dropped first if a docs test made them).
DATABASES = {"scaling-out.md": ("twice_docs",)}


def run_guide(name: str, workdir: Path) -> tuple[list[str], list[str]]:
    """Run guide ``name`` in ``workdir``: the blocks left out (with why) and the problems
    found (empty: every command exited and printed as the guide says)."""
    for folder in ("examples", "labs"):
        shutil.copytree(REPO / folder, workdir / folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    databases = DATABASES.get(name, ())
    postgres = os.environ.get("TWICE_TEST_POSTGRES_URL")
    env, available = environment(workdir, databases)
    # what a reader's terminal of 100 columns shows (the guides' console blocks): the run,
    # worker and status tables at that width (no job id column, unit ids folded at dots)
    env["COLUMNS"] = "100"
    before = existing_databases(postgres) if postgres and databases else set()
    document = f"docs/guides/{name}"
    text, left_out, ran = script(document, blocks((GUIDES / name).read_text(encoding="utf-8")),
                                 available, folder=GUIDES)
    (workdir / "guide.sh").write_text(text)
    done = subprocess.run(["bash", "guide.sh"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=1500, check=False)
    if postgres and databases:
        mark_databases_made_here(postgres, databases, before)
    if done.returncode != 0:
        return left_out, [done.stderr[-6000:]]
    problems = []
    for stem, command in ran:
        if not command.shown:
            continue
        printed = "".join((workdir / ".docs-test" / f"{stem}{kind}").read_text(errors="replace")
                          for kind in (".out", ".err"))
        problems += [f"{document}:{command.line}: {command.text[:100]}\n    {problem}"
                     for problem in output_problems(command.shown, printed)]
    return left_out, problems


@pytest.mark.parametrize("name", sorted(p.name for p in GUIDES.glob("*.md")))
def test_every_guide_command_runs_as_written(name: str, tmp_path: Path) -> None:
    left_out, problems = run_guide(name, tmp_path)
    for line in left_out:
        print(line)
    assert not problems, "\n".join(problems)


def test_a_wrong_outcome_or_line_in_a_guide_is_found() -> None:
    """The check can fail: a row saying ``succeeded`` where the run held the unit, a backfill
    line saying ``skipped`` where it ran, a summary line the command did not print."""
    shown = [" task │ outcome   │ attempts", " send │ succeeded │ 1 (2)",
             "  2026-11-02 revenue    skipped   latest attempt succeeded in an earlier run",
             "verified 6/6 partitions match the ledger"]
    printed = (" task │ interval   │ outcome │ attempts\n send │ 2026-11-30 │ held    │ 0 (1)\n"
               "  2026-11-02 revenue    succeeded v4: rows 4 -> 4, checksum unchanged\n"
               "verified 5/6 partitions match the ledger\n")
    problems = output_problems(shown, printed)
    assert any("'succeeded' shown, 'held' printed" in p for p in problems), problems
    assert any("skipped shown, succeeded printed" in p for p in problems), problems
    assert any("verified 6/6" in p for p in problems), problems
    assert output_problems(shown[:2], " task │ outcome │ attempts\n send │ succeeded │ 9\n") == []


def test_console_blocks_give_exit_codes_and_files_are_saved(tmp_path: Path) -> None:
    sample = ("<!-- docs-test: file: hello.py -->\n```python\nprint('hi')\n```\n\n"
              "```console\n$ python hello.py\nhi\n$ python -c 'raise SystemExit(3)'\n"
              "$ echo $?\n3\n```\n")
    parsed = blocks(sample)
    assert [c.exit for c in parsed[1].commands] == [0, 3]
    text, left_out, ran = script("sample.md", parsed, set())
    assert not left_out and len(ran) == 2
    (tmp_path / "s.sh").write_text(text)
    done = subprocess.run(["bash", "s.sh"], cwd=tmp_path, capture_output=True, text=True,
                          env=environment(tmp_path)[0], check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".docs-test" / "0.out").read_text() == "hi\n"
    wrong = blocks("```console\n$ python -c 'raise SystemExit(3)'\n```\n")
    (tmp_path / "w.sh").write_text(script("w.md", wrong, set())[0])
    done = subprocess.run(["bash", "w.sh"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1 and "w.md:2: exit 3 (expected 0)" in done.stderr
