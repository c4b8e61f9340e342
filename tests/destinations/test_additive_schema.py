"""Additive schema changes (issue 39) on SQLite, DuckDB and PostgreSQL, real databases.

A task's output that gains a NULLABLE column its table lacks: without --accept-schema-change
the write is refused, naming the column and the flag; with it, twice adds the column itself
(``ALTER TABLE ... ADD COLUMN`` in the write's own transaction, with the rows and the commit
record), rows already in the table hold NULL, the change is recorded (the commit record and
the ledger's observation of the attempt), and ``twice verify`` still verifies the slices
written before the change (and catches values written behind twice's back into the new
column of those slices). Every other change (a column's type, a dropped, renamed or new NOT
NULL column) is refused in one line naming the table, the column and what to do.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from dest_helpers import day_interval

from twice.cli import cli
from twice.destinations import open_destination
from twice.destinations.columns import SchemaError
from twice.destinations.commits import WriteStamp
from twice.destinations.rows import SchemaMismatchError
from twice.ledger import Ledger

SQL = [
    "sqlite",
    "duckdb",
    pytest.param("postgresql", marks=pytest.mark.postgres),
]

PIPELINE = """\
import os
import pyarrow as pa
from twice import Pipeline, Schedule
pipeline = Pipeline('additive', schedule=Schedule.daily('UTC'))
@pipeline.task(destination={spec!r}, write='replace', safe_repeat=True)
def t(ctx):
    day = ctx.interval.start.date()
    cols = {{'day': [day, day], 'id': [1, 2], 'v': [10, 20]}}
    if os.environ.get('WIDER'):
        cols['w'] = ['a', None]
    return pa.table(cols)
"""

OLD = ("--start", "2024-01-01", "--end", "2024-01-03")  # two days, before the change
NEW = ("--start", "2024-01-03", "--end", "2024-01-04")  # the day the output gains 'w'


def _spec(engines: Any, engine: str, name: str = "t") -> str:
    return engines.spec(engine, name)


def _backfill(path: Path, ledger: Path, span: tuple[str, ...], *extra: str,
              wider: bool = False) -> Any:
    args = ["backfill", str(path), *span, "--ledger", str(ledger), "--deadline", "none", *extra]
    return CliRunner().invoke(cli, args, env={"WIDER": "1" if wider else ""})


def _rows(spec: str) -> dict[tuple[str, int], Any]:
    with open_destination(spec) as dest:
        table = dest.read_partition(None)
    return {(str(r["day"]), r["id"]): r.get("w", "absent") for r in table.to_pylist()}


@pytest.mark.parametrize("engine", SQL)
def test_a_new_nullable_column_is_added_under_accept_schema_change(
        engine: str, engines: Any, tmp_path: Path) -> None:
    spec = _spec(engines, engine)
    path, ledger = tmp_path / "p.py", tmp_path / "l.db"
    path.write_text(PIPELINE.format(spec=spec))
    assert _backfill(path, ledger, OLD).exit_code == 0
    with open_destination(spec) as dest:
        before = dest.schema()
    assert before is not None and "w" not in before

    refused = _backfill(path, ledger, NEW, wider=True)
    assert refused.exit_code == 1, refused.output
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    assert "Traceback" not in refused.output
    said = " ".join(refused.output.split())
    assert "'w'" in said and "--accept-schema-change" in said
    with open_destination(spec) as dest:
        assert dest.schema() == before  # nothing changed, nothing landed for the new day
    assert ("2024-01-03", 1) not in _rows(spec)

    accepted = _backfill(path, ledger, NEW, "--accept-schema-change", wider=True)
    assert accepted.exit_code == 0, accepted.output
    with open_destination(spec) as dest:
        after = dest.schema()
        assert after is not None and list(after) == [*before, "w"]
        assert after["w"].kind == "string"
        (record,) = [r for r in dest.commit_records() if r.slice.startswith("day in [2024-01-03")]
    assert record.extra["columns_added"] == {"w": dest.dialect.ddl_type(after["w"])}
    assert _rows(spec) == {
        ("2024-01-01", 1): None, ("2024-01-01", 2): None,  # rows already there: NULL
        ("2024-01-02", 1): None, ("2024-01-02", 2): None,
        ("2024-01-03", 1): "a", ("2024-01-03", 2): None,  # the new rows hold their values
    }
    # the ledger records the change: the attempt's observation holds the commit record
    book = Ledger.open(f"sqlite:///{ledger}")
    try:
        observed = [o.detail for u in book.units() for o in book.observations(u.uow_id)
                    if o.state == "succeeded" and u.interval.label.startswith("2024-01-03")]
        (fingerprint,) = [f for f in book.latest_fingerprints()
                          if f.partition.startswith("2024-01-03")]
    finally:
        book.close()
    assert any(d.get("commit", {}).get("extra", {}).get("columns_added") == {
        "w": dest.dialect.ddl_type(after["w"])} for d in observed)
    assert "w string" in str(fingerprint.schema)

    verified = CliRunner().invoke(cli, ["verify", "--ledger", str(ledger)])
    assert verified.exit_code == 0, verified.output
    assert "verified 3/3 partitions match the ledger" in verified.output
    said = " ".join(verified.output.split())
    assert "column w was added after this version was recorded" in said  # explained

    # a value written into an old slice's new column behind twice's back is caught
    with open_destination(spec) as dest, dest._transaction() as tx:
        p = dest.dialect.placeholder
        dest._execute(tx, f"UPDATE {dest.qualified} SET {dest.dialect.quote('w')} = {p} "
                          f"WHERE {dest.dialect.quote('id')} = {p} AND "
                          f"{dest.dialect.quote('v')} = {p}", ["x", 1, 10])
    tampered = CliRunner().invoke(cli, ["verify", "--ledger", str(ledger)])
    assert tampered.exit_code == 1, tampered.output
    assert "MISMATCH" in tampered.output and "column w" in tampered.output


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_twice_run_takes_accept_schema_change_too(engine: str, engines: Any,
                                                  tmp_path: Path) -> None:
    """The refusal names --accept-schema-change; ``twice run`` must offer it, as backfill
    does, for a run of new intervals (no --force implied: a succeeded unit stays as it is)."""
    spec = _spec(engines, engine)
    path, ledger = tmp_path / "p.py", tmp_path / "l.db"
    path.write_text(PIPELINE.format(spec=spec))
    assert _backfill(path, ledger, OLD).exit_code == 0

    def run(*extra: str) -> Any:
        return CliRunner().invoke(cli, ["run", str(path), "--interval", "2024-01-03",
                                        "--ledger", str(ledger), "--deadline", "none",
                                        *extra], env={"WIDER": "1"})

    refused = run()
    assert refused.exit_code == 1, refused.output
    assert "--accept-schema-change" in " ".join(refused.output.split())
    accepted = run("--accept-schema-change")
    assert accepted.exit_code == 0, accepted.output
    rows = _rows(spec)
    assert rows[("2024-01-03", 1)] == "a" and rows[("2024-01-01", 1)] is None
    again = run("--accept-schema-change")  # already succeeded: not run again without --force
    assert again.exit_code == 0 and "already succeeded" in " ".join(again.output.split())


# ------------------------------------------------------------ the destination, stamp by stamp


DAY1, DAY2 = date(2024, 1, 1), date(2024, 1, 2)


def _stamp(add_columns: bool, token: int = 1) -> WriteStamp:
    return WriteStamp(uow_id=f"u{token}", fence_key="p/t/day", generation=1, attempt=1,
                      token=token, add_columns=add_columns)


def _table(day: date, **columns: Any) -> pa.Table:
    data: dict[str, Any] = {"day": pa.array([day, day], pa.date32()),
                            "id": pa.array([1, 2], pa.int64()),
                            "v": pa.array([10, 20], pa.int64())}
    data.update(columns)
    return pa.table(data)


@pytest.fixture
def written(sql_engine: str, engines: Any) -> str:
    spec = engines.spec(sql_engine)
    with open_destination(spec) as dest:
        dest.replace_partition(_table(DAY1), day_interval(DAY1), stamp=_stamp(False))
    return spec


def _refusal(spec: str, rows: pa.Table, *, add: bool = True) -> str:
    with open_destination(spec) as dest, pytest.raises(SchemaMismatchError) as caught:
        dest.replace_partition(rows, day_interval(DAY2), stamp=_stamp(add, 2))
    with open_destination(spec) as dest:
        assert list(dest.schema() or {}) == ["day", "id", "v"]  # nothing changed
        assert dest.row_count() == 2
    text = str(caught.value)
    assert "\n" not in text and spec.split("#")[1].split(".")[-1] in text  # the table
    return text


def test_without_the_stamp_allowing_it_a_new_column_is_refused(written: str) -> None:
    text = _refusal(written, _table(DAY2, w=pa.array([1, None], pa.int64())), add=False)
    assert "new column 'w'" in text and "--accept-schema-change" in text


def test_a_changed_type_is_refused_with_what_to_do(written: str) -> None:
    text = _refusal(written, _table(DAY2).set_column(2, "v", pa.array(["x", "y"])))
    assert "column 'v'" in text and "type" in text
    with open_destination(written) as dest:
        if dest.engine == "sqlite":
            assert "new table" in text  # SQLite cannot change a column's type
        else:
            assert "ALTER TABLE" in text and "ALTER COLUMN" in text


def test_a_dropped_column_is_refused_with_what_to_do(written: str) -> None:
    text = _refusal(written, _table(DAY2).drop_columns(["v"]))
    assert "column 'v'" in text and "DROP COLUMN" in text


def test_a_renamed_column_is_refused_with_what_to_do(written: str) -> None:
    text = _refusal(written, _table(DAY2).rename_columns(["day", "id", "value"]))
    assert "'v'" in text and "'value'" in text and "RENAME COLUMN" in text


def test_a_new_not_null_column_is_refused_with_what_to_do(written: str) -> None:
    rows = _table(DAY2)
    rows = rows.append_column(pa.field("w", pa.int64(), nullable=False), pa.array([1, 2]))
    text = _refusal(written, rows)
    assert "'w'" in text and "NOT NULL" in text and "ADD COLUMN" in text


def test_a_new_column_of_only_nulls_is_refused(written: str) -> None:
    text = _refusal(written, _table(DAY2, w=pa.array([None, None], pa.null())))
    assert "'w'" in text and "type" in text


def test_a_failed_write_leaves_no_added_column(written: str) -> None:
    """The ALTER runs in the write's transaction: a write that fails after it (here between
    the delete and the insert) leaves the table as it was, column and rows."""
    with open_destination(written) as dest:
        def boom() -> None:
            raise RuntimeError("crash between the delete and the insert")

        dest._after_delete = boom  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            dest.replace_partition(_table(DAY1, w=pa.array(["a", "b"])), day_interval(DAY1),
                                   stamp=_stamp(True, 2))
    with open_destination(written) as dest:
        assert list(dest.schema() or {}) == ["day", "id", "v"]
        assert dest.row_count() == 2 and len(dest.commit_records()) == 1


def test_upsert_and_append_add_the_column_too(sql_engine: str, engines: Any) -> None:
    spec = engines.spec(sql_engine, key_columns=("id",))
    with open_destination(spec) as dest:
        dest.upsert(_table(DAY1), partition=day_interval(DAY1), stamp=_stamp(False))
        result = dest.upsert(_table(DAY1, w=pa.array([1.5, None])), partition=None,
                             stamp=_stamp(True, 2))
        assert result.commit is not None
        assert result.commit.extra["columns_added"] == {"w": dest.dialect.ddl_type(
            (dest.schema() or {})["w"])}
        dest.append(_table(DAY2, w=pa.array([2.5, 3.5])),
                    partition=day_interval(DAY2), stamp=_stamp(True, 3))
        got = sorted((str(r["day"]), r["id"], r["w"]) for r in dest.read_partition().to_pylist())
    assert got == [("2024-01-01", 1, 1.5), ("2024-01-01", 2, None),
                   ("2024-01-02", 1, 2.5), ("2024-01-02", 2, 3.5)]


def test_the_cli_refusal_of_a_type_change_is_one_line(tmp_path: Path) -> None:
    """No traceback, exit 1 (the work did not succeed), one line naming table, column and
    what to do."""
    spec = f"sqlite://{tmp_path}/w.db?partition_column=day#t"
    path, ledger = tmp_path / "p.py", tmp_path / "l.db"
    path.write_text(PIPELINE.format(spec=spec).replace(
        "cols['w'] = ['a', None]", "cols['v'] = ['ten', 'twenty']"))
    assert _backfill(path, ledger, OLD).exit_code == 0
    refused = _backfill(path, ledger, NEW, "--accept-schema-change", "--json", wider=True)
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    report = json.loads(refused.stdout)
    assert "column 'v'" in report["refusal"] and "#t" in report["refusal"]
    assert "new table" in report["refusal"] and "\n" not in report["refusal"]
    assert isinstance(SchemaError("x"), ValueError)


def test_keep_previous_keeps_the_slices_around_the_change(sql_engine: str, engines: Any) -> None:
    """With keep_previous the side table of replaced rows gains the column in the same
    transaction: the slice before the change reads back with NULL in it, the one after with
    its values."""
    spec = engines.spec(sql_engine).replace("?", "?keep_previous=7&", 1)
    with open_destination(spec) as dest:
        dest.replace_partition(_table(DAY1), day_interval(DAY1), stamp=_stamp(False))
        dest.replace_partition(_table(DAY1, w=pa.array(["a", "b"])), day_interval(DAY1),
                               stamp=_stamp(True, 2))
        dest.replace_partition(_table(DAY1, w=pa.array(["c", None])), day_interval(DAY1),
                               stamp=_stamp(True, 3))
        versions = dest.versions(day_interval(DAY1))
        got = {v: sorted(dest.read_partition_at(day_interval(DAY1), v).column("w").to_pylist(),
                         key=str) for v in versions}
    assert got == {1: [None, None], 2: ["a", "b"], 3: [None, "c"]}


def test_twice_run_refuses_a_new_column_naming_it_and_the_flag(tmp_path: Path) -> None:
    spec = f"duckdb://{tmp_path}/w.duckdb?partition_column=day#t"
    path, ledger = tmp_path / "p.py", tmp_path / "l.db"
    path.write_text(PIPELINE.format(spec=spec))
    args = ["run", str(path), "--interval", "2024-01-01", "--ledger", str(ledger),
            "--deadline", "none"]
    assert CliRunner().invoke(cli, args).exit_code == 0
    wider = CliRunner().invoke(cli, [*args[:3], "2024-01-02", *args[4:]], env={"WIDER": "1"})
    assert wider.exit_code == 1 and "Traceback" not in wider.output
    said = " ".join(wider.output.split())
    assert "new column 'w'" in said and "--accept-schema-change" in said
    with open_destination(spec) as dest:
        assert list(dest.schema() or {}) == ["day", "id", "v"]
