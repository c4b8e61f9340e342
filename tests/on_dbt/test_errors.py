"""The dbt error table: transient or permanent, the default patterns, and its extensions."""

from __future__ import annotations

import json
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


def _event(name: str, level: str, msg: str) -> str:
    """One line of dbt's JSON log (``--log-format-file json``), as dbt-core 1.9+ writes it."""
    return json.dumps({"info": {"name": name, "level": level, "msg": msg}, "data": {}})


def test_a_message_that_says_only_error_is_read_from_dbts_log(tmp_path: Path) -> None:
    """Found by a probe: a failed microbatch model's run_results message is only "ERROR",
    so a transient database error was classified permanent and its text was lost; dbt's
    structured log holds it."""
    from twice.drivers.dbt import failure_text

    log = tmp_path / "dbt.log"
    log.write_text("\n".join([
        _event("MainReportVersion", "info", "Running with dbt=1.11"),
        _event("LogModelResult", "error", "1 of 1 ERROR creating sql microbatch model stg"),
        _event("RunResultFailure", "error", "Failure in model stg_sales (models/stg.sql)"),
        _event("RunResultError", "error", "  Runtime Error in model stg_sales (models/stg.sql)\n"
               "  IO Error: database is locked, try again\n  LINE 3: ..."),
    ]) + "\n")
    said = failure_text("ERROR", log)
    assert said == "IO Error: database is locked, try again"
    assert ErrorTable(DEFAULT_TRANSIENT).classify(said)[0] == "transient"
    assert failure_text("Conversion Error: bad", log) == "Conversion Error: bad"
    assert failure_text("", tmp_path / "missing.log") == "dbt said nothing more"


def test_the_first_real_line_without_headings_or_colour() -> None:
    """Reported (issue 37): a failing model showed ANSI codes and dbt's summary line; the
    cause is the line under dbt's heading (this message is dbt-duckdb's, from run_results)."""
    from twice.drivers.dbt import first_error

    message = ("Runtime Error in model stg_events (models/staging/stg_events.sql)\n"
               "  Catalog Error: Table with name raw_events does not exist!\n"
               "  Did you mean \"raw_customers\"?\n  \n  LINE 8: from \"w\".\"main\"...")
    assert first_error(message) == "Catalog Error: Table with name raw_events does not exist!"
    coloured = "\x1b[31mCompilation Error in model x (m.sql)\x1b[0m\n  'foo' is undefined"
    assert first_error(coloured) == "'foo' is undefined"
