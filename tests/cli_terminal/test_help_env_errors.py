"""Every command's --help lists the exit codes (from ``twice.cli.exits.EXIT_CODES``) and the
environment variable of each option; the environment really sets them; every error line has
one form, ``twice COMMAND: error: MESSAGE``; the page's environment table is the commands'."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from twice.cli import cli
from twice.cli.envdoc import END, START, leaves, render, rows
from twice.cli.exits import EXIT_CODES

REPO = Path(__file__).resolve().parents[2]
LEAVES = dict(leaves())
ERROR_LINE = re.compile(r"^twice( [a-z][a-z-]*)+: error: \S")


def _help(path: str) -> str:
    # as wide as --help gets (120 columns): narrower, Click breaks the longest names
    result = CliRunner().invoke(cli, [*path.split()[1:], "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", ["twice", *LEAVES])
def test_help_lists_every_exit_code_from_the_one_mapping(path: str) -> None:
    text = _help(path)
    assert "Exit codes:" in text
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", text, re.M), (path, code)


@pytest.mark.parametrize("path", list(LEAVES))
def test_help_shows_the_environment_variable_of_every_option(path: str) -> None:
    text = " ".join(_help(path).split())
    for param in LEAVES[path].params:
        if isinstance(param, click.Option) and not param.hidden:
            assert isinstance(param.envvar, str) and param.envvar.startswith("TWICE_"), param
            assert f"env var: {param.envvar}" in text, (path, param.opts)
    prefix = "TWICE_" + "_".join(path.split()[1:]).upper().replace("-", "_")
    own = [p for p in LEAVES[path].params if isinstance(p, click.Option)
           and p.name not in ("log_level", "log_format")]
    assert all(str(p.envvar).startswith(prefix + "_") for p in own), path


def test_an_option_is_set_from_its_environment_variable(ran: str) -> None:
    # TWICE_STATUS_JSON=1 is --json, TWICE_STATUS_LEDGER is --ledger
    result = CliRunner().invoke(cli, ["status"], env={"TWICE_STATUS_JSON": "1",
                                                      "TWICE_STATUS_LEDGER": ran})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ledger"].endswith("ledger.db")


def test_twice_ledger_still_names_the_ledger(ran: str) -> None:
    result = CliRunner().invoke(cli, ["status", "--json"], env={"TWICE_LEDGER": ran})
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["units"]) == 6


def test_a_bad_environment_value_is_bad_input_naming_the_option(ran: str) -> None:
    result = CliRunner().invoke(cli, ["run", "x.py", "--interval", "2026-11-23"],
                                env={"TWICE_RUN_LEASE_TTL": "nan"})
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith("twice run: error: Invalid value for "
                                                     "'--lease-ttl'")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path", list(LEAVES))
def test_a_usage_error_is_one_line_in_the_one_form(path: str) -> None:
    result = CliRunner().invoke(cli, [*path.split()[1:], "--no-such-option"])
    assert result.exit_code == 2
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"{path}: error: No such option"), last
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ["status", "--ledger", "/nonexistent/ledger.db"],
    ["update", "--ledger", "/nonexistent/ledger.db"],
    ["handover", "--ledger", "/nonexistent/ledger.db"],
    ["report", "--ledger", "/nonexistent/ledger.db", "--json"],
    ["explain", "nothing", "--ledger", "/nonexistent/ledger.db"],
    ["verify", "--ledger", "/nonexistent/ledger.db"],
    ["run", "/nonexistent/pipeline.py", "--interval", "2026-11-23"],
    ["worker", "/nonexistent/pipeline.py", "--interval", "2026-11-23"],
    ["backfill", "/nonexistent/pipeline.py", "--interval", "2026-11-23"],
    ["fingerprint", "nosuch://x", "--partition", "2026-11-23"],
    ["decide", "--ledger", "/nonexistent/ledger.db"],
    ["policy", "show", "--max-attempts", "0"],
    ["airflow", "describe", "/nonexistent/pipeline.py"],
])
def test_every_error_line_has_the_one_form(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines()
              if line and not line.startswith((" ", "Usage:", "Try "))]
    assert errors and all(ERROR_LINE.match(line) for line in errors), result.stderr
    assert errors[0].startswith(f"twice {args[0]}"), errors


def test_the_page_lists_every_environment_variable_of_the_commands() -> None:
    page = (REPO / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert START in page and END in page
    assert render(page) == page, "run: python -m twice.cli.envdoc"
    names = [name for name, _, _ in rows()]
    assert len(names) == len(set(names))
    assert {"TWICE_RUN_DEADLINE", "TWICE_LOG_LEVEL", "TWICE_LOG_FORMAT",
            "TWICE_WORKER_POLL"} <= set(names)
