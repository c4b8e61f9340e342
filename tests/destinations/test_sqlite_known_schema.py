"""A later replace of a SQLite table on a kept connection conforms its rows to the columns that
connection last saw under the write lock, and skips the commit table's DDL, while SQLite's
schema cookie (``PRAGMA schema_version``, read under ``BEGIN IMMEDIATE``) says no schema of the
file changed since (issue 38: two column reads and four DDL statements less a unit).

Whatever another connection does to the file between two writes, the second write ends exactly
as it would have on a new connection (the columns read before the write, the DDL run): the
same refusal, or the same rows, commit records and indexes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dest_helpers import day_interval
from known_schema_cases import DAY, day_rows, day_stamp, first_write, second_write

from twice.destinations import open_destination
from twice.destinations.commits import stamped
from twice.destinations.sqlite import IDLE

# what another connection does between the two writes, and the second write's rows
CHANGES: dict[str, tuple[str, pa.Table]] = {
    "a column added, the rows lack it": ("ALTER TABLE t ADD COLUMN note TEXT", day_rows(4)),
    "a column added, the rows carry it": (
        "ALTER TABLE t ADD COLUMN note TEXT",
        day_rows(4, note=pa.array(["a", "b", None, "d"], pa.string()))),
    "a NOT NULL column added": (
        "ALTER TABLE t ADD COLUMN note TEXT NOT NULL DEFAULT 'x'", day_rows(4)),
    "a column dropped and added again": (
        "ALTER TABLE t ADD COLUMN w TEXT; ALTER TABLE t DROP COLUMN w", day_rows(4)),
    "a column renamed": ("ALTER TABLE t RENAME COLUMN v TO w", day_rows(4)),
    "the table dropped": ("DROP TABLE t", day_rows(4)),
    "the table made again with another type": (
        "DROP TABLE t; CREATE TABLE t (day DATE_TEXT, v TEXT)", day_rows(4)),
    "the commit table dropped": ("DROP TABLE twice_commits", day_rows(4)),
    "an index of the commit table dropped": ("DROP INDEX twice_commits_fence_ix", day_rows(4)),
    "another table made": ("CREATE TABLE other (x INTEGER)", day_rows(4)),
    "nothing": ("SELECT 1", day_rows(4)),
}


def _second_write(path: Path, change: str, rows: pa.Table, *, forget: bool) -> tuple[str, Any]:
    """Write the table, let another connection change the file, write it again (``forget``:
    on a new connection, as a process that never wrote it); how the second write ended, and
    the file after it."""
    IDLE.clear()
    spec = f"sqlite:///{path}?partition_column=day#t"
    first_write(spec)
    with sqlite3.connect(path, isolation_level=None) as other:
        other.executescript(change)
    other.close()
    if forget:
        IDLE.clear()
    else:
        with open_destination(spec) as dest:
            assert dest._known_schema() is not None  # the kept connection's
    ended, commit = second_write(spec, rows)
    if commit is None:
        return ended, None
    IDLE.clear()
    with sqlite3.connect(path) as reader:
        stored = reader.execute("SELECT * FROM t ORDER BY 2").fetchall()
        columns = [(name, declared) for _, name, declared, *_ in
                   reader.execute("PRAGMA table_info(t)")]
        indexes = sorted(name for (name,) in reader.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'twice_commits'"))
        records = reader.execute(
            "SELECT token, row_count, checksum, columns FROM twice_commits ORDER BY token"
        ).fetchall()
    reader.close()
    return ended, (columns, stored, indexes, records)


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_change_between_writes_ends_as_it_would_on_a_new_connection(
    tmp_path: Path, what: str
) -> None:
    change, rows = CHANGES[what]
    kept = _second_write(tmp_path / "kept.db", change, rows, forget=False)
    read = _second_write(tmp_path / "read.db", change, rows, forget=True)
    assert kept[0] == read[0].replace("read.db", "kept.db")
    assert kept[1] == read[1]


def test_a_later_write_on_the_kept_connection_reads_no_columns_and_runs_no_ddl(
    tmp_path: Path
) -> None:
    IDLE.clear()
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#t"
    with open_destination(spec) as dest, stamped(day_stamp(1)):
        dest.replace_partition(day_rows(3), day_interval(DAY))
    sent: list[str] = []
    with open_destination(spec) as dest, stamped(day_stamp(2)):
        dest.connection.set_trace_callback(sent.append)  # type: ignore[attr-defined]
        try:
            dest.replace_partition(day_rows(5), day_interval(DAY))
        finally:
            dest.connection.set_trace_callback(None)  # type: ignore[attr-defined]
    assert [s for s in sent if s.startswith(("PRAGMA table_info", "CREATE"))] == []
    assert sum(s.startswith("PRAGMA schema_version") for s in sent) >= 1
    IDLE.clear()
    with sqlite3.connect(tmp_path / "w.db") as reader:
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (5,)
    reader.close()


def test_a_write_without_a_stamp_keeps_no_columns_past_its_transaction(tmp_path: Path) -> None:
    """The columns read under the lock serve that write only: a later read outside any write
    sees a column added meanwhile."""
    IDLE.clear()
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#t"
    with open_destination(spec) as dest:
        dest.replace_partition(day_rows(3), day_interval(DAY), stamp=None)
        with sqlite3.connect(tmp_path / "w.db", isolation_level=None) as other:
            other.execute("ALTER TABLE t ADD COLUMN note TEXT")
        other.close()
        assert "note" in dest.read_partition(day_interval(DAY)).column_names


def test_what_a_rolled_back_write_saw_is_not_remembered(tmp_path: Path) -> None:
    """A write that created the table (and the commit table) and then rolled back leaves the
    file at its earlier schema cookie; once other connections' changes bring the cookie back
    to the value it had inside that write, the columns and DDL it saw must not be trusted:
    the next write creates the table as on a new connection. (Found by the lifecycle
    simulation, seed 9: "no such table" on every later attempt.)"""
    IDLE.clear()
    path = tmp_path / "w.db"
    spec = f"sqlite:///{path}?partition_column=day#t"
    inside: list[int] = []

    def fail_after_delete(dest: Any) -> None:
        ((version,),) = dest.connection.execute("PRAGMA schema_version").fetchall()
        inside.append(int(version))
        raise RuntimeError("the write fails after its DDL")

    with open_destination(spec) as dest, stamped(day_stamp(1)):
        dest._after_delete = lambda: fail_after_delete(dest)  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            dest.replace_partition(day_rows(3), day_interval(DAY))
    with sqlite3.connect(path, isolation_level=None) as other:
        ((after,),) = other.execute("PRAGMA schema_version").fetchall()
        for n in range(inside[0] - after):  # other tables made, the cookie back where it was
            other.execute(f"CREATE TABLE other_{n} (x INTEGER)")
        assert other.execute("PRAGMA schema_version").fetchone() == (inside[0],)
    other.close()
    with open_destination(spec) as dest, stamped(day_stamp(2)):
        result = dest.replace_partition(day_rows(4), day_interval(DAY))
    assert result.rows_written == 4
    IDLE.clear()
    with sqlite3.connect(path) as reader:
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (4,)
        assert reader.execute("SELECT count(*) FROM twice_commits").fetchone() == (1,)
    reader.close()
