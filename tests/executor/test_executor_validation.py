"""The validate-output step and reruns of stale successes.

An attempt that finished without error is recorded succeeded only after its output passed the
task's acceptance criteria (checked against the real destination) and its destination slice
was fingerprinted and recorded (``twice.engine.verification``); otherwise it is failed-permanent
with the reason as its error and its dependents do not run. ``reruns`` repeats a success the caller
knows is stale, and keeps a newer one, so racing reruns execute a unit once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from tests.executor.helpers import ManualClock, day, outcomes
from tests.executor.helpers import planner_decisions as planner

from twice.core.policy import RetryPolicy
from twice.define.acceptance import AcceptanceCriteria
from twice.define.pipeline import Pipeline, PipelineError, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote import reconcile_job, run_job
from twice.testing.fake_bigquery import FakeBigQuery


def table_spec(tmp_path: Path) -> str:
    return f"duckdb://{tmp_path / 'warehouse.duckdb'}?partition_column=day#positions"


def writer(rows: int, *, returned: Any = None, nonfatal: int = 0) -> Callable[[TaskContext], Any]:
    """A task that replaces its day with ``rows`` rows (one of them with a null isin)."""

    def write(ctx: TaskContext) -> Any:
        day_value = ctx.interval.start.date()
        table = pa.table({"day": pa.array([day_value] * rows, pa.date32()),
                          "isin": pa.array([None] + [f"X{i}" for i in range(1, rows)]
                                           if rows else [], pa.string())})
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(table, ctx.interval)
        for _ in range(nonfatal):
            ctx.nonfatal("one unparsable line skipped")
        return returned

    return write


def pipeline_with(tmp_path: Path, fn: Callable[[TaskContext], Any],
                  criteria: AcceptanceCriteria | None, **options: Any) -> Pipeline:
    pipeline = Pipeline("validated", schedule=Schedule.daily("UTC"))
    pipeline.task(name="load", destination=table_spec(tmp_path), acceptance=criteria,
                  timeout=30, **options)(fn)
    pipeline.task(name="report", depends_on="load", timeout=30)(lambda ctx: "ran")
    return pipeline


def test_output_that_passes_acceptance_is_recorded_succeeded_with_its_checks(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    criteria = AcceptanceCriteria(min_rows=3, max_rejected_rows=0)
    pipeline = pipeline_with(tmp_path, writer(3, returned={"rejected_rows": 0}), criteria)
    result = Executor(pipeline, ledger, clock=clock).run(day())
    load = result.unit("load")
    assert result.ok and load.acceptance == (
        "rows >= 3: 3 (ok)", "rejected rows <= 0: 0 (ok)", "non-fatal errors <= 0: 0 (ok)"
    )
    latest = ledger.latest_observation(load.uow_id, source="executor")
    assert latest is not None and latest.detail["acceptance"]["passed"] is True
    assert result.unit("report").outcome == "succeeded"


def test_output_that_fails_acceptance_is_failed_permanent_and_blocks_dependents(
    tmp_path: Path, ledger: Ledger, clock: ManualClock, ledger_url: str
) -> None:
    criteria = AcceptanceCriteria(min_rows=5, max_rejected_rows=None)
    # transient errors are retried, but a rejected output is not a transient error
    retry = RetryPolicy(max_attempts=3, transient=(ConnectionError,))
    pipeline = pipeline_with(tmp_path, writer(2), criteria, retry=retry)
    result = Executor(pipeline, ledger, clock=clock).run(day())
    load = result.unit("load")
    assert load.outcome == "failed-permanent" and load.attempts == 1
    assert load.error == "AcceptanceFailed: acceptance failed: rows is 2, criterion is rows >= 5"
    assert outcomes(ledger, load.uow_id) == ["failed-permanent"]
    [error] = ledger.errors(load.uow_id)
    assert error.classification == "permanent" and error.error_class.endswith("AcceptanceFailed")
    report = result.unit("report")
    assert report.outcome == "blocked" and "load (failed-permanent)" in report.reason
    assert planner(ledger_url, clock())["load"]["decision"] == "repair-cause"


def test_counts_the_load_did_not_report_fail_their_criterion(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """max_rejected_rows=0 with no rejected_rows reported cannot be confirmed: not a success."""
    pipeline = pipeline_with(tmp_path, writer(3), AcceptanceCriteria(max_rejected_rows=0))
    load = Executor(pipeline, ledger, clock=clock).run(day()).unit("load")
    assert load.outcome == "failed-permanent"
    assert "rejected rows was not reported" in (load.error or "")


def test_non_fatal_errors_and_nulls_are_read_from_the_ledger_and_the_destination(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    criteria = AcceptanceCriteria(max_rejected_rows=None, max_nonfatal_errors=1,
                                  required_non_null=("isin",))
    pipeline = pipeline_with(tmp_path, writer(4, nonfatal=2), criteria)
    load = Executor(pipeline, ledger, clock=clock).run(day()).unit("load")
    assert load.outcome == "failed-permanent" and load.nonfatal == 2
    assert load.acceptance == ("non-fatal errors is 2, criterion is non-fatal errors <= 1",
                               "nulls in 'isin' is 1, criterion is nulls in 'isin' <= 0")


def test_output_is_verified_after_success_only_and_events_tell_the_story(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    from twice.engine.events import (
        AttemptFinished,
        AttemptStarted,
        Event,
        OutputVerified,
        UnitSettled,
    )

    failures = iter([ConnectionError("flaky"), None])

    def flaky_then_writes(ctx: TaskContext) -> None:
        error = next(failures)
        if error is not None:
            raise error
        writer(2)(ctx)

    seen: list[Event] = []
    pipeline = pipeline_with(tmp_path, flaky_then_writes, None, safe_repeat=True,
                             retry=RetryPolicy(max_attempts=2, transient=(ConnectionError,)))
    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                      listeners=[seen.append]).run(day())
    load = result.unit("load")
    assert outcomes(ledger, load.uow_id) == ["failed-transient", "succeeded"]
    mine = [e for e in seen if e.task == "load"]
    assert [type(e) for e in mine] == [AttemptStarted, AttemptFinished, AttemptStarted,
                                       OutputVerified, AttemptFinished, UnitSettled]
    verified = mine[3]
    assert isinstance(verified, OutputVerified) and verified.attempt == 2
    assert verified.source == "commit record"  # taken inside the write transaction
    recorded = ledger.latest_fingerprint(table_spec(tmp_path), day().label)
    assert recorded is not None and recorded.uow_id == load.uow_id and recorded.attempt == 2
    assert recorded.row_count == 2 and verified.diff.checksum_after == recorded.checksum


def test_one_writer_per_embedded_file_on_every_path(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """Two independent tasks writing tables of one DuckDB file never overlap in one run."""
    inside = threading.Semaphore(1)
    overlaps: list[str] = []
    spec = f"duckdb://{tmp_path / 'wh.duckdb'}?partition_column=day"

    def writes(table: str) -> Callable[[TaskContext], None]:
        def task(ctx: TaskContext) -> None:
            if not inside.acquire(blocking=False):
                overlaps.append(table)
                return
            try:
                with open_destination(f"{spec}#{table}") as dest:
                    dest.replace_partition(pa.table({
                        "day": pa.array([ctx.interval.start.date()], pa.date32()),
                        "n": pa.array([1], pa.int64())}), ctx.interval)
            finally:
                inside.release()
        return task

    pipeline = Pipeline("files", schedule=Schedule.daily("UTC"))
    for table in ("a", "b", "c", "d"):
        pipeline.task(name=table, destination=f"{spec}#{table}", timeout=30,
                      safe_repeat=True)(writes(table))
    result = Executor(pipeline, ledger, clock=clock, max_workers=4).run(day())
    assert result.ok and overlaps == []


def test_acceptance_is_declared_against_a_destination(tmp_path: Path) -> None:
    pipeline = Pipeline("p", schedule=Schedule.daily("UTC"))
    with pytest.raises(PipelineError, match="acceptance criteria are checked against"):
        pipeline.task(name="a", acceptance=AcceptanceCriteria(min_rows=1))(lambda ctx: None)
    with pytest.raises(PipelineError, match=r"acceptance must be a twice\.AcceptanceCriteria"):
        pipeline.task(name="b", destination=table_spec(tmp_path),
                      acceptance={"min_rows": 1})(lambda ctx: None)


# -- reruns -------------------------------------------------------------------------------------


def counting_pipeline(runs: list[str]) -> Pipeline:
    pipeline = Pipeline("rerun", schedule=Schedule.daily("UTC"))
    pipeline.task(name="only", timeout=5, safe_repeat=True)(
        lambda ctx: runs.append(ctx.interval.label))
    return pipeline


def test_a_stale_success_is_run_again_in_a_new_run(
    ledger: Ledger, clock: ManualClock, ledger_url: str
) -> None:
    runs: list[str] = []
    pipeline = counting_pipeline(runs)
    first = Executor(pipeline, ledger, clock=clock).run(day()).unit("only")
    again = Executor(pipeline, ledger, clock=clock).run(day()).unit("only")
    assert runs == [day().label] and again.attempts == 0  # no rerun without asking
    rerun = Executor(pipeline, ledger, clock=clock,
                     reruns={first.uow_id: 1}).run(day()).unit("only")
    assert runs == [day().label] * 2
    assert rerun.outcome == "succeeded" and rerun.attempts == 1 and rerun.total_attempts == 2
    markers = [o for o in ledger.observations(first.uow_id) if o.state == "run-started"]
    assert markers[-1].detail["rerun_of"] == 1 and markers[-1].detail["first_attempt"] == 2
    assert planner(ledger_url, clock())["only"]["decision"] == "validate-output"


def test_a_success_newer_than_the_planned_one_is_kept(ledger: Ledger, clock: ManualClock) -> None:
    """Two reruns planned on attempt 1: the first to get there runs it, the other does not."""
    runs: list[str] = []
    pipeline = counting_pipeline(runs)
    uow_id = Executor(pipeline, ledger, clock=clock).run(day()).unit("only").uow_id
    planned = {uow_id: 1}
    winner = Executor(pipeline, ledger, clock=clock, reruns=planned).run(day()).unit("only")
    loser = Executor(pipeline, ledger, clock=clock, holder="late",
                     reruns=planned).run(day()).unit("only")
    assert len(runs) == 2 and winner.attempts == 1
    assert loser.outcome == "succeeded" and loser.attempts == 0
    assert "succeeded in attempt 2" in loser.reason


def test_a_rerun_of_a_remote_task_is_a_new_generation_and_really_runs_again(
    ledger: Ledger, clock: ManualClock
) -> None:
    """A deliberate rerun (stale success, --force) takes a new job generation: the service
    executes a new job instead of answering "duplicate" with the old one's result."""
    bq = FakeBigQuery(clock=clock, duration=1)
    pipeline = Pipeline("remote", schedule=Schedule.daily("UTC"))

    def reconcile(job_id: str, _ctx: TaskContext) -> RemoteState:
        return reconcile_job(bq, job_id)

    @pipeline.task(timeout=30, reconcile=reconcile, safe_repeat=True)
    def load(ctx: TaskContext) -> Any:
        return run_job(bq, ctx.job_id, {"day": ctx.interval.label}, poll_interval=1.0,
                       sleep=clock.sleep)

    first = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("load")
    rerun = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                     reruns={first.uow_id: 1}).run(day()).unit("load")
    assert rerun.outcome == "succeeded" and rerun.attempts == 1
    assert first.job_id is not None and first.job_id.endswith("_g1")
    assert rerun.job_id == first.job_id[:-1] + "2"
    assert sorted(bq.jobs) == sorted([first.job_id, rerun.job_id])  # two jobs really ran
    assert [g.state for g in ledger.job_generations(first.uow_id)] == ["succeeded"] * 2


@pytest.mark.parametrize("engine", ["duckdb", "sqlite"])
def test_a_rejected_output_twice_writes_never_replaces_the_accepted_slice(
    tmp_path: Path, ledger: Ledger, clock: ManualClock, engine: str, ledger_url: str
) -> None:
    """Found by a probe: a rerun's output failed acceptance (1 row, min_rows=3) yet had
    already replaced the 5 accepted rows, and ``twice verify`` then blamed a change "behind
    twice's back". With ``write=``, twice holds the rows before writing: whatever of the
    criteria the rows alone decide (rows of a replaced slice, required non-null columns) is
    checked first, and a rejected output is never written."""
    from click.testing import CliRunner

    from twice.cli import cli

    spec = f"{engine}:///{tmp_path / ('w.' + engine)}?partition_column=day#positions"
    if engine == "duckdb":
        spec = f"duckdb://{tmp_path / 'w.duckdb'}?partition_column=day#positions"
    produced = {"rows": 5, "isin": "X"}

    def load(ctx: TaskContext) -> pa.Table:
        n = produced["rows"]
        return pa.table({"day": pa.array([ctx.interval.start.date()] * n, pa.date32()),
                         "isin": pa.array([produced["isin"]] * n, pa.string())})

    def build(version: str) -> Pipeline:
        pipeline = Pipeline("validated", schedule=Schedule.daily("UTC"))
        pipeline.task(name="load", destination=spec, write="replace", safe_repeat=True,
                      input_version=lambda interval: version,
                      acceptance=AcceptanceCriteria(min_rows=3, required_non_null=("isin",)),
                      timeout=30)(load)
        return pipeline

    first = Executor(build("v0"), ledger, clock=clock).run(day()).unit("load")
    assert first.outcome == "succeeded", (first.reason, first.error)
    for rows, isin in ((1, "X"), (4, None)):  # too few rows; a null where none may be
        produced.update(rows=rows, isin=isin)
        rejected = Executor(build(f"v{rows}"), ledger, clock=clock).run(day()).unit("load")
        assert rejected.outcome == "failed-permanent", rejected.reason
        assert "AcceptanceFailed" in (rejected.error or "")
        with open_destination(spec) as dest:
            kept = dest.read_partition(day()).to_pylist()
        assert [r["isin"] for r in kept] == ["X"] * 5  # the accepted slice is untouched
    verified = CliRunner().invoke(cli, ["verify", "--ledger", ledger_url])
    assert verified.exit_code == 0, verified.output  # the recorded version still stands


def versioned(pipeline: Pipeline, spec: str, name: str, source: dict[str, int],
              column: str) -> None:
    """A task ``name`` replacing its day of table ``name`` with one row, ``column`` =
    ``source["v"]``, whose input version is that value (a new value is a new unit)."""

    def write(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], column: [source["v"]]})

    pipeline.task(name=name, destination=f"{spec}#{name}", write="replace", safe_repeat=True,
                  input_version=lambda interval: str(source["v"]))(write)


def test_a_dependent_left_behind_by_its_upstream_reads_never_run_not_verified(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: after an upstream reran with a changed output and its dependent did
    not run (``tasks=``, a worker stopped after one unit), status said every unit verified
    while the dependent's table was built from the old upstream rows. The dependent's new
    unit is recorded when the upstream succeeds: reports show it never run, the old one
    superseded, until it runs."""
    from twice.reports import gather

    source = {"v": 1}
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day"
    pipeline = Pipeline("stale", schedule=Schedule.daily("UTC"))
    versioned(pipeline, spec, "a", source, "v")

    @pipeline.task(destination=spec + "#b", write="replace", safe_repeat=True, depends_on="a")
    def b(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "v": [source["v"] * 2]})

    assert Executor(pipeline, ledger, clock=clock).run(day()).ok
    source["v"] = 2
    assert Executor(pipeline, ledger, clock=clock).run(day(), tasks=["a"]).ok
    health = {(u.unit.task, str(u.status.state)) for u in gather(ledger).units}
    assert ("b", "never-run") in health and ("b", "superseded") in health
    assert ("b", "verified") not in health
    assert Executor(pipeline, ledger, clock=clock).run(day(), tasks=["b"]).ok
    health = {(u.unit.task, str(u.status.state)) for u in gather(ledger).units}
    assert ("b", "verified") in health and ("b", "never-run") not in health


def test_an_upstream_column_renamed_reruns_its_dependents(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: an upstream column renamed (the table migrated, the change accepted)
    kept the same row count and checksum, so the dependent's input version did not change and
    it kept the old column while every report said verified. A partition whose recorded
    columns changed since its first version gives its dependents a new input version; one
    whose columns never changed keeps the version earlier releases gave it."""
    import duckdb

    spec = f"duckdb://{tmp_path / 'w.duckdb'}?partition_column=day"
    column = {"name": "v"}
    runs: list[str] = []

    def build() -> Pipeline:
        pipeline = Pipeline("renamed", schedule=Schedule.daily("UTC"))

        @pipeline.task(destination=spec + "#a", write="replace", safe_repeat=True,
                       transform_version=column["name"])
        def a(ctx: TaskContext) -> pa.Table:
            return pa.table({"day": [ctx.interval.start.date()], column["name"]: [7]})

        @pipeline.task(destination=spec + "#b", write="replace", safe_repeat=True,
                       depends_on="a")
        def b(ctx: TaskContext) -> pa.Table:
            runs.append("b")
            with open_destination(spec + "#a") as upstream:
                return upstream.read_partition(ctx.interval)

        return pipeline

    first = build()
    assert Executor(first, ledger, clock=clock).run(day()).ok and runs == ["b"]
    before = Executor(first, ledger, clock=clock).unit_for("b", day()).uow_id
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        con.execute("ALTER TABLE a RENAME COLUMN v TO w")
    column["name"] = "w"
    renamed = build()
    executor = Executor(renamed, ledger, clock=clock, accept_schema_change=True)
    assert executor.run(day(), tasks=["a"]).ok
    after = executor.unit_for("b", day()).uow_id
    assert after != before  # a new input version: the dependent is due
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        con.execute("ALTER TABLE b RENAME COLUMN v TO w")  # its own migration
    assert executor.run(day(), tasks=["b"]).ok and runs == ["b", "b"]
    with open_destination(spec + "#b") as dest:
        assert dest.read_partition(day()).column_names == ["day", "w"]


@pytest.mark.parametrize("write", ["replace", "upsert", "append"])
def test_checking_before_landing_reads_rows_as_the_write_does(
    tmp_path: Path, ledger: Ledger, clock: ManualClock, write: str
) -> None:
    """Found by a probe of the check before landing: an optional column all null in one
    interval, or no rows at all, failed with "the table does not exist yet" (the rows were
    read without the table's schema). They are read against it, as the write reads them."""
    spec = f"duckdb://{tmp_path / 'w.duckdb'}?partition_column=day&key_columns=id,day#t"
    shape = {"case": "full"}

    def out(ctx: TaskContext) -> Any:
        day_value = ctx.interval.start.date()
        if shape["case"] == "empty":
            return []
        comment = "x" if shape["case"] == "full" else None
        return [{"day": day_value, "id": i, "comment": comment} for i in range(3)]

    pipeline = Pipeline("shapes", schedule=Schedule.daily("UTC"))
    pipeline.task(name="t", destination=spec, write=write, safe_repeat=True,
                  acceptance=AcceptanceCriteria(min_rows=0, required_non_null=("id",)))(out)
    executor = Executor(pipeline, ledger, clock=clock)
    assert executor.run(day(0)).ok
    for case, offset in (("null comment", -1), ("empty", -2)):
        shape["case"] = case
        result = executor.run(day(offset)).unit("t")
        assert result.outcome == "succeeded", (case, result.error)


def test_a_run_of_a_whole_diamond_records_no_unit_it_does_not_run(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: with ``c`` reading ``a`` and ``b``, each upstream's success recorded
    a unit of ``c`` (``a`` new and ``b`` old, then both new) that never ran, shown superseded
    in every report. A dependent this run drives records its own unit, and none is recorded
    while another of its upstreams is due."""
    version = {"v": 1}
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day"
    pipeline = Pipeline("diamond", schedule=Schedule.daily("UTC"))
    versioned(pipeline, spec, "a", version, "x")
    versioned(pipeline, spec, "b", version, "y")

    @pipeline.task(destination=spec + "#c", write="replace", safe_repeat=True,
                   depends_on=["a", "b"])
    def c(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "z": [1]})

    assert Executor(pipeline, ledger, clock=clock).run(day()).ok
    version["v"] = 2
    assert Executor(pipeline, ledger, clock=clock).run(day()).ok
    units_of_c = [u for u in ledger.units(task="c")]
    assert len(units_of_c) == 2  # the first run's and this run's: nothing in between
    assert all(ledger.latest_attempt(u.uow_id) is not None for u in units_of_c)
    version["v"] = 3
    assert Executor(pipeline, ledger, clock=clock).run(day(), tasks=["a"]).ok
    assert len(ledger.units(task="c")) == 2  # b is due too: c's next unit is not known yet
    assert Executor(pipeline, ledger, clock=clock).run(day(), tasks=["b"]).ok
    assert len(ledger.units(task="c")) == 3  # now it is: recorded, never run


def test_an_arrow_stream_is_read_once_for_the_check_and_the_write(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: with ``acceptance=``, an object speaking the Arrow C stream protocol
    was consumed by the check before landing, and the write then got no rows (a replace
    emptied the slice; an append added nothing and succeeded)."""

    class Stream:
        def __init__(self, table: pa.Table) -> None:
            self.reader = table.to_reader()

        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return self.reader.__arrow_c_stream__(requested_schema)

    spec = f"duckdb://{tmp_path / 'w.duckdb'}?partition_column=day#t"

    def out(ctx: TaskContext) -> Stream:
        day_value = ctx.interval.start.date()
        return Stream(pa.table({"day": [day_value] * 3, "v": [1, 2, 3]}))

    pipeline = Pipeline("streams", schedule=Schedule.daily("UTC"))
    pipeline.task(name="t", destination=spec, write="replace", safe_repeat=True,
                  acceptance=AcceptanceCriteria(min_rows=3))(out)
    result = Executor(pipeline, ledger, clock=clock).run(day()).unit("t")
    assert result.outcome == "succeeded", result.error
    with open_destination(spec) as dest:
        assert dest.row_count(day()) == 3


def test_a_new_run_does_not_repeat_a_failed_side_effect(
    tmp_path: Path, ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: a task that is not safe_repeat acted, then failed transiently; the
    run stopped at "reconcile-effects", but any later run (twice run, backfill, a new Airflow
    DAG run) executed it again at once: the mail went out twice. Twice cannot see this task's
    effects, so a later run holds it until it is named (``repeat``)."""
    sent: list[int] = []
    pipeline = Pipeline("mail", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=3, transient=(ConnectionError,)))
    def notify(ctx: TaskContext) -> None:
        sent.append(ctx.attempt)  # the effect happens ...
        if ctx.attempt == 1:
            raise ConnectionError("gateway hung up after sending")  # ... then it fails

    first = Executor(pipeline, ledger, clock=clock).run(day()).unit("notify")
    assert first.next_decision == "reconcile-effects" and sent == [1]
    again = Executor(pipeline, ledger, clock=clock).run(day()).unit("notify")
    assert again.outcome == "held" and "--repeat notify" in again.reason
    assert sent == [1]
    named = Executor(pipeline, ledger, clock=clock, repeat=["notify"]).run(day()).unit("notify")
    assert named.outcome == "succeeded" and sent == [1, 2]
