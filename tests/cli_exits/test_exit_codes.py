"""Exit codes come from the error's type, in one place (twice.cli.exits)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from twice.cli import cli
from twice.cli.exits import BAD_INPUT, CONFLICT, FAILED, INTERRUPTED, exit_code_for
from twice.define.pipeline import PipelineError
from twice.destinations.commits import FencedWriteError, WriteStamp
from twice.errors import Interrupted, MissingExtraError, TwiceError, UnavailableError
from twice.ledger import Ledger
from twice.ledger.errors import LedgerError, LedgerStorageError, LedgerUnavailableError


@pytest.mark.parametrize(("error", "code"), [
    (PipelineError("task 'x': bad"), BAD_INPUT),
    (LedgerError("unknown unit"), BAD_INPUT),
    (LedgerUnavailableError("locked for 60 s"), FAILED),
    (LedgerStorageError("disk full"), FAILED),
    (UnavailableError("service down"), FAILED),
    (FencedWriteError(WriteStamp("u", "p/t/i", 1, 1, 3), 4, "sqlite://x"), CONFLICT),
    (Interrupted("stopped"), INTERRUPTED),
    (MissingExtraError("x needs the postgres extra", module="psycopg", extra="postgres"),
     BAD_INPUT),
    (TwiceError("other"), FAILED),
])
def test_each_error_type_has_one_exit_code(error: BaseException, code: int) -> None:
    assert exit_code_for(error) == code


def test_ctrl_c_in_task_code_is_recorded_and_exits_130(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.py"
    pipeline.write_text(
        "from twice.define.pipeline import Pipeline\n"
        "from twice.define.schedule import Schedule\n"
        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination='sqlite://{tmp_path}/w.db?partition_column=day#t')\n"
        "def t(ctx):\n"
        "    raise KeyboardInterrupt\n"
    )
    ledger = tmp_path / "l.db"
    result = CliRunner().invoke(cli, ["run", str(pipeline), "--interval", "2026-11-30",
                                      "--ledger", str(ledger), "--deadline", "none"])
    assert result.exit_code == INTERRUPTED
    assert "interrupted" in result.output and "Traceback" not in result.output
    with Ledger.open(str(ledger)) as opened:
        [unit] = opened.units()
        assert [a.outcome for a in opened.attempts(unit.uow_id)] == ["unknown"]


@pytest.mark.parametrize("fragment", ["?partition_column=day&partiton=x#t",
                                      "?partition_column=day#t;drop table x",
                                      "?partition_column=day#",
                                      "?partition_column=day&keep_previous=0#t",
                                      "?partition_column=day#a.b.c"])
@pytest.mark.parametrize("command", ["backfill", "run", "worker"])
def test_a_malformed_destination_spec_is_bad_input_and_records_nothing(
    tmp_path: Path, fragment: str, command: str
) -> None:
    """Found by probes: a typo'd option, an unsafe table name or no table made ``twice
    backfill`` exit 1 (a failure, which a scheduler retries forever), not 2 (bad input); and
    ``twice run`` and ``twice worker`` recorded a permanently failed attempt for each interval
    before saying so. Each now refuses the spec before the ledger opens."""
    path = tmp_path / "p.py"
    path.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('specs', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination='sqlite:///{tmp_path}/w.db{fragment}', write='replace',\n"
        "               safe_repeat=True)\n"
        "def t(ctx):\n"
        "    return pa.table({'day': [ctx.interval.start.date()], 'v': [1]})\n"
    )
    ledger = tmp_path / "l.db"
    result = CliRunner().invoke(cli, [command, str(path), "--start", "2024-01-01", "--end",
                                      "2024-01-03", "--ledger", str(ledger),
                                      "--deadline", "none"])
    assert result.exit_code == BAD_INPUT, result.output
    assert "Traceback" not in result.output
    if ledger.exists():  # the backfill opens its ledger to plan; nothing is recorded in it
        with Ledger.open(str(ledger)) as opened:
            assert opened.units() == []
    assert not (tmp_path / "w.db").exists()


def test_an_error_messages_own_lines_stay_under_its_first(tmp_path: Path) -> None:
    """Found by a probe: a pipeline file's import error holding a newline printed a second
    line of its own on stderr, which could pass for another message."""
    path = tmp_path / "bad.py"
    path.write_text("raise ValueError('first\\ntwice run: forged')\n")
    result = CliRunner().invoke(cli, ["run", str(path), "--interval", "2026-11-30",
                                      "--ledger", str(tmp_path / "l.db")])
    assert result.exit_code == BAD_INPUT
    assert not any(line.startswith("twice run: forged") for line in result.output.splitlines())
    assert "forged" in result.output


@pytest.mark.parametrize("option", [("--pool-ttl", "1e12"), ("--pool-ttl", "1e300"),
                                    ("--poll", "1e300")])
def test_worker_times_out_of_range_are_bad_input(tmp_path: Path, option: tuple[str, str]
                                                 ) -> None:
    """Found by a probe: ``--pool-ttl 1e12`` ended in an OverflowError traceback (the
    slot's expiry past year 9999); ``--poll 1e300`` would sleep for ever."""
    path = tmp_path / "p.py"
    path.write_text("from twice import Pipeline, Schedule\n"
                    "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
                    "@pipeline.task(safe_repeat=True, pool='db')\ndef t(ctx):\n    pass\n")
    result = CliRunner().invoke(cli, ["worker", str(path), "--interval", "2024-01-01",
                                      "--once", "--deadline", "none", "--ledger",
                                      str(tmp_path / "l.db"), *option])
    assert result.exit_code == BAD_INPUT, result.output
    assert option[0] in result.output and "Traceback" not in result.output


def test_a_lease_or_pool_ttl_past_a_day_is_refused_by_the_ledger(tmp_path: Path) -> None:
    from tests.ledger.ledger_helpers import make_uow

    with Ledger.open(str(tmp_path / "l.db")) as ledger:
        uow = ledger.record_unit(make_uow(1)).uow_id
        with pytest.raises(LedgerError, match="at most 86400"):
            ledger.acquire_lease(uow, "w", ttl_seconds=1e12)
        assert ledger.acquire_lease(uow, "w", ttl_seconds=86_400).acquired


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["update"]])
def test_output_to_a_full_disk_is_one_message_not_a_traceback(tmp_path: Path,
                                                              args: list[str]) -> None:
    """Found by a probe: ``twice status > /dev/full`` ended in an OSError traceback."""
    import subprocess
    import sys

    from tests.ledger.ledger_helpers import make_uow

    ledger = tmp_path / "l.db"
    with Ledger.open(str(ledger)) as opened:
        for day in range(1, 29):
            opened.record_unit(make_uow(day))
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "twice", *args, "--ledger", str(ledger)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == FAILED
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert "cannot write the output: No space left on device" in done.stderr
