"""The dbt error table: transient or permanent, the default patterns, and its extensions."""

from __future__ import annotations

from pathlib import Path

import pytest

from twice.drivers.dbt import DEFAULT_TRANSIENT, ErrorTable
from twice.errors import InputError


@pytest.mark.parametrize("message", [
    'IO Error: Could not set lock on file "/w/wh.duckdb": Conflicting lock is held',
    "database is locked",
    "TransactionContext Error: Catalog write-write conflict on alter with \"stg\"",
    "could not serialize access due to concurrent update (serialization failure)",
    "connection reset by peer",
    "Read timed out. (read timeout=300)",
    "429 Too Many Requests: rate limit exceeded",
    "503 Service Unavailable",
    "deadlock detected",
])
def test_the_default_table_calls_these_transient(message: str) -> None:
    kind, pattern = ErrorTable().classify(message)
    assert kind == "transient" and pattern in DEFAULT_TRANSIENT


@pytest.mark.parametrize("message", [
    'Binder Error: Referenced column "amount2" not found in FROM clause!',
    "Parser Error: syntax error at or near \"selec\"",
    "Compilation Error in model stg_events: 'foo' is undefined",
    "Conversion Error: Could not convert string 'x' to INT32",
    "",
])
def test_everything_else_is_permanent(message: str) -> None:
    assert ErrorTable().classify(message) == ("permanent", None)


def test_extended_in_python_permanent_patterns_win() -> None:
    table = ErrorTable().extended(transient=[r"warehouse is resuming"],
                                  permanent=[r"timeout .* exceeded the model's budget"])
    assert table.classify("Warehouse is resuming, retry later")[0] == "transient"
    assert table.classify("statement timeout 600 s exceeded the model's budget") == (
        "permanent", r"timeout .* exceeded the model's budget")
    assert table.classify("Read timed out")[0] == "transient"  # defaults kept


def test_extended_from_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "errors.toml"
    path.write_text('[errors]\ntransient = ["quota exceeded"]\n'
                    'permanent = ["database is locked"]\n')
    table = ErrorTable.from_file(path)
    assert table.classify("Quota exceeded for project x")[0] == "transient"
    assert table.classify("database is locked")[0] == "permanent"
    assert table.classify("connection reset")[0] == "transient"
    path.write_text('replace_defaults = true\ntransient = ["only this"]\n')
    replaced = ErrorTable.from_file(path)
    assert replaced.transient == ("only this",)
    assert replaced.classify("connection reset")[0] == "permanent"


def test_a_bad_table_is_refused_with_its_file(tmp_path: Path) -> None:
    path = tmp_path / "errors.toml"
    path.write_text('transient = "not a list"\n')
    with pytest.raises(InputError, match=r"errors\.toml: transient must be a list"):
        ErrorTable.from_file(path)
    path.write_text('transient = ["(unclosed"]\n')
    with pytest.raises(InputError, match="not a regular expression"):
        ErrorTable.from_file(path)


def test_a_message_that_says_only_error_is_read_from_dbts_output(tmp_path: Path) -> None:
    """Found by a probe: a failed microbatch model's run_results message is only "ERROR",
    so a transient database error was classified permanent and its text was lost; dbt's own
    output holds it."""
    from twice.drivers.dbt import failure_text

    out = tmp_path / "dbt.out"
    out.write_text("Running with dbt\n  Runtime Error in model stg_sales\n"
                   "  IO Error: database is locked, try again\n")
    said = failure_text("ERROR", out)
    assert "database is locked" in said
    assert ErrorTable(DEFAULT_TRANSIENT).classify(said)[0] == "transient"
    assert failure_text("Conversion Error: bad", out) == "Conversion Error: bad"
    assert failure_text("", tmp_path / "missing.out") == ""
