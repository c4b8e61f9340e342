"""``twice policy``: tables, JSON, translations, help and clean usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner, Result

from twice.cli import cli

LAB = ["--max-attempts", "4", "--initial-delay", "4", "--multiplier", "2", "--max-delay", "12"]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["policy", *args])


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def test_table_shows_the_attempt_sequence() -> None:
    result = run(*LAB, "--jitter", "none")
    assert result.exit_code == 0, result.output
    rows = [line.strip("│ ").split("│") for line in result.output.splitlines()
            if line.startswith("│")]
    cells = [[cell.strip() for cell in row] for row in rows]
    assert cells == [["1", "0", "0", "0"], ["2", "4", "4", "4"], ["3", "8", "8", "12"],
                     ["4", "12", "12", "24"]]
    assert "max_attempts=4 counts the first try: at most 4 execution(s), 3 retries" in " ".join(
        result.output.split())


def test_show_subcommand_and_bare_options_are_the_same() -> None:
    assert run("show", *LAB).output == run(*LAB).output


def test_json_sequence_with_duration() -> None:
    data = run_json(*LAB, "--duration", "20")
    assert data["policy"]["max_attempts"] == 4 and data["executions"] == 4
    assert [a["delay_before"] for a in data["attempts"]] == [0, 4, 8, 12]
    assert [a["earliest_start"] for a in data["attempts"]] == [0, 24, 52, 84]
    assert [a["wait"] for a in data["attempts"]] == [[0, 0], [0, 4], [0, 8], [0, 12]]
    assert data["translations"] == []


@pytest.mark.parametrize(("args", "executions"), [
    (["from", "airflow", "--retries", "3", "--retry-delay", "300"], 4),
    (["from", "workflows", "--max-retries", "3"], 4),
    (["from", "stepfunctions", "--max-attempts", "3"], 4),
    (["from", "stepfunctions", "--max-attempts", "0"], 1),
    (["from", "temporal", "--maximum-attempts", "3"], 3),
    (["from", "tenacity", "--stop-after-attempt", "3"], 3),
    (["from", "stamina", "--attempts", "3", "--timeout", "none"], 3),
])
def test_from_tool_counts_executions(args: list[str], executions: int) -> None:
    data = run_json(*args)
    assert data["source"]["executions"] == executions
    assert data["policy"]["max_attempts"] == executions
    assert len(data["attempts"]) == executions


def test_from_airflow_table_and_translation_to_stepfunctions() -> None:
    result = run("from", "airflow", "--retries", "3", "--retry-delay", "300",
                 "--retry-exponential-backoff", "--to", "stepfunctions")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Apache Airflow -> twice" in text and "twice -> AWS Step Functions" in text
    assert "Airflow retries=3 counts retries only: 4 execution(s)" in text
    assert "300–599" in text  # Airflow's hash spread, written out
    assert '"MaxAttempts": 3' in text
    assert "[core] max_task_retry_delay" in text  # Rich markup must not eat brackets


def test_to_all_lists_every_tool_once() -> None:
    data = run_json(*LAB, "--to", "all", "--to", "airflow")
    tools = [t["tool"] for t in data["translations"]]
    assert tools == ["airflow", "workflows", "stepfunctions", "temporal", "tenacity", "stamina",
                     "dagster", "prefect"]
    by_tool = {t["tool"]: t for t in data["translations"]}
    assert by_tool["airflow"]["config"]["retries"] == 3
    assert by_tool["workflows"]["config"]["max_retries"] == 3
    assert by_tool["stepfunctions"]["config"]["Retry"][0]["MaxAttempts"] == 3
    assert by_tool["temporal"]["config"]["maximum_attempts"] == 4
    assert by_tool["tenacity"]["config"]["stop_after_attempt"] == 4
    assert all(t["differences"] for t in data["translations"])


def test_help_explains_counting_formula_and_examples() -> None:
    text = " ".join(run("--help").output.split())
    assert "--max-attempts includes the first try" in text
    assert "min(max_delay, initial_delay x multiplier^(n-1))" in text
    assert "uniform(0, delay)" in text
    assert "twice policy from stepfunctions --max-attempts 3 # 3 retries: 4 executions" in text
    show_help = " ".join(run("show", "--help").output.split())
    assert "Total executions INCLUDING the first try" in show_help
    sfn_help = " ".join(run("from", "stepfunctions", "--help").output.split())
    assert "MaxAttempts counts RETRIES only" in sfn_help


@pytest.mark.parametrize(("args", "option"), [
    (["--max-attempts", "0"], "--max-attempts"),
    (["--initial-delay", "abc"], "--initial-delay"),
    (["--initial-delay", "-1"], "--initial-delay"),
    (["--multiplier", "0.5"], "--multiplier"),
    (["--multiplier", "nan"], "--multiplier"),
    (["--initial-delay", "5", "--max-delay", "1"], "--max-delay"),
    (["--jitter", "decorrelated"], "--jitter"),
    (["--attempt-timeout", "0"], "--attempt-timeout"),
    (["--duration", "inf"], "--duration"),
    (["from", "temporal", "--maximum-attempts", "0"], "--maximum-attempts"),
    (["from", "workflows", "--initial-delay", "10", "--max-delay", "5"], "--max-delay"),
    (["from", "stepfunctions", "--interval-seconds", "0"], "--interval-seconds"),
    (["from", "stamina", "--attempts", "0"], "--attempts"),
    (["from", "tenacity"], "--stop-after-attempt"),
])
def test_bad_values_name_the_option_and_exit_2(args: list[str], option: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert option in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = run("bogus")
    assert result.exit_code == 2 and "No such command 'bogus'" in result.output


def test_real_process_bad_value_exit_code_and_no_traceback() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", "from twice.cli import main; main()", "policy",
         "--max-attempts", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert completed.returncode == 2
    assert "--max-attempts" in completed.stderr and "Traceback" not in completed.stderr


def test_rich_is_imported_only_to_print_tables() -> None:
    code = (
        "import sys\n"
        "from twice.cli import cli\n"
        "from twice.cli.policy_cmd import policy\n"
        "assert 'rich' not in sys.modules, 'imported at module load'\n"
        "try:\n"
        "    cli(['policy', '--json', '--to', 'all'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "assert 'rich' not in sys.modules, 'imported for --json'\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr
