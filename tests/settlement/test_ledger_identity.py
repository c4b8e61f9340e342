"""A destination belongs to one ledger (issue 36, scenario 4).

Found by an adversarial check: ledger A wrote day 1 of a table; ledger B (a typo'd
``--ledger``) forced days 2-3 six times, then wrote day 1, and the write was accepted once B's
fencing tokens had passed A's. Tokens of two ledgers are not comparable: a destination now
belongs to the ledger that first wrote it (or adopted it last), and every slice refuses any
other ledger's writes, whatever the tokens, until ``twice adopt`` moves it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from twice.cli import cli
from twice.cli.exits import CONFLICT, FAILED
from twice.core.interval import Interval
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.destinations.commits import (
    ADOPT_MODE,
    LEDGER_AT_KEY,
    LEDGER_KEY,
    ForeignLedgerError,
    WriteStamp,
)
from twice.engine.executor import Executor
from twice.ledger import Ledger

FIRST = date(2026, 11, 2)
SCHEDULE = Schedule.daily("UTC")


def meter_day(n: int) -> Interval:
    """Day ``n`` (1-based) of the meter readings."""
    return SCHEDULE.interval_for(FIRST + timedelta(days=n - 1))


def readings(spec: str, tag: str) -> Pipeline:
    """A pipeline of our own: one owned ``replace`` write of three meter readings per day, each
    row tagged with ``tag`` so the test can tell whose rows a slice holds."""
    pipeline = Pipeline("meters", schedule=SCHEDULE)

    def read(ctx: TaskContext) -> pa.Table:
        day = ctx.interval.start.date()
        return pa.table({"day": pa.array([day] * 3, pa.date32()),
                         "meter": pa.array(["m1", "m2", "m3"]),
                         "kwh": pa.array([1.5, 2.5, 3.5]),
                         "by": pa.array([tag] * 3)})

    pipeline.task(name="readings", destination=spec, write="replace", safe_repeat=True)(read)
    return pipeline


def _spec(engine: str, tmp_path: Path, postgres: Callable[[], str]) -> str:
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#readings"
    if engine == "duckdb":
        return f"duckdb://{tmp_path / 'w.duckdb'}?partition_column=day#readings"
    if engine == "parquet":
        return f"parquet://{tmp_path / 'lake' / 'readings'}?partition_column=day"
    if engine == "delta":
        pytest.importorskip("deltalake")
        return f"delta://{tmp_path / 'readings'}?partition_column=day"
    if engine == "iceberg":
        pytest.importorskip("pyiceberg")
        return f"iceberg://{tmp_path}/wh?partition_column=day#ns.readings"
    assert engine == "postgres"
    return postgres().replace("postgresql://", "postgres://", 1) + "?partition_column=day#readings"


@pytest.fixture
def postgres(request: pytest.FixtureRequest) -> Callable[[], str]:
    """A fresh PostgreSQL database's URL, asked for only by the PostgreSQL case."""
    def create() -> str:
        make: Callable[[], str] = request.getfixturevalue("postgres_databases")
        return make()

    return create


def _slice(spec: str, n: int) -> list[str]:
    """Whose rows day ``n`` holds ([] for none)."""
    with open_destination(spec) as dest:
        if dest.schema() is None:
            return []
        return sorted(dest.read_partition(meter_day(n)).column("by").to_pylist())


ENGINES = ["sqlite", "duckdb", "postgres", "parquet", "delta", "iceberg"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_second_ledger_never_writes_a_destination_the_first_one_owns(
    engine: str, tmp_path: Path, postgres: Callable[[], str]
) -> None:
    spec = _spec(engine, tmp_path, postgres)
    with Ledger.open(str(tmp_path / "a.db")) as a:
        first = Executor(readings(spec, "A"), a).run(meter_day(1)).unit("readings")
        assert first.outcome == "succeeded", (first.reason, first.error)
        a_identity, a_url = a.identity, a.url
    with open_destination(spec) as dest:
        before = dest.commit_records()

    with Ledger.open(str(tmp_path / "b-typo.db")) as b:
        assert b.identity and b.identity != a_identity
        for _ in range(6):  # forced again and again: B's token sequence passes A's
            run = Executor(readings(spec, "B"), b, force=["readings"]).run(
                [meter_day(2), meter_day(3)])
            for unit in run.units:
                assert unit.outcome != "succeeded", unit
                assert "ForeignLedgerError" in (unit.error or ""), unit.error
        assert b.next_fencing_token() > max(r.token for r in before)
        late = Executor(readings(spec, "B"), b, force=["readings"]).run(meter_day(1))
        refused = late.unit("readings")
        assert refused.outcome != "succeeded"
        message = refused.error or ""
        assert "ForeignLedgerError" in message
        for named in (a_identity, a_url, b.identity, b.url):
            assert named in message  # both ledgers, by identity and where they are
        assert "adopt DESTINATION --ledger URL" in message  # ("twice" is masked where
        # it is the test database password)

    # nothing B did landed: day 1 holds A's rows, days 2-3 nothing, no record of B's
    assert _slice(spec, 1) == ["A"] * 3
    assert _slice(spec, 2) == _slice(spec, 3) == []
    with open_destination(spec) as dest:
        after = dest.commit_records()
    assert [r.to_dict() for r in after] == [r.to_dict() for r in before]
    assert {r.ledger for r in after} == {a_identity}


def _stamp(ledger: Ledger, uow: str, n: int, token: int) -> WriteStamp:
    return WriteStamp(uow_id=uow, fence_key=f"meters/readings/{meter_day(n).label}",
                      generation=1, attempt=1, token=token, ledger=ledger.identity,
                      ledger_at=ledger.url)


def test_a_foreign_write_through_the_cli_exits_with_the_conflict_code(tmp_path: Path) -> None:
    """``twice run`` of the reported scenario: the refused day is a failed unit, so the run
    exits 1 and says why (as any refused write of a unit); the error's type is in the
    ``ConflictError`` family, exit 3 when it ends a command itself."""
    pipeline = tmp_path / "meters.py"
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#readings"
    pipeline.write_text(
        "import pyarrow as pa\n"
        "from twice.define.pipeline import Pipeline\n"
        "from twice.define.schedule import Schedule\n"
        "pipeline = Pipeline('meters', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination={spec!r}, write='replace', safe_repeat=True)\n"
        "def readings(ctx):\n"
        "    return pa.table({'day': pa.array([ctx.interval.start.date()], pa.date32()),\n"
        "                     'kwh': pa.array([1.0])})\n"
    )
    runner = CliRunner()

    def run(ledger: str, *extra: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["run", str(pipeline), "--interval", "2026-11-02",
                                     "--ledger", ledger, "--deadline", "none", *extra])
        return result.exit_code, result.output

    code, output = run(str(tmp_path / "a.db"))
    assert code == 0, output
    code, output = run(str(tmp_path / "b.db"), "--force")
    assert code == FAILED and "Traceback" not in output
    assert "ForeignLedgerError" in output and "belongs to ledger" in output, output
    assert "adopt DESTINATION --ledger URL" in output, output

    with Ledger.open(str(tmp_path / "a.db")) as a, Ledger.open(str(tmp_path / "b.db")) as b:
        with open_destination(spec) as dest, pytest.raises(ForeignLedgerError) as caught:
            dest.replace_partition([{"day": FIRST, "kwh": 9.0}], meter_day(1),
                                   stamp=_stamp(b, "meters.readings.x", 1, 10**6))
        from twice.cli.exits import exit_code_for

        assert exit_code_for(caught.value) == CONFLICT
        assert caught.value.owner == a.identity


@pytest.mark.parametrize("engine", ["sqlite", "postgres", "parquet"])
def test_adopt_moves_a_destination_to_another_ledger_and_records_it(
    engine: str, tmp_path: Path, postgres: Callable[[], str]
) -> None:
    spec = _spec(engine, tmp_path, postgres)
    a_path, b_path = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    with Ledger.open(a_path) as a:
        for n in (1, 2):
            done = Executor(readings(spec, "A"), a).run(meter_day(n)).unit("readings")
            assert done.outcome == "succeeded", done.error
        a_identity = a.identity
    with open_destination(spec) as dest:
        a_top = max(r.token for r in dest.commit_records())
    with Ledger.open(b_path):
        pass  # B exists (a restored backup, say) and has handed out few tokens

    runner = CliRunner()
    missing_note = runner.invoke(cli, ["adopt", spec, "--ledger", b_path])
    assert missing_note.exit_code == 2 and "--note" in missing_note.output
    adopted = runner.invoke(cli, ["adopt", spec, "--ledger", b_path, "--note",
                                  "ledger restored from backup", "--operator", "ops-kim"])
    assert adopted.exit_code == 0, adopted.output
    assert a_identity in adopted.output
    again = runner.invoke(cli, ["adopt", spec, "--ledger", b_path, "--note", "again"])
    assert again.exit_code == 0 and "already belongs" in again.output

    with Ledger.open(b_path) as b:
        [record] = b.adoptions()
        assert (record.previous, record.operator, record.note) == (
            a_identity, "ops-kim", "ledger restored from backup")
        with open_destination(spec) as dest:
            [adoption] = [r for r in dest.commit_records() if r.mode == ADOPT_MODE]
        assert adoption.ledger == b.identity and adoption.token == record.token
        assert adoption.token > a_top  # B's later writes are never fenced by A's tokens
        for n in (1, 3):  # B now writes every slice, old and new
            done = Executor(readings(spec, "B"), b, force=["readings"]).run(
                meter_day(n)).unit("readings")
            assert done.outcome == "succeeded", done.error
    assert _slice(spec, 1) == _slice(spec, 3) == ["B"] * 3

    with Ledger.open(a_path) as a:
        refused = Executor(readings(spec, "A"), a, force=["readings"]).run(
            meter_day(2)).unit("readings")
        assert refused.outcome != "succeeded"
        assert "ForeignLedgerError" in (refused.error or "")
    assert _slice(spec, 2) == ["A"] * 3  # A's refused write changed nothing


def test_records_from_before_ledger_identities_do_not_block_and_the_next_write_claims(
    tmp_path: Path,
) -> None:
    """A table written before ledgers had an identity (its records name none) belongs to no
    ledger: the next identified write claims it, and from then on it is refused to others."""
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#readings"
    with Ledger.open(str(tmp_path / "old.db")) as old:
        done = Executor(readings(spec, "old"), old).run(meter_day(1)).unit("readings")
        assert done.outcome == "succeeded"
    with sqlite3.connect(tmp_path / "w.db") as conn:  # as an earlier twice left it
        conn.execute(f"UPDATE twice_commits SET extra = json_remove(extra, '$.{LEDGER_KEY}', "
                     f"'$.{LEDGER_AT_KEY}')")
    with open_destination(spec) as dest:
        assert [r.ledger for r in dest.commit_records()] == [""]

    with Ledger.open(str(tmp_path / "new.db")) as new:
        done = Executor(readings(spec, "new"), new, force=["readings"]).run(
            meter_day(1)).unit("readings")
        assert done.outcome == "succeeded", done.error
        new_identity = new.identity
    assert _slice(spec, 1) == ["new"] * 3
    with Ledger.open(str(tmp_path / "third.db")) as third:
        refused = Executor(readings(spec, "third"), third).run(meter_day(2)).unit("readings")
        assert "ForeignLedgerError" in (refused.error or "")
        assert new_identity in (refused.error or "")


def test_a_ledger_keeps_its_identity_and_an_older_ledger_gets_one_when_migrated(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "l.db")
    with Ledger.open(path) as ledger:
        identity = ledger.identity
    with Ledger.open(path) as ledger:
        assert ledger.identity == identity and len(identity) == 32
    with sqlite3.connect(path) as conn:  # as schema version 3 left it
        conn.execute("DROP TABLE twice_ledger")
        conn.execute("DROP TABLE twice_adoptions")
        conn.execute("DELETE FROM twice_schema WHERE version = 4")
    with Ledger.open(path, read_only=True) as read:
        assert read.identity == ""
    with Ledger.open(path) as ledger:
        assert ledger.identity and ledger.identity != identity
    assert os.path.getsize(path) > 0


@pytest.mark.parametrize("engine", ["sqlite", "parquet"])
def test_the_rule_is_one_function_and_switching_it_off_lets_the_second_ledger_in(
    engine: str, tmp_path: Path, postgres: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control a simulation uses: with ``commits.check_ledger`` switched off, the
    reported failure comes back (B's new days land at once, whatever the tokens)."""
    from twice.destinations import commits

    spec = _spec(engine, tmp_path, postgres)
    with Ledger.open(str(tmp_path / "a.db")) as a:
        assert Executor(readings(spec, "A"), a).run(meter_day(1)).unit("readings").ok
    monkeypatch.setattr(commits, "check_ledger", lambda stamp, owner, where: None)
    with Ledger.open(str(tmp_path / "b.db")) as b:
        landed = Executor(readings(spec, "B"), b).run(meter_day(2)).unit("readings")
        assert landed.outcome == "succeeded", landed.error
    assert _slice(spec, 2) == ["B"] * 3


def test_adopting_a_destination_that_does_not_exist_is_refused_and_creates_nothing(
    tmp_path: Path,
) -> None:
    with Ledger.open(str(tmp_path / "l.db")):
        pass
    typo = tmp_path / "wharehouse.db"
    result = CliRunner().invoke(cli, ["adopt", f"sqlite:///{typo}?partition_column=day#t",
                                      "--ledger", str(tmp_path / "l.db"), "--note", "move"])
    assert result.exit_code == 2, result.output
    assert "DESTINATION" in result.output and "nothing to adopt" in result.output
    assert "Traceback" not in result.output and not typo.exists()
    with Ledger.open(str(tmp_path / "l.db")) as ledger:
        assert ledger.adoptions() == []


def test_after_adoption_an_unknown_attempt_is_not_settled_by_the_old_ledgers_record(
    tmp_path: Path,
) -> None:
    """The same task and day is the same unit id under both ledgers: the adopting ledger's
    attempt 1, cut off before it wrote, must not be settled "written" by the record ledger A's
    attempt 1 left in the destination (it is A's write, not this attempt's)."""
    from twice.errors import OutcomeUnknownError

    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#readings"
    a_path, b_path = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    with Ledger.open(a_path) as a:
        assert Executor(readings(spec, "A"), a).run(meter_day(1)).ok
    with Ledger.open(b_path):
        pass
    adopted = CliRunner().invoke(cli, ["adopt", spec, "--ledger", b_path, "--note", "restore"])
    assert adopted.exit_code == 0, adopted.output

    b_pipeline = readings(spec, "B")
    task = b_pipeline.get_task("readings")
    cut: list[int] = []

    def cut_off_once(ctx: TaskContext) -> pa.Table:
        if not cut:
            cut.append(1)
            raise OutcomeUnknownError("connection lost before the rows were sent")
        return task.fn(ctx)  # type: ignore[no-any-return]

    flaky = Pipeline("meters", schedule=SCHEDULE)
    flaky.task(name="readings", destination=spec, write="replace", safe_repeat=True)(
        cut_off_once)
    with Ledger.open(b_path) as b:
        first = Executor(flaky, b).run(meter_day(1)).unit("readings")
        second = Executor(flaky, b).run(meter_day(1)).unit("readings")
        outcomes = [attempt.outcome for attempt in b.attempts(second.uow_id)]
    assert first.uow_id == second.uow_id
    assert outcomes == ["failed-transient", "succeeded"], (first.reason, second.reason)
    assert _slice(spec, 1) == ["B"] * 3
