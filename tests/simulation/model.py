"""The reference model: invariants checked from the world's ground truth, not twice's code.

It reads the destinations with the engines' own Python modules (sqlite3, duckdb) and the
ledger through its public reader; it asks twice only which unit of work is current for a
(task, day) (``identify_unit``), the key under which the ledger files its claims.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections import Counter
from datetime import date
from typing import TYPE_CHECKING, Any

from twice.engine.executor import identify_unit

if TYPE_CHECKING:
    from tests.simulation.harness import Simulation

OWNED = ("extract", "clean", "audit")


_DUCKDB: dict[str, Any] = {}


def slice_rows(spec: str, day: date) -> list[tuple[Any, ...]]:
    """The day's rows of ``spec``'s table, sorted, read without twice. DuckDB connections are
    kept open per file (connecting costs milliseconds; while one is open, twice's own
    connections in this process share its database instance)."""
    location, _, table = spec.partition("#")
    path = location.split("://", 1)[1].split("?", 1)[0]
    if not os.path.exists(path):
        return []
    if location.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(path)) as conn:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?",
                                [table]).fetchall():
                return []
            got = conn.execute(f'SELECT * FROM "{table}" WHERE day = ?',
                               [day.isoformat()]).fetchall()
        return sorted(tuple(_norm(x) for x in row) for row in got)
    import duckdb

    conn = _DUCKDB.get(path)
    if conn is None:
        conn = _DUCKDB[path] = duckdb.connect(path)
    if not conn.execute("SELECT 1 FROM information_schema.tables WHERE table_name = ?",
                        [table]).fetchall():
        return []
    got = conn.execute(f'SELECT * FROM "{table}" WHERE day = ?', [day]).fetchall()
    return sorted(tuple(_norm(x) for x in row) for row in got)


def close_readers() -> None:
    """Close the kept DuckDB connections (at the end of a seed, before its files go)."""
    while _DUCKDB:
        _DUCKDB.popitem()[1].close()


def _norm(value: Any) -> Any:
    if isinstance(value, date):
        return value.isoformat()
    return value


def _rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(_norm(x) for x in row) for row in rows)


class Model:
    """Checks invariants 1-5 after every harness step, and 6 after the fault-free phase."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.world = sim.world

    def _verified(self, task: str, day: date) -> tuple[bool, Any]:
        """Whether the ledger records the CURRENT unit of (task, day) verified: its latest
        attempt succeeded (and, for an owned write, a fingerprint of it is recorded)."""
        ledger = self.sim.reader
        interval = self.sim.interval(day)
        unit = identify_unit(self.sim.pipeline, ledger, task, interval)
        latest = ledger.latest_attempt(unit.uow_id)
        if latest is None or latest.outcome != "succeeded":
            return False, None
        dest = self.sim.dest.get(task)
        if task in OWNED or (task == "remote" and "reconcile_with_owned_write"
                             in self.world.features):
            assert dest is not None
            prints = [f for f in ledger.latest_fingerprints(dest) if f.uow_id == unit.uow_id]
            if not prints:
                return False, None
            return True, prints[-1]
        return True, None

    def check(self) -> list[str]:
        w = self.world
        found: list[str] = []
        for day in w.days:
            v = w.version[day]
            truth_extract = _rows(w.truth.extract_rows(day, v))
            ok_extract, fp = self._verified("extract", day)
            extract_rows = slice_rows(self.sim.dest["extract"], day)
            if ok_extract:
                if extract_rows != truth_extract:
                    found.append(f"1: extract {day} recorded verified for v{v} but holds "
                                 f"{extract_rows} (expected {truth_extract})")
                if fp.row_count != len(extract_rows):
                    found.append(f"3: extract {day} recorded {fp.row_count} rows, holds "
                                 f"{len(extract_rows)}")
            clean_rows = slice_rows(self.sim.dest["clean"], day)
            for row in clean_rows:
                if w.truth.clean_rejected(day, int(row[3])):
                    found.append(f"4: clean {day} holds rows of v{row[3]}, an output its "
                                 "acceptance rejects")
                    break
            ok_clean, fp = self._verified("clean", day)
            if ok_clean and ok_extract:
                expected = _rows(w.truth.clean_rows(day, v))
                if w.truth.clean_rejected(day, v):
                    found.append(f"1: clean {day} recorded verified for rejected v{v}")
                elif clean_rows != expected:
                    found.append(f"1: clean {day} recorded verified for v{v} but holds "
                                 f"{clean_rows} (expected {expected})")
            if ok_clean and fp.row_count != len(clean_rows):
                found.append(f"3: clean {day} recorded {fp.row_count} rows, holds "
                             f"{len(clean_rows)}")
            audit = slice_rows(self.sim.dest["audit"], day)
            twice_appended = [r for r, n in Counter(audit).items() if n > 1]
            if twice_appended:
                found.append(f"1: audit {day} appended twice: {twice_appended}")
            ok_audit, fp = self._verified("audit", day)
            if ok_audit and ok_extract and (day.isoformat(), v) not in audit:
                found.append(f"1: audit {day} recorded verified for v{v} but holds {audit}")
            if ok_audit and fp.row_count != len(audit):
                found.append(f"3: audit {day} recorded {fp.row_count} rows, holds {len(audit)}")
            if "reconcile_with_owned_write" in w.features:
                ok_remote, fp = self._verified("remote", day)
                remote = slice_rows(self.sim.dest["remote"], day)
                if ok_remote and ok_extract and remote != [(day.isoformat(), v)]:
                    found.append(f"1: remote {day} recorded verified for v{v} but holds "
                                 f"{remote}")
        sent = Counter((task, day, v) for task, day, v, _ in w.receiver.deliveries)
        sent.update(w.receiver.accepted.values())
        sent.update(("remote", day, v) for day, v, _ in w.remote.executions)
        for (task, day, v), n in sorted(sent.items()):
            if n > 1:
                found.append(f"2: {task} {day} v{v} took effect {n} times")
        for holder, spec in w.foreign_writes:
            found.append(f"5: {holder} wrote {spec}, which another ledger owns")
        return found

    def converged(self) -> list[str]:
        """Invariant 6: every unit whose effects twice can see is verified, except an output
        its acceptance rejects (and what depends on it)."""
        w = self.world
        visible = ["extract", "audit", "remote", "clean"]
        if "same_job_id" in w.features:
            visible.append("keyed")
        found = []
        for day in w.days:
            rejected = w.truth.clean_rejected(day, w.version[day])
            for task in visible:
                if task in ("clean", "keyed") and rejected:
                    continue
                if not self._verified(task, day)[0]:
                    unit = identify_unit(self.sim.pipeline, self.sim.reader, task,
                                         self.sim.interval(day))
                    latest = self.sim.reader.latest_attempt(unit.uow_id)
                    found.append(f"6: {task} {day} v{w.version[day]} not verified after the "
                                 f"fault-free phase (latest attempt: "
                                 f"{None if latest is None else latest.outcome})")
            if "operator_resolution_failed" in w.features and not rejected:
                found.extend(self._resolved_failed_executed(day))
        return found

    def _resolved_failed_executed(self, day: Any) -> list[str]:
        """An operator's "failed" (the effect did not happen) is the only step a person takes:
        the current notify unit whose latest resolution says so was executed again after it,
        with no --repeat. That later attempt's own outcome is judged as any attempt's: one
        left unknown, or failed after it may have acted, by a fault before the fault-free
        phase is an effect twice cannot see, which waits for a person again (seeds 1552,
        3943, 4053: the model once asked that it succeeded)."""
        reader = self.sim.reader
        unit = identify_unit(self.sim.pipeline, reader, "notify", self.sim.interval(day))
        resolutions = reader.resolutions(unit.uow_id)
        if not resolutions or resolutions[-1].outcome != "failed":
            return []
        latest = reader.latest_attempt(unit.uow_id)
        resolved = resolutions[-1].attempt.number
        if latest is not None and latest.number > resolved:
            return []
        return [f"6: notify {day} resolved failed (attempt {resolved}) but not executed after "
                f"it (latest attempt: {None if latest is None else latest.outcome})"]
