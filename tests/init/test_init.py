"""``twice init NAME``: the scaffold runs as printed, its own test passes (and fails when the
pipeline is made unsafe), the files are lint- and type-clean, and bad names or occupied paths
are refused without writing anything.

Everything goes through the real CLI in a subprocess, in a temporary directory.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

NAME = "acme_orders"


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in {"TWICE_LEDGER", f"{NAME.upper()}_WORKDIR"}}
    clean["COLUMNS"] = "200"
    return clean


def call(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def twice(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return call(cwd, "-m", "twice", *args)


def shell(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    """One printed next-step command: ``twice ...`` or ``python ...``, run with this Python."""
    words = shlex.split(line)
    if words[0] == "twice":
        return twice(cwd, *words[1:])
    assert words[0] == "python", line
    return call(cwd, *words[1:])


def scaffold(cwd: Path, name: str = NAME) -> dict[str, Any]:
    done = twice(cwd, "init", name, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder.parent)) for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts}


def input_rows(folder: Path) -> list[tuple[str, str, str, Decimal]]:
    """What the orders table must hold, read from the sample CSVs with the csv module."""
    rows = []
    for path in sorted((folder / "data").glob("orders-*.csv")):
        day = path.name.removeprefix("orders-").removesuffix(".csv")
        with path.open(newline="", encoding="utf-8") as handle:
            rows += [(day, r["order_id"], r["customer"], Decimal(r["amount"]))
                     for r in csv.DictReader(handle)]
    return sorted(rows)


def warehouse_rows(path: Path) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as db:
        return sorted(db.execute("SELECT strftime(day, '%Y-%m-%d'), order_id, customer, amount "
                                 "FROM orders").fetchall())


# --------------------------------------------------------------------------- it works


def test_the_scaffold_runs_as_printed(tmp_path: Path) -> None:
    document = scaffold(tmp_path)
    folder = tmp_path / NAME
    assert document["directory"] == NAME and document["pipeline"] == NAME
    assert set(document["files"]) == files_under(folder)
    assert {f"{NAME}/pipeline.py", f"{NAME}/test_pipeline.py"} <= set(document["files"])
    samples = sorted((folder / "data").glob("*.csv"))
    assert len(samples) >= 2 and input_rows(folder)

    run, status, pytest_line = document["next"]
    assert run.startswith(f"twice run {NAME}/pipeline.py ") and "--deadline none" in run
    done = shell(tmp_path, run)
    assert done.returncode == 0, done.stdout + done.stderr
    warehouse = tmp_path / f"{NAME}-work" / "warehouse.duckdb"
    rows = warehouse_rows(warehouse)
    assert rows == input_rows(folder) and len(set(rows)) == len(rows)

    done = shell(tmp_path, f"{status} --json")
    assert done.returncode == 0, done.stderr
    units = json.loads(done.stdout)["units"]
    assert len(units) == len(samples)  # one task, one unit per sample day
    assert all(u["health"] == "verified" for u in units), units

    done = shell(tmp_path, pytest_line)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert warehouse_rows(warehouse) == rows  # the generated test used its own tmp work dir


def test_the_generated_test_fails_when_the_write_is_not_safe(tmp_path: Path) -> None:
    scaffold(tmp_path)
    pipeline = tmp_path / NAME / "pipeline.py"
    text = pipeline.read_text(encoding="utf-8")
    assert text.count('write="replace"') == 1
    pipeline.write_text(text.replace('write="replace"', 'write="append"'), encoding="utf-8")
    done = call(tmp_path, "-m", "pytest", "-q", NAME)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout


def test_the_generated_files_are_lint_and_type_clean(tmp_path: Path) -> None:
    scaffold(tmp_path)
    ruff = call(tmp_path, "-m", "ruff", "check", "--isolated", "--select", "E,F,W,I,B,UP,RUF",
                "--line-length", "100", "--target-version", "py311", NAME)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    mypy = call(tmp_path, "-m", "mypy", "--strict", "--ignore-missing-imports",
                "--cache-dir", str(tmp_path / ".mypy_cache"), NAME)
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr


def test_a_path_and_an_empty_directory_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "pipelines").mkdir()
    document = scaffold(tmp_path, "pipelines/acme_orders")
    assert document["pipeline"] == NAME
    assert (tmp_path / "pipelines" / NAME / "pipeline.py").is_file()
    (tmp_path / "empty").mkdir()
    assert scaffold(tmp_path, "empty")["pipeline"] == "empty"


# --------------------------------------------------------------------------- refusals


def refused(cwd: Path, name: str) -> str:
    done = twice(cwd, "init", name)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.startswith("twice init: error: NAME: "), done.stderr
    return done.stderr


def test_an_occupied_path_is_refused_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / NAME
    folder.mkdir()
    (folder / "pipeline.py").write_text("# mine\n")
    message = refused(tmp_path, NAME)
    assert NAME in message and "not empty" in message
    assert (folder / "pipeline.py").read_text() == "# mine\n"
    assert [p.name for p in folder.iterdir()] == ["pipeline.py"]

    (tmp_path / "notes").write_text("x")
    message = refused(tmp_path, "notes")
    assert "notes" in message and "not a directory" in message


@pytest.mark.parametrize("name", ["9lives", "my-orders", "class", "with space", "a" * 65, "ü_x"])
def test_a_name_that_is_not_an_identifier_is_refused(tmp_path: Path, name: str) -> None:
    message = refused(tmp_path, name)
    assert repr(name) in message
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_help_shows_an_example(tmp_path: Path) -> None:
    done = twice(tmp_path, "init", "--help")
    assert done.returncode == 0
    assert "twice init acme_orders" in done.stdout and "--json" in done.stdout
    listing = twice(tmp_path, "--help").stdout
    assert "init" in listing and "Scaffold a new pipeline" in listing
