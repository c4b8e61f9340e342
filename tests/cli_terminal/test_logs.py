"""--log-level / TWICE_LOG_LEVEL and --log-format json: the engine's records on standard error,
one JSON object per line with the unit's fields; standard output keeps the result alone."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from twice.cli import cli


def _run(pipeline_file: Path, tmp_path: Path, *options: str,
         env: dict[str, str] | None = None) -> tuple[int, str, str]:
    tmp_path.mkdir(exist_ok=True)
    result = CliRunner().invoke(cli, ["run", str(pipeline_file), "--interval", "2026-11-25",
                                      "--deadline", "none", "--ledger",
                                      str(tmp_path / "l.db"), *options], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_json_logs_are_one_object_per_line_with_the_units_fields(
        pipeline_file: Path, tmp_path: Path) -> None:
    code, out, err = _run(pipeline_file, tmp_path, "--json", "--log-level", "info",
                          "--log-format", "json")
    assert code == 1
    assert json.loads(out)["ok"] is False  # stdout: the result only
    records = [json.loads(line) for line in err.splitlines()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    started = [r for r in records if r["message"].startswith("attempt 1 started")]
    assert {r["task"] for r in started} == {"extract_custodian_positions",
                                           "reconcile_against_general_ledger"}
    failed = next(r for r in records if r["level"] == "warning")
    assert failed["logger"] == "twice.engine"
    assert failed["task"] == "reconcile_against_general_ledger"
    assert failed["interval"].startswith("2026-11-25T00:00:00")
    assert failed["attempt"] == 1 and failed["uow_id"].startswith(
        "settlement_positions_nightly.reconcile_against_general_ledger.20261125")
    assert "trailer row" in failed["error"]


def test_the_level_comes_from_the_environment_and_defaults_to_warning(
        pipeline_file: Path, tmp_path: Path) -> None:
    _, _, quiet = _run(pipeline_file, tmp_path / "a", "--json")
    assert "started" not in quiet and "warning twice.engine: attempt 1 failed" in quiet
    _, _, chatty = _run(pipeline_file, tmp_path / "b", "--json",
                        env={"TWICE_LOG_LEVEL": "info"})
    assert "info    twice.engine: attempt 1 started" in chatty
    _, _, silent = _run(pipeline_file, tmp_path / "c", "--json",
                        env={"TWICE_LOG_LEVEL": "error"})
    assert silent == ""


def test_the_group_takes_the_options_before_the_command(
        pipeline_file: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--log-format", "json", "--log-level", "info", "run",
                                      str(pipeline_file), "--interval", "2026-11-23",
                                      "--deadline", "none", "--ledger", str(tmp_path / "l.db"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert all(json.loads(line)["level"] == "info" for line in result.stderr.splitlines())
