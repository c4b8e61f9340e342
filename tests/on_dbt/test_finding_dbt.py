"""dbt is found on PATH, through ``$TWICE_DBT`` or through ``--dbt PATH`` (issue 37).

Reported: the guide's ``dbt seed`` line exited 127 (dbt not on PATH). ``twice dbt backfill``
now looks in that order: ``--dbt``, ``$TWICE_DBT``, ``dbt`` on PATH; when none holds dbt it
says so in one line naming all three, with exit 2 (bad input, nothing done).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.on_dbt.test_dbt_backfill import _dbt

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dbt_project"


def twice_dbt(tmp_path: Path, path: str, *extra: str, **env: str
              ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TWICE_")}
    return subprocess.run(
        [sys.executable, "-m", "twice", "dbt", "backfill", "--project-dir", str(EXAMPLE),
         "--duckdb", str(tmp_path / "w.duckdb"), "--interval", "2026-11-02",
         "--ledger", str(tmp_path / "ledger.db"), *extra],
        env={**clean, "PATH": path, **env}, capture_output=True, text=True, timeout=300)


def test_no_dbt_anywhere_is_one_line_naming_all_three(tmp_path: Path) -> None:
    done = twice_dbt(tmp_path, str(Path(sys.executable).parent))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert all(word in done.stderr for word in ("--dbt PATH", "TWICE_DBT", "on PATH"))


def test_a_wrong_path_names_where_it_came_from(tmp_path: Path) -> None:
    done = twice_dbt(tmp_path, os.environ["PATH"], TWICE_DBT=str(tmp_path / "nope"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"twice dbt backfill: error: TWICE_DBT: {tmp_path / 'nope'} is not an executable dbt")
    done = twice_dbt(tmp_path, os.environ["PATH"], "--dbt", str(tmp_path / "nope"))
    assert done.returncode == 2 and "--dbt: " in done.stderr


def test_dbt_on_path_is_found(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dbt").symlink_to(_dbt())
    done = twice_dbt(tmp_path, f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}",
                     "--select", "stg_events", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [(i["task"], i["action"]) for i in plan["items"]] == [("stg_events", "run")]
