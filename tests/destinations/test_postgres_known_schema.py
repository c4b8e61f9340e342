"""A later replace of a PostgreSQL table conforms its rows to the columns the last write of it in
this process saw under its lock, without reading them first (issue 38: one catalog read and
one round trip less a unit); its lock reads them again and checks them.

Whatever another session does to the table between two writes, the second write ends exactly
as it would have in a process that never wrote the table (the columns read before the write):
the same refusal, or the same rows and a commit record that matches the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from dest_helpers import day_interval
from known_schema_cases import DAY, day_rows, day_stamp, first_write, second_write

from twice.destinations import open_destination
from twice.destinations.commits import stamped
from twice.destinations.postgres import _KNOWN_SCHEMAS, PostgresDestination

pytestmark = pytest.mark.postgres

# what another session does between the two writes, and the second write's rows
CHANGES: dict[str, tuple[str, pa.Table]] = {
    "a column added, the rows lack it": (
        "ALTER TABLE {t} ADD COLUMN note text", day_rows(4)),
    "a column added, the rows carry it": (
        "ALTER TABLE {t} ADD COLUMN note text",
        day_rows(4, note=pa.array(["a", "b", None, "d"], pa.string()))),
    "a column dropped, the rows lack it": (
        "ALTER TABLE {t} ADD COLUMN w text; ALTER TABLE {t} DROP COLUMN w", day_rows(4)),
    "a column's type changed": (
        "ALTER TABLE {t} ALTER COLUMN v TYPE text USING v::text", day_rows(4)),
    "a column's type narrowed": (
        "ALTER TABLE {t} ALTER COLUMN v TYPE integer", day_rows(4)),
    "the table dropped": ("DROP TABLE {t}", day_rows(4)),
    "the table dropped and made again with other columns": (
        "DROP TABLE {t}; CREATE TABLE {t} (day date, v bigint, note text NOT NULL)",
        day_rows(4)),
    "nothing": ("SELECT 1", day_rows(4)),
}


def _second_write(postgres_url: str, table: str, change: str, rows: pa.Table, *,
                  forget: bool) -> tuple[str, Any]:
    """Write the table, let another session change it, write it again (``forget``: as a
    process that never wrote it); how the second write ended, and the table after it."""
    spec = f"{postgres_url}?partition_column=day#public.{table}"
    first_write(spec)
    with psycopg.connect(postgres_url, autocommit=True) as other:
        other.execute(change.format(t=f"public.{table}"))
    if forget:
        _KNOWN_SCHEMAS.clear()
    else:
        with open_destination(spec) as dest:
            assert dest._known_schema() is not None
    ended, commit = second_write(spec, rows)
    if commit is None:
        return ended, None
    with psycopg.connect(postgres_url) as reader:
        stored = reader.execute(f"SELECT * FROM public.{table} ORDER BY v").fetchall()
        columns = [c.name for c in reader.execute(
            f"SELECT * FROM public.{table} LIMIT 0").description or ()]
    return ended, (columns, stored, commit.row_count, commit.checksum, commit.columns)


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_change_between_writes_ends_as_it_would_after_a_read(
    postgres_url: str, what: str
) -> None:
    change, rows = CHANGES[what]
    index = sorted(CHANGES).index(what)
    kept = _second_write(postgres_url, f"seen_{index}", change, rows, forget=False)
    read = _second_write(postgres_url, f"read_{index}", change, rows, forget=True)
    assert kept[0] == read[0].replace(f"read_{index}", f"seen_{index}")
    assert kept[1] == read[1]


def test_a_later_write_reads_no_columns_before_its_transaction(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"{postgres_url}?partition_column=day#public.kept"
    reads: list[int] = []
    real: Callable[[PostgresDestination], Any] = PostgresDestination.schema

    def counted(self: PostgresDestination) -> Any:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(PostgresDestination, "schema", counted)
    with open_destination(spec) as dest, stamped(day_stamp(1)):
        dest.replace_partition(day_rows(3), day_interval(DAY))
    first_reads = len(reads)
    with open_destination(spec) as dest, stamped(day_stamp(2)):
        dest.replace_partition(day_rows(5), day_interval(DAY))
    assert first_reads >= 1 and len(reads) == first_reads
    with open_destination(spec) as dest:  # a list of dicts is read as before: not converted
        dest.replace_partition([{"day": DAY, "v": 1}], day_interval(DAY), stamp=None)
    assert len(reads) == first_reads + 1
