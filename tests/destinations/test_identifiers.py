"""Hostile names are refused with an error naming the field; values are always bound."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from twice.core.identifiers import quote_identifier, validate_identifier
from twice.destinations import (
    DestinationError,
    DestinationSpecError,
    IdentifierError,
    check_spec,
    open_destination,
)

HOSTILE = ["x; DROP TABLE y", 'a"b', "a'b", "..", "a/b", "a.b", "", "1abc", "a b", "x" * 64,
           "t--", "ü"]


@pytest.mark.parametrize("name", HOSTILE)
def test_validate_identifier_refuses(name: str) -> None:
    with pytest.raises(IdentifierError, match="column name"):
        validate_identifier(name, "column name")
    with pytest.raises(IdentifierError):
        quote_identifier(name, "postgresql")


def test_quoting_is_per_dialect() -> None:
    assert quote_identifier("Day_1", "duckdb") == '"Day_1"'
    with pytest.raises(IdentifierError, match="dialect"):
        quote_identifier("x", "mysql")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("sqlite:///tmp/x.db#t; DROP TABLE y", "table name"),
        ("sqlite:///tmp/x.db?partition_column=d%22ay#t", "partition_column"),
        ("sqlite:///tmp/x.db?key_columns=id,a'b#t", "key column"),
        ("duckdb:///tmp/x.duckdb#ma\"in.t", "schema name"),
        ("postgresql://u@h/db#public.t;x", "table name"),
        ("parquet:///tmp/p?partition_column=../up", "partition_column"),
    ],
)
def test_hostile_names_in_specs(spec: str, field: str) -> None:
    with pytest.raises(IdentifierError, match=field):
        open_destination(spec)


def test_hostile_keyword_arguments() -> None:
    with pytest.raises(IdentifierError, match="partition_column"):
        open_destination("sqlite:///tmp/x.db#t", partition_column="day; --")
    with pytest.raises(IdentifierError, match="key column"):
        open_destination("sqlite:///tmp/x.db#t", key_columns=["id", "x)"])


def test_hostile_column_names_in_rows(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    with pytest.raises(IdentifierError, match="column name 'x; DROP TABLE y'"):
        dest.replace_partition([{"day": date(2026, 11, 30), "x; DROP TABLE y": 1}],
                               date(2026, 11, 30))


@pytest.mark.parametrize("value", ["../../etc", "a/b", "a\\b", "x=y", " lead", "..", "a\nb"])
def test_hostile_parquet_partition_values(engines, value: str) -> None:
    dest = open_destination(engines.spec("parquet", partition_column="region"))
    with pytest.raises(IdentifierError, match="partition value of 'region'"):
        dest.replace_partition([{"region": value, "n": 1}], value)
    assert not any(p.name.startswith("region=") for p in engines.tmp.rglob("*"))
    assert not (engines.tmp.parent / "etc").exists()


def test_sql_values_are_bound_not_interpolated(sql_engine: str, engines) -> None:
    dest = open_destination(engines.spec(sql_engine, partition_column="region"))
    evil = "x'); DROP TABLE t; --"
    dest.replace_partition([{"region": evil, "n": 1}], evil)
    dest.replace_partition([{"region": "eu", "n": 2}], "eu")
    dest.replace_partition([{"region": evil, "n": 3}], evil)
    assert dest.row_count() == 2
    assert dest.read_partition(evil).to_pylist() == [{"region": evil, "n": 3}]


def test_bad_specs_are_clear() -> None:
    with pytest.raises(DestinationError, match="unknown destination scheme"):
        open_destination("mysql://h/db#t")
    with pytest.raises(DestinationError, match="names no table"):
        open_destination("sqlite:///tmp/x.db")
    with pytest.raises(DestinationError, match="local files"):
        open_destination("duckdb://evil.example/x.duckdb#t")
    with pytest.raises(DestinationError, match="must look like"):
        open_destination("no-scheme-here")
    with pytest.raises(DestinationError, match="contradicts"):
        open_destination("sqlite:///tmp/x.db?partition_column=a#t", partition_column="b")


def test_password_is_never_echoed() -> None:
    dest = open_destination("postgresql://u:s3cret@127.0.0.1:5432/db?sslmode=disable#s.t")
    assert "s3cret" not in dest.spec and "s3cret" not in repr(dest)
    assert dest.spec == "postgresql://u@127.0.0.1:5432/db?sslmode=disable#s.t"


@pytest.mark.parametrize("spec", [
    "sqlite:///{d}/w.db#t?x=1", "duckdb:///{d}/w.duckdb#a.b.c", "parquet:///{d}/p#t",
    "delta:///{d}/dl#t", "postgresql://u@127.0.0.1:1/#t", "nosuch:///{d}/x#t",
    "sqlite:///{d}/w.db?keep_previous=-1#t", "iceberg:///{d}/ice?catalog=x#ns.t",
])
def test_check_spec_refuses_a_malformed_spec_as_bad_input(tmp_path: Path, spec: str) -> None:
    with pytest.raises(DestinationSpecError):
        check_spec(spec.format(d=tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec", [
    "sqlite:///{d}/w.db#t", "duckdb:///{d}/w.duckdb#s.t", "parquet:///{d}/p",
    "delta:///{d}/dl", "iceberg:///{d}/ice#ns.t", "sqlite:///{d}/missing/w.db#t",
    # a server that cannot be reached is not bad input: the attempt meets it, and retries
    "postgresql://u:secret@127.0.0.1:1/db#t",
])
def test_check_spec_opens_nothing_for_a_well_formed_spec(tmp_path: Path, spec: str) -> None:
    check_spec(spec.format(d=tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("query", ["partition_column=", "partition_column=day&partition_column=d",
                                   "key_columns=", "keep_previous="])
def test_an_empty_or_repeated_twice_option_is_refused(tmp_path: Path, query: str) -> None:
    """Found by a probe: an empty ``partition_column=`` was dropped silently and a repeated
    one kept its last value."""
    with pytest.raises(DestinationSpecError, match=r"empty|twice"):
        check_spec(f"sqlite:///{tmp_path}/w.db?{query}#t")


@pytest.mark.parametrize("spec", ["sqlite:///wh.db#t", "duckdb:///wh.duckdb#t",
                                  "parquet:///orders", "delta:///orders"])
def test_a_three_slash_name_at_the_root_is_refused_not_written_to_the_root(spec: str) -> None:
    """``sqlite:///wh.db`` is relative in SQLAlchemy's URLs (the ledger's form) but names
    ``/wh.db`` in twice's destination form: the run wrote to the file system's root. Refused
    with both spellings; the explicit root form still works."""
    scheme, _, rest = spec.partition(":///")
    name = rest.partition("#")[0]
    with pytest.raises(DestinationSpecError, match="at the root of the file system") as caught:
        check_spec(spec)
    assert f"{scheme}:{name}" in str(caught.value) and f"{scheme}:////{name}" in str(caught.value)


def test_a_run_with_a_root_level_destination_is_bad_input(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from twice.cli import cli

    name = f"twice-rooted-{tmp_path.name}.duckdb"
    pipeline = tmp_path / "p.py"
    pipeline.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('rooted', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination='duckdb:///{name}?partition_column=day#t',\n"
        "               write='replace', timeout=60, estimated_duration=1)\n"
        "def t(ctx):\n"
        "    return pa.table({'day': [ctx.interval.start.date()]})\n")
    try:
        result = CliRunner().invoke(cli, ["run", str(pipeline), "--interval", "2026-11-01",
                                          "--ledger", str(tmp_path / "l.db"),
                                          "--deadline", "none"])
        assert result.exit_code == 2, result.output
        assert "at the root of the file system" in result.output
        assert not Path("/" + name).exists()
    finally:
        Path("/" + name).unlink(missing_ok=True)
