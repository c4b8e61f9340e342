"""docs/reference/json-output.md is the contract of every command's ``--json``: each documented
command, run for real on a demo ledger, prints one JSON object whose top-level keys are exactly
the documented ones (a key added, removed or renamed without the page fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from twice.cli import cli

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reference" / "json-output.md"
EXAMPLE = REPO / "examples" / "funds_positions" / "pipeline.py"
HEADING = re.compile(r"^## `(twice [^`]*--json)`\s*$")

UNKNOWN = '''\
from twice import OutcomeUnknownError, Pipeline, Schedule

pipeline = Pipeline("mail", schedule=Schedule.daily("UTC"))


@pipeline.task()
def notify(ctx):
    raise OutcomeUnknownError("SMTP connection dropped after DATA: sent or not?")
'''


def documented() -> dict[str, set[str]]:
    sections: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = HEADING.match(line)
        if heading:
            current = sections.setdefault(heading.group(1), set())
        elif line.startswith("## "):
            current = None
        elif current is not None and line.startswith("| `"):
            current.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return sections


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("json")
    demo = CliRunner().invoke(cli, ["demo", "--workdir", str(root / "demo"), "--days", "2"])
    assert demo.exit_code == 0, demo.output
    mail = root / "mail.py"
    mail.write_text(UNKNOWN)
    ran = CliRunner().invoke(cli, ["run", str(mail), "--interval", "2026-11-23", "--ledger",
                                   str(root / "mail.db"), "--deadline", "none"])
    assert ran.exit_code == 1, ran.output
    return {"root": str(root), "ledger": str(root / "demo" / "run" / "ledger.db"),
            "work": str(root / "demo" / "run"), "mail": str(root / "mail.db"),
            "delta": _delta_table(root / "delta")}


def _delta_table(path: Path) -> str:
    """A Delta table with two versions of one partition, for ``twice diff`` (time travel)."""
    from datetime import date

    from twice.destinations import open_destination

    spec = f"delta://{path}?partition_column=day&key_columns=id"
    day = date(2026, 11, 23)
    with open_destination(spec) as dest:
        dest.replace_partition([{"day": day, "id": i, "v": i} for i in range(3)], day)
        dest.replace_partition([{"day": day, "id": i, "v": 2 * i} for i in range(1, 4)], day)
    return spec


def arguments(section: str, paths: dict[str, str]) -> list[str]:
    ledger, day = ["--ledger", paths["ledger"]], ["--interval", "2026-11-23"]
    by_command = {
        "twice run --json": ["run", str(EXAMPLE), *day, *ledger, "--deadline", "none"],
        "twice backfill --json": ["backfill", str(EXAMPLE), *day, *ledger],
        "twice backfill --dry-run --json": ["backfill", str(EXAMPLE), *day, *ledger, "--dry-run"],
        "twice worker --json": ["worker", str(EXAMPLE), *day, *ledger, "--deadline", "none",
                                "--once"],
        "twice status --json": ["status", *ledger],
        "twice explain --json": ["explain", "funds_positions.load.20261123", *ledger],
        "twice update --json": ["update", *ledger],
        "twice handover --json": ["handover", *ledger],
        "twice report --json": ["report", *ledger],
        "twice decide --ledger --json": ["decide", *ledger],
        "twice verify --json": ["verify", *ledger],
        "twice check --json": ["check", str(EXAMPLE), "--strict"],
        "twice fingerprint --json": [
            "fingerprint", f"duckdb://{paths['work']}/warehouse.duckdb?partition_column=day"
            "#positions", "--partition", "2026-11-23"],
        "twice diff --json": ["diff", paths["delta"], "--partition", "2026-11-23", "--from", "0",
                              "--to", "1"],
        "twice estimate --json": [
            "estimate", "--parquet", f"movements={REPO / 'examples' / 'movements' / 'data'}",
            "--sql", "SELECT fund_id FROM movements"],
        "twice intermediates --json": ["intermediates", *ledger],
        "twice policy show --json": ["policy", "show", "--max-attempts", "3"],
        "twice policy from TOOL --json": ["policy", "from", "airflow", "--retries", "2"],
        "twice airflow describe --json": ["airflow", "describe", str(EXAMPLE)],
        "twice resolve --json": ["resolve", "mail.notify.20261123", "--as", "failed", "--note",
                                 "no message in the SMTP server's log", "--ledger",
                                 paths["mail"]],
        "twice init --json": ["init", str(Path(paths["root"]) / "acme_orders")],
        "twice adopt --json": [  # the demo's own ledger owns it already: nothing is written
            "adopt", f"duckdb://{paths['work']}/warehouse.duckdb?partition_column=day"
            "#positions", *ledger, "--note", "already ours"],
    }
    return [*by_command[section], "--json"]


def test_the_page_documents_every_command_that_takes_json() -> None:
    from tests.cli_vocabulary.test_vocabulary import LEAVES, NO_JSON

    heads = {section.split(" --")[0].replace(" TOOL", "") for section in documented()}
    commands = {name for name in LEAVES if name not in NO_JSON}
    commands = {("twice policy from" if name.startswith("twice policy from ") else name)
                for name in commands}
    assert commands <= heads, commands - heads


def _skip_what_needs_more(section: str) -> None:
    """Commands these ledgers cannot run; their own tests check their documented keys."""
    if section.startswith("twice dbt "):
        pytest.skip("needs dbt: tests/on_dbt/test_dbt_backfill.py checks these keys")
    if section.startswith("twice cancel "):
        pytest.skip("needs a job in flight: tests/cli_cancel/test_cancel.py checks these keys")


@pytest.mark.parametrize("section", sorted(documented()))
def test_each_documented_command_prints_exactly_the_documented_keys(
        section: str, ledgers: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    _skip_what_needs_more(section)
    monkeypatch.setenv("TWICE_FUNDS_WORKDIR", ledgers["work"])
    monkeypatch.chdir(ledgers["root"])
    result = CliRunner().invoke(cli, arguments(section, ledgers))
    assert result.exit_code in (0, 1), result.output
    printed = json.loads(result.stdout)
    assert isinstance(printed, dict)
    assert set(printed) == documented()[section], (
        f"{section}: undocumented {sorted(set(printed) - documented()[section])}, "
        f"documented but absent {sorted(documented()[section] - set(printed))}")


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SNAKE = re.compile(r"[a-z][a-z0-9_]*")


def _identifier_keys(document: object) -> set[str]:
    """Every key at any depth that is an identifier (keys that are data, such as outcomes
    ``failed-permanent`` or health labels with spaces, are not a style)."""
    if isinstance(document, dict):
        return {key for key in document if IDENTIFIER.fullmatch(key)}.union(
            *(_identifier_keys(value) for value in document.values()))
    if isinstance(document, list):
        return set().union(*(_identifier_keys(value) for value in document))
    return set()


@pytest.mark.parametrize("section", sorted(documented()))
def test_every_key_of_every_command_is_snake_case(
        section: str, ledgers: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    _skip_what_needs_more(section)
    monkeypatch.setenv("TWICE_FUNDS_WORKDIR", ledgers["work"])
    monkeypatch.chdir(ledgers["root"])
    args = arguments(section, ledgers)
    if section == "twice init --json":  # a new directory: init never writes into a full one
        args = ["init", str(tmp_path / "acme_orders"), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    keys = _identifier_keys(json.loads(result.stdout))
    assert keys and not {key for key in keys if not SNAKE.fullmatch(key)}, section


def test_the_old_camel_case_keys_are_printed_on_request(
        ledgers: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from twice.cli.jsonkeys import RENAMED

    args = ["status", "--ledger", ledgers["ledger"], "--json"]
    now = json.loads(CliRunner().invoke(cli, args).stdout)
    monkeypatch.setenv("TWICE_JSON_KEYS", "camel")
    old = json.loads(CliRunner().invoke(cli, args).stdout)
    assert "as_of" in now and "asOf" in old and "as_of" not in old
    assert {RENAMED.get(key, key) for key in old["units"][0]} == set(now["units"][0])


def test_the_compatibility_table_is_the_renaming() -> None:
    from twice.cli.jsonkeys import RENAMED

    page = DOC.read_text(encoding="utf-8")
    table = page[page.index("<!-- renamed-keys"):]
    rows = dict(re.findall(r"^\| `([A-Za-z]+)` \| `([a-z_]+)` \|$", table, re.M))
    assert rows == RENAMED
