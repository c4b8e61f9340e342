"""The parent side of the Delta and Iceberg crash and race trials (the table formats whose
commit log is the commit record store): start a child, read its lines, check which days hold
the new version (and that a commit record exists exactly for them), and the two racing-writer
trials. Each engine's test module supplies its child script and how it lists tokens in commit
order."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from tests.reliability import crash_writer as cw
from twice.destinations import open_destination

DAY = date(2026, 11, 30)


def spec_query(partition_column: str | None, key_columns: tuple[str, ...]) -> str:
    """``?partition_column=...&key_columns=...`` (empty when neither)."""
    options = []
    if partition_column:
        options.append(f"partition_column={partition_column}")
    if key_columns:
        options.append("key_columns=" + ",".join(key_columns))
    return ("?" + "&".join(options)) if options else ""


def child(script: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def line(process: subprocess.Popen[str], timeout: float = 60) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline().strip() if ready else "<timeout>"


def new_days(spec: str) -> set[date]:
    """The days holding version "new"; asserts a commit record exists exactly for them."""
    pipeline = cw.build_pipeline(spec, "new")
    new = set()
    with open_destination(spec) as dest:
        for interval in cw.intervals():
            day = interval.start.date()
            is_new = cw._canonical(dest.read_partition(day).to_pylist()) == cw._canonical(
                cw.rows_for("new", day))
            uow = pipeline.unit_of_work("write", interval).uow_id
            assert bool(dest.commit_records(uow)) == is_new, day
            if is_new:
                new.add(day)
    return new


def seed(spec: str) -> None:
    """Create the table with one unstamped row, so racers only commit."""
    with open_destination(spec) as dest:
        dest.replace_partition([{"day": DAY, "id": 0, "name": "seed"}], DAY, stamp=None)


def older_paused_at_commit_loses(script: Path, spec: str, go: Path) -> None:
    """Token 4 passes the fence and pauses before its commit; token 5 commits meanwhile. Token
    4's commit then fails on the stale base, it reloads, sees 5 and is refused: nothing of it
    lands."""
    older = child(script, "race", spec, "4", "older", str(go))
    try:
        assert line(older) == "paused", older.stderr.read() if older.stderr else ""
        newer = child(script, "race", spec, "5", "newer", "-")
        assert line(newer) == "ok", newer.stderr.read() if newer.stderr else ""
        newer.wait(timeout=60)
        go.touch()
        assert line(older) == "fenced 5"
    finally:
        older.kill()
        older.wait(timeout=30)
    with open_destination(spec) as dest:
        assert {r["name"] for r in dest.read_partition(DAY).to_pylist()} == {"newer"}
        assert [r.token for r in dest.commit_records()] == [5]


def racers_end_with_the_newest(script: Path, spec: str,
                               tokens_in_commit_order: Callable[[Any], list[int]]) -> None:
    """Several processes race freely; whatever the interleaving, the slice ends as the newest
    token wrote it, and no older token committed after a newer one."""
    racers = [child(script, "race", spec, str(token), f"w{token}", "-") for token in (3, 6, 4)]
    outcomes = {}
    for token, racer in zip((3, 6, 4), racers, strict=True):
        outcomes[token] = line(racer, 120)
        racer.wait(timeout=60)
    assert outcomes[6] == "ok", outcomes
    with open_destination(spec) as dest:
        assert {r["name"] for r in dest.read_partition(DAY).to_pylist()} == {"w6"}
        tokens = tokens_in_commit_order(dest)
    assert tokens[-1] == 6 and tokens == sorted(tokens)  # commit order never goes back
    for token in (3, 4):
        assert outcomes[token] in ("ok", "fenced 6", "fenced 4"), outcomes
        assert (outcomes[token] == "ok") == (token in tokens)
