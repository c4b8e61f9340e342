"""``twice fingerprint``: output, JSON, and exit 2 with one clear line for bad input."""

from __future__ import annotations

import json
from datetime import date

import pytest
from click.testing import CliRunner

from twice.cli import cli
from twice.destinations import open_destination
from twice.destinations.fingerprint import fingerprint

DAY = date(2026, 11, 30)


@pytest.fixture
def spec(engines) -> str:
    spec = engines.spec("sqlite", "pos", partition_column=None)
    dest = open_destination(spec, partition_column="day")
    dest.replace_partition([{"day": DAY, "id": i, "fund": "A"} for i in range(3)], DAY)
    return spec


def test_text_and_json_output(spec: str) -> None:
    runner = CliRunner()
    text = runner.invoke(cli, ["fingerprint", spec, "--partition", "day=2026-11-30"])
    assert text.exit_code == 0, text.output
    assert "rows       3" in text.output
    out = runner.invoke(cli, ["fingerprint", spec, "--partition",
                              "day=2026-11-30T00:00:00+00:00/2026-12-01T00:00:00+00:00",
                              "--key-columns", "id,day", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    expected = fingerprint(open_destination(spec, partition_column="day"), DAY, ["id", "day"])
    assert data["checksum"] == expected.checksum and data["row_count"] == 3
    assert data["columns"] == ["day", "id"] and data["partition"].startswith("day in [")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sqlite:///tmp/x.db#t; DROP TABLE y", "--partition", "day=1"], "table name"),
        (["{spec}", "--partition", "day=2026-11-30", "--key-columns", "id,x'y"], "column"),
        (["{spec}", "--partition", "day=not-a-date"], "does not fit column 'day'"),
        (["{spec}", "--partition", "day=2026-11-30T00:00Z/2026-11-30T00:00Z"], "zero-width"),
        (["nope://x#t", "--partition", "day=1"], "unknown destination scheme"),
        (["{spec}", "--partition", "2026-11-30"], "no partition_column"),
    ],
)
def test_bad_input_exits_2_without_traceback(spec: str, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["fingerprint", *[a.format(spec=spec) for a in args]])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_destination_that_cannot_be_reached_exits_1_without_traceback() -> None:
    """A destination whose directory is missing is unavailable (DestinationUnavailableError, an
    UnavailableError): a service that failed, exit 1, as docs/reference/cli.md says."""
    result = CliRunner().invoke(cli, ["fingerprint", "sqlite:///definitely/missing/dir/x.db#t",
                                      "--partition", "day=1"])
    assert result.exit_code == 1, result.output
    assert "directory /definitely/missing/dir missing" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
