"""Concurrency: the same interval started by several ``twice run`` or ``twice backfill``
processes at once.

Several real processes (``python -m twice run``) load the same pipeline file and are held at
a barrier until all of them have started, then race for the same units of work on one
ledger (SQLite, PostgreSQL), including a ledger that none of them has created yet. The
tasks append their rows rather than replacing them, so only the ledger's lease stands
between a race and duplicate rows. Proven: each unit executes exactly once (one log line,
one attempt, its rows once), the losers say who holds the lease or that it already
succeeded, nobody crashes, and running everything once more executes nothing. The same holds
for racing backfills, including forced ones: a unit that several ``--force`` backfills planned
to rerun is rerun once, by whichever got there first.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.conftest import record, scale
from twice.ledger import Ledger

PIPELINE_FILE = Path(__file__).with_name("race_pipeline.py")
ROWS_PER_UNIT = 5  # each execution appends this many rows (TWICE_RACE_ROWS)
SUITE = "concurrency"
PROCESSES = 4
FIRST_DAY = date(2026, 11, 1)
LOSING_OUTCOMES = {"leased-elsewhere", "succeeded", "blocked"}


@dataclass(frozen=True)
class Racer:
    returncode: int
    report: dict[str, Any]
    stderr: str


def _race(folder: Path, ledger: str, args: list[str], processes: int,
          verb: str = "run") -> list[Racer]:
    """Start ``processes`` runs (or backfills), release them together once all are at the
    barrier."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in [folder / "go", *folder.glob("ready/*")]:
        stale.unlink(missing_ok=True)
    env = {**os.environ, "TWICE_RACE_DIR": str(folder), "TWICE_RACE_ROWS": str(ROWS_PER_UNIT)}
    command = [sys.executable, "-m", "twice", verb, str(PIPELINE_FILE), *args,
               "--ledger", ledger, "--json"]
    children = [subprocess.Popen(command, env=env, cwd=folder, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
                for _ in range(processes)]
    try:
        give_up = time.monotonic() + 60
        while len(list(folder.glob("ready/*"))) < processes:
            assert time.monotonic() < give_up, "the racers never reached the barrier"
            assert all(child.poll() is None for child in children), "a racer exited early"
            time.sleep(0.01)
        (folder / "go").touch()
        finished = [(child, *child.communicate(timeout=120)) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    racers = []
    for child, out, err in finished:
        assert "Traceback" not in out + err, err
        assert child.returncode in (0, 1), f"exit {child.returncode}: {err}"
        racers.append(Racer(child.returncode, json.loads(out), err))
    return racers


def _executions(folder: Path) -> Counter[tuple[str, str]]:
    log = folder / "executions.log"
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return Counter((task, label) for task, label, _pid in (line.split() for line in lines))


def _rows(folder: Path) -> list[tuple[str, str, int, int]]:
    with sqlite3.connect(folder / "warehouse.db") as conn:
        return conn.execute("SELECT task, day, n, pid FROM rows ORDER BY 1, 2, 3").fetchall()


def _pid(holder: str) -> int:
    return int(holder.split(":")[-2])


def _one_unit_race(folder: Path, ledger: str, day: date) -> int:
    """One interval, PROCESSES racers on ``--tasks extract`` (its dependent ``load`` follows):
    exactly one racer executes each unit. Returns rows compared."""
    racers = _race(folder, ledger, ["--interval", day.isoformat(), "--tasks", "extract"],
                   PROCESSES)
    units = [next(u for u in r.report["units"] if u["task"] == "extract") for r in racers]
    winners = [r for r, u in zip(racers, units, strict=True) if u["attempts"] == 1]
    assert len(winners) == 1, [u["outcome"] for u in units]
    assert winners[0].returncode == 0 and winners[0].report["units"][0]["outcome"] == "succeeded"
    for racer, unit in zip(racers, units, strict=True):
        if racer is winners[0]:
            continue
        assert unit["attempts"] == 0 and unit["outcome"] in {"leased-elsewhere", "succeeded"}
        if unit["outcome"] == "leased-elsewhere":
            assert racer.returncode == 1 and unit["holder"] == winners[0].report["holder"]
        else:
            assert any("already succeeded" in note for note in unit["notes"])
    assert len({u["uow_id"] for u in units}) == 1
    assert _executions(folder) == Counter({("extract", units[0]["interval"]): 1,
                                           ("load", units[0]["interval"]): 1})
    rows = _rows(folder)
    assert len(rows) == 2 * ROWS_PER_UNIT  # each unit's rows once: no racer repeated one
    assert {pid for task, *_, pid in rows if task == "extract"} == {
        _pid(winners[0].report["holder"])}
    assert len({pid for task, *_, pid in rows if task == "load"}) == 1
    with Ledger.open(ledger) as opened:
        attempts = opened.attempts(units[0]["uow_id"])
    assert [(a.number, a.outcome) for a in attempts] == [(1, "succeeded")]
    return len(rows)


def _trials(tmp_path: Path, make_ledger: Any) -> None:
    trials = 3 * scale()
    compared = 0
    for trial in range(trials):
        folder = tmp_path / f"trial{trial}"
        compared += _one_unit_race(folder, make_ledger(folder, trial),
                                   FIRST_DAY + timedelta(days=trial))
    record(SUITE, trials=trials, faults=trials * (PROCESSES - 1), rows_compared=compared,
           processes=trials * PROCESSES)


def test_one_interval_raced_on_a_sqlite_ledger_nobody_created_yet(tmp_path: Path) -> None:
    _trials(tmp_path, lambda folder, _trial: f"sqlite:///{folder.parent / folder.name}.db")


@pytest.mark.postgres
def test_one_interval_raced_on_a_postgresql_ledger(tmp_path: Path, postgres_url: str) -> None:
    # The first trial races on an empty database: creating the ledger's schema is part of it.
    _trials(tmp_path, lambda _folder, _trial: postgres_url)


def _range_race(folder: Path, ledger: str) -> None:
    """Three days x two dependent tasks raced by three processes, then one more run finishes
    what the losers could not start (a dependent of a unit leased elsewhere is blocked):
    every unit executed exactly once over all of it, and a last run executes nothing."""
    days = 3
    args = ["--start", FIRST_DAY.isoformat(),
            "--end", (FIRST_DAY + timedelta(days=days)).isoformat()]
    racers = _race(folder, ledger, args, 3)
    for racer in racers:
        for unit in racer.report["units"]:
            assert unit["outcome"] in LOSING_OUTCOMES | {"succeeded"}, unit
            assert unit["attempts"] in (0, 1)
    started = sum(u["attempts"] for r in racers for u in r.report["units"])
    env = {**os.environ, "TWICE_RACE_DIR": str(folder), "TWICE_RACE_ROWS": str(ROWS_PER_UNIT),
           "TWICE_RACE_WORK_SECONDS": "0"}
    for _ in range(2):  # finish the rest, then prove a rerun executes nothing
        done = subprocess.run(
            [sys.executable, "-m", "twice", "run", str(PIPELINE_FILE), *args, "--ledger", ledger,
             "--json"], env=env, cwd=folder, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        started += sum(u["attempts"] for u in report["units"])
    units = {(u["task"], u["interval"]): u["uow_id"] for u in report["units"]}
    assert len(units) == 2 * days and started == 2 * days
    assert _executions(folder) == Counter(dict.fromkeys(units, 1))
    rows = _rows(folder)
    assert Counter((task, day) for task, day, _n, _pid in rows) == \
        Counter(dict.fromkeys(units, ROWS_PER_UNIT))
    with Ledger.open(ledger) as opened:
        for uow_id in units.values():
            assert [a.outcome for a in opened.attempts(uow_id)] == ["succeeded"]
    record(SUITE, trials=1, faults=2, rows_compared=len(rows), processes=5)


def test_a_range_of_dependent_units_raced_on_sqlite(tmp_path: Path) -> None:
    _range_race(tmp_path / "range", f"sqlite:///{tmp_path / 'range-ledger.db'}")


@pytest.mark.postgres
def test_a_range_of_dependent_units_raced_on_postgresql(tmp_path: Path,
                                                         postgres_url: str) -> None:
    _range_race(tmp_path / "range", postgres_url)


BACKFILL_STATUSES = {"succeeded", "skipped", "leased-elsewhere", "blocked"}


def _backfill_race(folder: Path, ledger: str) -> None:
    """Three backfills of the same three days at once, then three ``--force`` backfills of
    them at once: each unit executes once in the first race and once more in the second."""
    days = 3
    args = ["--start", FIRST_DAY.isoformat(),
            "--end", (FIRST_DAY + timedelta(days=days)).isoformat()]
    env = {**os.environ, "TWICE_RACE_DIR": str(folder), "TWICE_RACE_ROWS": str(ROWS_PER_UNIT),
           "TWICE_RACE_WORK_SECONDS": "0"}

    def settle() -> dict[tuple[str, str], str]:
        """Backfill again until every unit succeeded (the racers' blocked dependents), then
        once more, which must execute nothing: every unit is verified and skipped."""
        for _ in range(3):
            done = subprocess.run(
                [sys.executable, "-m", "twice", "backfill", str(PIPELINE_FILE), *args,
                 "--ledger", ledger, "--json"],
                env=env, cwd=folder, capture_output=True, text=True, timeout=120)
            assert "Traceback" not in done.stdout + done.stderr, done.stderr
            report = json.loads(done.stdout)
            if all(r["status"] == "skipped" for r in report["runs"]):
                assert done.returncode == 0
                return {(r["task"], r["interval"]): r["uow_id"] for r in report["runs"]}
        raise AssertionError(f"backfill did not settle: {report['counts']}")

    racers = []
    # The race tasks append and are not safe_repeat: the forced round names them (--repeat),
    # as an operator must, or their successes would be held.
    for round_args in (args, [*args, "--force", "--repeat", "extract,load"]):
        raced = _race(folder, ledger, round_args, 3, verb="backfill")
        # Not vacuous: racers planned to run units that another racer executed.
        lost = [run for racer in raced for run in racer.report["runs"]
                if run["status"] in ("leased-elsewhere", "blocked")
                or (run["status"] == "skipped" and run["outcome"] == "succeeded")]
        assert lost, "no racer lost a unit: the processes did not race"
        racers += raced
        units = settle()
        for racer in racers:
            for run in racer.report["runs"]:
                assert run["status"] in BACKFILL_STATUSES, run
                assert len(run["attempts"]) <= 1, run
                if run["status"] == "leased-elsewhere":
                    assert racer.returncode == 1 and "leased by" in run["reason"]
    assert len(units) == 2 * days
    # Once for the first race, once more for the forced one: never once per racer.
    assert _executions(folder) == Counter(dict.fromkeys(units, 2))
    rows = _rows(folder)
    assert Counter((task, day) for task, day, _n, _pid in rows) == \
        Counter(dict.fromkeys(units, 2 * ROWS_PER_UNIT))
    with Ledger.open(ledger) as opened:
        for uow_id in units.values():
            assert [a.outcome for a in opened.attempts(uow_id)] == ["succeeded"] * 2
    record(SUITE, trials=2, faults=4, rows_compared=len(rows), processes=6)


def test_backfills_and_forced_backfills_raced_on_sqlite(tmp_path: Path) -> None:
    _backfill_race(tmp_path / "backfill", f"sqlite:///{tmp_path / 'backfill-ledger.db'}")


@pytest.mark.postgres
def test_backfills_and_forced_backfills_raced_on_postgresql(tmp_path: Path,
                                                            postgres_url: str) -> None:
    _backfill_race(tmp_path / "backfill", postgres_url)
