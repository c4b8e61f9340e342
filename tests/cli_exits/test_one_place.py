"""Only ``twice.cli.exits`` knows exit codes: commands raise typed errors or call it."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import twice.cli
from twice.cli.exits import BAD_INPUT, FAILED, INTERRUPTED, OK, exit_on_error, finish
from twice.errors import InputError, UnavailableError

CLI = Path(twice.cli.__file__).parent
# twice decide passes the lab program's own return code through, unchanged
PASS_THROUGH = {"__init__.py", "decide_cmd.py"}


def test_no_command_module_names_an_exit_code() -> None:
    pattern = re.compile(r"sys\.exit\(|SystemExit|ctx\.exit\(|\bEXIT_[A-Z_]+\s*=|def _?fail\(")
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(CLI.glob("*.py")) if path.name not in {"exits.py", *PASS_THROUGH}
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def _command(error: BaseException | None, ok: bool = True) -> click.Command:
    @click.command()
    @exit_on_error("twice probe")
    def probe() -> None:
        if error is not None:
            raise error
        finish(ok)

    return probe


@pytest.mark.parametrize(("error", "ok", "code", "stderr"), [
    (None, True, OK, ""),
    (None, False, FAILED, ""),
    (InputError("--interval: not a date"), True, BAD_INPUT,
     "twice probe: error: --interval: not a date\n"),
    (UnavailableError("the ledger failed during the run: locked"), True, FAILED,
     "twice probe: error: the ledger failed during the run: locked\n"),
    (KeyboardInterrupt(), True, INTERRUPTED, "twice probe: error: KeyboardInterrupt\n"),
])
def test_a_typed_error_is_one_line_and_the_code_of_its_type(
    error: BaseException | None, ok: bool, code: int, stderr: str
) -> None:
    result = CliRunner().invoke(_command(error, ok), [])
    assert result.exit_code == code
    assert result.stderr == stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_command_invoked_on_its_own_keeps_its_prefix(tmp_path: Path) -> None:
    from twice.cli.airflow_cmd import airflow

    result = CliRunner().invoke(airflow, ["describe", str(tmp_path / "p.py"), "--dag-id", "a b"])
    assert result.exit_code == BAD_INPUT
    assert result.stderr.startswith("twice airflow describe: error: --dag-id 'a b': use letters")
    assert "Traceback" not in result.output
