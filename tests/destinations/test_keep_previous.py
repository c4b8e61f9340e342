"""``keep_previous=DAYS``: SQL destinations keep replaced slices, so ``twice diff`` reads them.

Real engines (SQLite, DuckDB, PostgreSQL); see twice.destinations.previous.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from dest_helpers import sorted_rows

from twice.cli import cli
from twice.destinations import DestinationError, DestinationSpec, open_destination
from twice.destinations import previous as previous_mod
from twice.destinations.commits import FencedWriteError, WriteStamp
from twice.destinations.diff import DiffError, diff_versions

DAY = date(2026, 11, 25)
OTHER = date(2026, 11, 26)
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()),
                    ("v", pa.float64())])


def rows(values: dict[int, float], day: date = DAY) -> pa.Table:
    return pa.Table.from_pylist(
        [{"day": day, "id": k, "name": f"n{k}", "v": v} for k, v in sorted(values.items())],
        schema=SCHEMA)


def spec(engines: Any, engine: str, days: int | None = 7) -> str:
    base = engines.spec(engine, key_columns=("id",))
    if days is None:
        return base
    return base.replace("?", f"?keep_previous={days}&", 1)


def side_rows(dest: Any) -> int:
    name, _ = previous_mod.side_tables(dest)
    if not dest._table_exists(name):
        return 0
    q = dest.dialect.quote
    table = f"{q(dest.schema_name)}.{q(name)}" if dest.schema_name else q(name)
    ((count,),) = dest._query(f"SELECT count(*) FROM {table}")
    return int(count)


def stamp(token: int) -> WriteStamp:
    return WriteStamp(uow_id="uow-a", fence_key="pipe/task/2026-11-25", generation=1,
                      attempt=1, token=token, input_version="v1")


V1 = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}
V2 = {2: 2.0, 3: 30.0, 4: 40.0, 5: 5.0, 6: 6.0}  # +5 +6, -1, ~3 ~4, =2


def test_known_change_gives_exact_diff(sql_engine, engines) -> None:
    with open_destination(spec(engines, sql_engine)) as dest:
        dest.replace_partition(rows(V1), DAY, stamp=None)
        dest.replace_partition(rows({9: 9.0}, OTHER), OTHER, stamp=None)  # another slice
        dest.replace_partition(rows(V2), DAY, stamp=stamp(1))
        assert dest.versions(DAY) == [1, 2]
        assert dest.versions(OTHER) == [1]
        result = diff_versions(dest, DAY, 1, 2)
        assert (result.rows_before, result.rows_after) == (4, 5)
        assert (result.added, result.removed, result.changed, result.unchanged) == (2, 1, 2, 1)
        assert result.added_keys == ({"id": 5}, {"id": 6})
        assert result.removed_keys == ({"id": 1},)
        assert result.changed_keys == ({"id": 3}, {"id": 4})
        assert result.changed_columns == {"v": 2}
        old = dest.read_partition_at(DAY, 1)
        assert old.schema == dest.read_partition(DAY).schema  # no twice_ columns, same types
        assert sorted_rows(old) == sorted_rows(rows(V1))
        # an upsert is a version too
        dest.upsert(rows({5: 50.0, 7: 7.0}), partition=DAY, stamp=None)
        assert dest.versions(DAY) == [1, 2, 3]
        step = diff_versions(dest, DAY, 2, 3)
        assert (step.added, step.removed, step.changed) == (1, 0, 1)
        assert diff_versions(dest, DAY, 1, 1).identical
    out = CliRunner().invoke(cli, ["diff", spec_for_cli(dest.spec, sql_engine, engines),
                                   "--partition", "2026-11-25", "--from", "1", "--to", "2",
                                   "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert (shown["added"], shown["removed"], shown["changed"], shown["unchanged"]) == (
        2, 1, 2, 1)
    assert shown["added_keys"] == [{"id": 5}, {"id": 6}]
    assert shown["removed_keys"] == [{"id": 1}]
    assert shown["changed_keys"] == [{"id": 3}, {"id": 4}]


def spec_for_cli(canonical: str, engine: str, engines: Any) -> str:
    """The canonical spec (no password, no keep_previous) with keep_previous put back."""
    assert "keep_previous" not in canonical
    text = canonical.replace("?", "?keep_previous=7&", 1)
    return engines.pg_url + text[text.index("?"):] if engine == "postgresql" else text


def test_retention_purges_versions_older_than_days(sql_engine, engines, monkeypatch) -> None:
    clock = [datetime(2026, 11, 1, tzinfo=UTC)]
    monkeypatch.setattr(previous_mod, "now", lambda: clock[0])
    with open_destination(spec(engines, sql_engine, days=7)) as dest:
        dest.replace_partition(rows(V1), DAY, stamp=None)
        dest.replace_partition(rows(V2), DAY, stamp=None)  # keeps v1, replaced Nov 1
        assert side_rows(dest) == 4
        clock[0] += timedelta(days=6)
        dest.replace_partition(rows({1: 1.0}), DAY, stamp=None)  # keeps v2; v1 is 6 days old
        assert dest.versions(DAY) == [1, 2, 3]
        clock[0] += timedelta(days=2)  # v1 replaced 8 days ago, v2 2 days ago
        dest.replace_partition(rows({2: 2.0}), DAY, stamp=None)
        assert dest.versions(DAY) == [2, 3, 4]
        assert side_rows(dest) == 5 + 1  # v2 and v3
        with pytest.raises(DestinationError, match=r"no version 1 \(versions held: 2, 3, 4"):
            dest.read_partition_at(DAY, 1)
        with pytest.raises(DiffError, match="versions held: 2, 3, 4"):
            diff_versions(dest, DAY, 1, 4)
        assert sorted_rows(dest.read_partition_at(DAY, 2)) == sorted_rows(rows(V2))
        assert diff_versions(dest, DAY, 3, 4).summary() == "+1 -1 ~0 (rows 1 -> 1)"


def test_copy_is_in_the_write_transaction(sql_engine, engines, monkeypatch) -> None:
    with open_destination(spec(engines, sql_engine)) as dest:
        dest.replace_partition(rows(V1), DAY, stamp=stamp(5))
        assert side_rows(dest) == 0 and dest.versions(DAY) == [1]
        with pytest.raises(FencedWriteError):  # fenced: refused before anything is copied
            dest.replace_partition(rows(V2), DAY, stamp=stamp(4))

        def boom() -> None:
            raise RuntimeError("injected failure after the copy")

        monkeypatch.setattr(dest, "_after_delete", boom)
        with pytest.raises(RuntimeError, match="injected"):
            dest.replace_partition(rows(V2), DAY, stamp=stamp(5))
        assert side_rows(dest) == 0 and dest.versions(DAY) == [1]
        assert sorted_rows(dest.read_partition(DAY)) == sorted_rows(rows(V1))
        monkeypatch.undo()
        dest.replace_partition(rows(V2), DAY, stamp=stamp(5))
        assert side_rows(dest) == 4 and dest.versions(DAY) == [1, 2]


def test_without_the_option_nothing_is_kept_and_diff_refuses(sql_engine, engines) -> None:
    plain = spec(engines, sql_engine, days=None)
    with open_destination(plain) as dest:
        dest.replace_partition(rows(V1), DAY, stamp=None)
        dest.replace_partition(rows(V2), DAY, stamp=None)
        dest.upsert(rows({1: 1.0}), partition=DAY, stamp=None)
        assert dest.keep_previous is None
        assert not any(dest._table_exists(n) for n in previous_mod.side_tables(dest))
        with pytest.raises(DiffError, match=r"keep_previous=DAYS"):
            diff_versions(dest, DAY, 1, 2)
    out = CliRunner().invoke(cli, ["diff", plain, "--partition", "2026-11-25", "--from", "1",
                                   "--to", "2"])
    assert out.exit_code == 2 and "keep_previous=DAYS" in out.output


def test_data_written_before_the_option_is_version_one(engines) -> None:
    plain = spec(engines, "sqlite", days=None)
    with open_destination(plain) as dest:
        dest.replace_partition(rows(V1), DAY, stamp=None)
    with open_destination(plain.replace("?", "?keep_previous=3&", 1)) as dest:
        assert dest.versions(DAY) == [1] and dest.versions(OTHER) == []
        dest.replace_partition(rows(V2), DAY, stamp=None)
        assert dest.versions(DAY) == [1, 2]
        assert diff_versions(dest, DAY, 1, 2).removed_keys == ({"id": 1},)


def test_option_parsing_and_identity(engines, tmp_path) -> None:
    plain = spec(engines, "duckdb", days=None)
    kept = plain.replace("?", "?keep_previous=30&", 1)
    assert DestinationSpec.parse(kept).keep_previous == 30
    assert DestinationSpec.parse(plain).keep_previous is None
    with open_destination(plain) as a, open_destination(kept) as b:
        assert a.spec == b.spec  # the canonical identity does not change
        assert b.keep_previous == 30
    for bad in ("0", "-1", "x", "1.5", ""):
        with pytest.raises(DestinationError, match="keep_previous"):
            DestinationSpec.parse(plain.replace("?", f"?keep_previous={bad}&", 1))
    with pytest.raises(DestinationError, match="take no keep_previous"):
        open_destination(f"parquet://{tmp_path}/p?partition_column=day&keep_previous=7")
