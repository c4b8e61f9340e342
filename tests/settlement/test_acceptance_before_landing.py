"""Acceptance decides, in full, before anything lands (issue 36, scenario 2).

Found by an adversarial check: a task with ``AcceptanceCriteria(min_rows=3,
max_nonfatal_errors=1)`` was accepted with 1 non-fatal error and 4 rows; a forced rerun
reported 2 non-fatal errors and 3 rows. The attempt was failed-permanent, yet the slice held
the 3 rejected rows, and ``twice verify`` blamed a change "behind twice's back". Only what
the rows alone decide was checked before the write; the non-fatal count only after it.

Every criterion is now decided on the slice as the write would leave it, inside the owned
write before it commits (``twice.engine.verification.check_before_landing``): a rejected output
leaves the accepted slice's rows, its commit record and the ledger's recorded version as
they were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.executor.helpers import ManualClock, day
from tests.executor.helpers import planner_decisions as planner
from twice.cli import cli
from twice.define.acceptance import AcceptanceCriteria
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine import verification
from twice.engine.executor import Executor
from twice.ledger import Ledger

ENGINES = ["duckdb", "sqlite", "postgres"]


def warehouse(engine: str, tmp_path: Path, request: pytest.FixtureRequest, keys: str) -> str:
    """A destination spec of ``engine``, partitioned by day, keyed by ``keys`` (if any)."""
    query = "partition_column=day" + (f"&key_columns={keys}" if keys else "")
    if engine == "duckdb":
        return f"duckdb://{tmp_path / 'w.duckdb'}?{query}#prices"
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 'w.sqlite'}?{query}#prices"
    if engine == "parquet":
        return f"parquet://{tmp_path / 'prices'}?{query}"
    if engine == "delta":
        return f"delta://{tmp_path / 'prices'}?{query}"
    if engine == "iceberg":
        return f"iceberg://{tmp_path / 'wh'}?{query}#ns.prices"
    url = request.getfixturevalue("postgres_url")
    return f"{url}?{query}#prices"


class Feed:
    """What the task produces on its next attempt: ``rows`` prices, ``nonfatal`` non-fatal
    errors recorded through the context, each row's price tagged with ``tag``."""

    def __init__(self) -> None:
        self.rows, self.nonfatal, self.tag = 4, 1, "accepted"

    def produce(self, ctx: TaskContext) -> pa.Table:
        if self.nonfatal:
            ctx.nonfatal("quotes without a price were skipped", self.nonfatal)
        return pa.table({
            "day": pa.array([ctx.interval.start.date()] * self.rows, pa.date32()),
            "isin": pa.array([f"X{i}" for i in range(self.rows)], pa.string()),
            "price": pa.array([f"{self.tag}-{i}" for i in range(self.rows)], pa.string()),
        })


def prices_pipeline(spec: str, feed: Feed, write: str,
                    criteria: AcceptanceCriteria | None = None) -> Pipeline:
    pipeline = Pipeline("quotes", schedule=Schedule.daily("UTC"))
    pipeline.task(
        name="prices", destination=spec, write=write, safe_repeat=True, timeout=30,
        acceptance=criteria or AcceptanceCriteria(min_rows=3, max_nonfatal_errors=1,
                                                  max_rejected_rows=None),
    )(feed.produce)
    return pipeline


def slice_state(spec: str) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    """The slice's rows (by isin) and its commit records (unit, generation, attempt, rows)."""
    with open_destination(spec) as dest:
        rows = sorted(dest.read_partition(day()).to_pylist(), key=lambda r: (r["isin"], r["price"]))
        records = [(r.uow_id, r.generation, r.attempt, r.row_count)
                   for r in dest.commit_records()]
    return rows, records


def versions(ledger: Ledger) -> list[Any]:
    """Every recorded version of every partition (one destination, one day here)."""
    return [record for latest in ledger.latest_fingerprints()
            for record in ledger.fingerprints(latest.destination, latest.partition)]


CASES = [(engine, write) for engine in ENGINES for write in ("replace", "upsert")] + [
    ("parquet", "replace"), ("duckdb", "append"), ("parquet", "append"),
    ("delta", "replace"), ("delta", "upsert"), ("delta", "append"),
    ("iceberg", "replace"), ("iceberg", "upsert"), ("iceberg", "append"),
]


@pytest.mark.parametrize(("engine", "write"), CASES)
def test_a_forced_rerun_over_its_non_fatal_limit_leaves_the_accepted_slice(
    tmp_path: Path, ledger: Ledger, ledger_url: str, clock: ManualClock, engine: str,
    write: str, request: pytest.FixtureRequest,
) -> None:
    spec = warehouse(engine, tmp_path, request, "isin,day" if write == "upsert" else "")
    feed = Feed()
    pipeline = prices_pipeline(spec, feed, write)
    first = Executor(pipeline, ledger, clock=clock).run(day()).unit("prices")
    assert first.outcome == "succeeded", (first.error, first.reason)
    accepted = slice_state(spec)
    assert len(accepted[0]) == 4 and len(accepted[1]) == 1
    [version] = versions(ledger)

    feed.rows, feed.nonfatal, feed.tag = 3, 2, "rejected"
    clock.advance(60)
    rerun = Executor(pipeline, ledger, clock=clock, force=["prices"]).run(day()).unit("prices")

    assert rerun.outcome == "failed-permanent", (rerun.error, rerun.reason)
    assert rerun.error is not None and rerun.error.startswith("AcceptanceFailed: ")
    assert "non-fatal errors is 2, criterion is non-fatal errors <= 1" in rerun.error
    assert slice_state(spec) == accepted  # rows and commit records as they were
    assert versions(ledger) == [version]  # no new recorded version
    [*_, last] = ledger.attempts(first.uow_id)
    assert (last.number, last.outcome) == (2, "failed-permanent")
    [*_, error] = ledger.errors(first.uow_id)
    assert error.classification == "permanent"
    assert error.error_class.endswith("AcceptanceFailed")
    verified = CliRunner().invoke(cli, ["verify", "--ledger", ledger_url])
    assert verified.exit_code == 0, verified.output  # no change "behind twice's back"
    # the rejected rerun is a cause to repair; a new run tries once more (the cause may have
    # been repaired), is refused the same way, and the accepted slice still stands
    assert planner(ledger_url, clock())["prices"]["decision"] == "repair-cause"
    clock.advance(60)
    plain = Executor(pipeline, ledger, clock=clock).run(day()).unit("prices")
    assert plain.outcome == "failed-permanent" and "repair the cause" in plain.reason
    assert [a.outcome for a in ledger.attempts(first.uow_id)] == [
        "succeeded", "failed-permanent", "failed-permanent"]
    assert slice_state(spec) == accepted and versions(ledger) == [version]

    # once the feed is repaired, a forced rerun replaces the slice and is verified
    feed.nonfatal, feed.tag = 0, "repaired"
    clock.advance(60)
    repaired = Executor(pipeline, ledger, clock=clock, force=["prices"]).run(day())
    assert repaired.unit("prices").outcome == "succeeded", repaired.unit("prices").error
    prices = sorted(r["price"] for r in slice_state(spec)[0])
    assert prices == {
        "replace": ["repaired-0", "repaired-1", "repaired-2"],
        "upsert": ["accepted-3", "repaired-0", "repaired-1", "repaired-2"],
        "append": ["accepted-0", "accepted-1", "accepted-2", "accepted-3", "repaired-0",
                   "repaired-1", "repaired-2"],
    }[write]
    assert CliRunner().invoke(cli, ["verify", "--ledger", ledger_url]).exit_code == 0


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_an_upsert_is_decided_on_the_slice_it_would_leave(
    tmp_path: Path, ledger: Ledger, clock: ManualClock, engine: str,
    request: pytest.FixtureRequest,
) -> None:
    """The rows alone pass (no null price among them), but the slice they would leave keeps a
    row with a null price from before the criterion was declared: refused before landing, as
    the check after the write would refuse it."""
    spec = warehouse(engine, tmp_path, request, "isin,day")
    with open_destination(spec) as dest:  # written before twice checked prices
        dest.upsert(pa.table({"day": pa.array([day().start.date()], pa.date32()),
                              "isin": ["X9"], "price": pa.array([None], pa.string())}),
                    partition=day(), stamp=None)
    feed = Feed()
    feed.nonfatal = 0
    strict = AcceptanceCriteria(min_rows=3, max_rejected_rows=None,
                                required_non_null=("price",))
    result = Executor(prices_pipeline(spec, feed, "upsert", strict), ledger,
                      clock=clock).run(day()).unit("prices")
    assert result.outcome == "failed-permanent"
    assert result.acceptance == ("nulls in 'price' is 1, criterion is nulls in 'price' <= 0",)
    rows, records = slice_state(spec)
    assert [(r["isin"], r["price"]) for r in rows] == [("X9", None)] and records == []
    assert ledger.latest_fingerprints() == []
    observed = ledger.latest_observation(result.uow_id, source="executor")
    assert observed is not None
    assert observed.detail["acceptance"]["refused_before_landing"] == "output"


@pytest.mark.parametrize("engine", ["duckdb", "parquet", "delta"])
def test_a_first_output_refused_leaves_no_table_behind(
    tmp_path: Path, ledger: Ledger, clock: ManualClock, engine: str,
    request: pytest.FixtureRequest,
) -> None:
    spec = warehouse(engine, tmp_path, request, "")
    feed = Feed()
    feed.rows = 2  # under min_rows=3
    pipeline = prices_pipeline(spec, feed, "replace")
    refused = Executor(pipeline, ledger, clock=clock).run(day()).unit("prices")
    assert refused.outcome == "failed-permanent"
    assert "rows is 2, criterion is rows >= 3" in (refused.error or "")
    with open_destination(spec) as dest:
        assert dest.schema() is None and dest.commit_records() == []


def test_a_write_the_task_makes_is_refused_once_over_its_non_fatal_limit(
    tmp_path: Path, ledger: Ledger, ledger_url: str, clock: ManualClock,
    request: pytest.FixtureRequest,
) -> None:
    """A task writing through ``open_destination`` itself: the non-fatal errors it recorded
    before a write decide that write (they can only grow)."""
    spec = warehouse("duckdb", tmp_path, request, "")
    feed = Feed()

    def writes_itself(ctx: TaskContext) -> dict[str, int]:
        table = feed.produce(ctx)  # records the non-fatal errors first
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(table, ctx.interval)
        return {"rejected_rows": 0}

    pipeline = Pipeline("quotes", schedule=Schedule.daily("UTC"))
    pipeline.task(name="prices", destination=spec, safe_repeat=True, timeout=30,
                  acceptance=AcceptanceCriteria(min_rows=3, max_nonfatal_errors=1))(
        writes_itself)
    assert Executor(pipeline, ledger, clock=clock).run(day()).unit("prices").ok
    accepted = slice_state(spec)
    feed.rows, feed.nonfatal, feed.tag = 3, 2, "rejected"
    clock.advance(60)
    rerun = Executor(pipeline, ledger, clock=clock, force=["prices"]).run(day()).unit("prices")
    assert rerun.outcome == "failed-permanent" and rerun.nonfatal == 2
    assert "non-fatal errors is 2" in (rerun.error or "")
    assert slice_state(spec) == accepted
    assert CliRunner().invoke(cli, ["verify", "--ledger", ledger_url]).exit_code == 0


def test_a_task_building_its_slice_in_several_writes_is_judged_on_the_slice_it_ends_with(
    tmp_path: Path, ledger: Ledger, clock: ManualClock, request: pytest.FixtureRequest,
) -> None:
    """Why a write the task makes itself is not decided on its rows: the slice may be built
    in several writes (two upserts here), and only the last leaves min_rows=3."""
    spec = warehouse("sqlite", tmp_path, request, "isin,day")
    feed = Feed()
    feed.nonfatal = 0

    def in_two_batches(ctx: TaskContext) -> dict[str, int]:
        table = feed.produce(ctx)
        with open_destination(ctx.destination) as dest:
            dest.upsert(table.slice(0, 2), partition=ctx.interval)
            dest.upsert(table.slice(2), partition=ctx.interval)
        return {"rejected_rows": 0}

    pipeline = Pipeline("quotes", schedule=Schedule.daily("UTC"))
    pipeline.task(name="prices", destination=spec, timeout=30,
                  acceptance=AcceptanceCriteria(min_rows=3))(in_two_batches)
    result = Executor(pipeline, ledger, clock=clock).run(day()).unit("prices")
    assert result.outcome == "succeeded", result.error
    assert len(slice_state(spec)[0]) == 4


def test_switching_the_rule_off_lets_the_rejected_output_land(
    tmp_path: Path, ledger: Ledger, ledger_url: str, clock: ManualClock,
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control: with ``check_before_landing`` (the one rule) switched off, the reported
    failure comes back, and the checks above catch it."""
    spec = warehouse("duckdb", tmp_path, request, "")
    feed = Feed()
    pipeline = prices_pipeline(spec, feed, "replace")
    assert Executor(pipeline, ledger, clock=clock).run(day()).unit("prices").ok
    accepted = slice_state(spec)
    monkeypatch.setattr(verification, "check_before_landing", lambda *a, **k: None)
    feed.rows, feed.nonfatal, feed.tag = 3, 2, "rejected"
    clock.advance(60)
    rerun = Executor(pipeline, ledger, clock=clock, force=["prices"]).run(day()).unit("prices")
    assert rerun.outcome == "failed-permanent"  # the check after the write still refuses it
    assert slice_state(spec) != accepted  # but the rejected rows landed
    assert CliRunner().invoke(cli, ["verify", "--ledger", ledger_url]).exit_code == 1


PROCESS_PIPELINE = '''
import json
from pathlib import Path

import pyarrow as pa

from twice import AcceptanceCriteria, Pipeline, Schedule

FEED = Path(__file__).with_name("feed.json")
pipeline = Pipeline("quotes", schedule=Schedule.daily("UTC"))


@pipeline.task(destination=SPEC, write="replace", safe_repeat=True, timeout=60,
               acceptance=AcceptanceCriteria(min_rows=3, max_nonfatal_errors=1))
def prices(ctx):
    feed = json.loads(FEED.read_text())
    ctx.nonfatal("quotes without a price were skipped", feed["nonfatal"])
    rows = feed["rows"]
    return pa.table({"day": pa.array([ctx.interval.start.date()] * rows, pa.date32()),
                     "isin": [f"X{i}" for i in range(rows)],
                     "price": [f"{feed['tag']}-{i}" for i in range(rows)]})
'''


def test_process_isolation_decides_before_landing_too(
    tmp_path: Path, ledger_url: str, request: pytest.FixtureRequest,
) -> None:
    """In a child process the attempt's stamp and admission travel with its context: the
    write is owned (a commit record) and a rejected output is refused there too."""
    import json

    from twice.define.load import load_pipeline

    spec = warehouse("duckdb", tmp_path, request, "")
    path = tmp_path / "quotes.py"
    path.write_text(PROCESS_PIPELINE.replace("SPEC", repr(spec)))
    feed = tmp_path / "feed.json"
    feed.write_text(json.dumps({"rows": 4, "nonfatal": 1, "tag": "accepted"}))
    pipeline = load_pipeline(path)
    with Ledger.open(ledger_url) as ledger:
        first = Executor(pipeline, ledger, isolation="process").run(day()).unit("prices")
        assert first.outcome == "succeeded", first.error
        accepted = slice_state(spec)
        assert len(accepted[1]) == 1  # owned: its commit record is in the destination
        feed.write_text(json.dumps({"rows": 3, "nonfatal": 2, "tag": "rejected"}))
        rerun = Executor(pipeline, ledger, isolation="process",
                         force=["prices"]).run(day()).unit("prices")
        assert rerun.outcome == "failed-permanent"
        assert "non-fatal errors is 2" in (rerun.error or "")
        assert slice_state(spec) == accepted
    assert CliRunner().invoke(cli, ["verify", "--ledger", ledger_url]).exit_code == 0
