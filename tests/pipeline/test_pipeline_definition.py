"""Defining tasks with the decorator, and every validation message naming task and field."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, PipelineError, RemoteState, Task, TaskContext
from twice.define.schedule import Schedule

LISBON = Schedule.daily("Europe/Lisbon")


def make(**kwargs: Any) -> Pipeline:
    kwargs.setdefault("schedule", LISBON)
    return Pipeline("funds_positions", **kwargs)


def noop(ctx: TaskContext) -> None:
    return None


def test_the_documented_example_defines_a_valid_pipeline() -> None:
    pipeline = Pipeline(
        "funds_positions",
        schedule=Schedule.daily("Europe/Lisbon"),
        workflow_timeout=timedelta(minutes=30),
        deadline=time(6, 0),
        owners={"escalation": "data-oncall@example.com"},
        description="Daily fund positions",
    )
    pipeline.pool("positions_db", slots=2)

    @pipeline.task(timeout=120)
    def extract(ctx: TaskContext) -> None:
        """Pull the day's positions from the source API."""

    @pipeline.task(
        retry=RetryPolicy(max_attempts=4, transient=(ConnectionError,)),
        timeout=60,
        pool="positions_db",
        slots=2,
        transform_version="v3",
        destination="duckdb:///wh.duckdb#positions",
        depends_on=["extract"],
        estimated_duration=20,
        validation_duration=5,
        input_partition="positions/{start:%Y-%m-%d}",
        acceptance=None,
        metadata={"team": "funds"},
    )
    def load(ctx: TaskContext) -> int:
        return 1

    assert pipeline.validate() == []
    task = pipeline.get_task("load")
    assert task.retry.max_attempts == 4
    assert task.timeout == 60.0 == task.retry.attempt_timeout
    assert (task.pool, task.slots, task.transform_version) == ("positions_db", 2, "v3")
    assert task.depends_on == ("extract",)
    assert (task.estimated_duration, task.validation_duration) == (20.0, 5.0)
    assert task.metadata == {"team": "funds"}
    extract_task = pipeline.get_task("extract")
    assert extract_task.description == "Pull the day's positions from the source API."
    assert pipeline.owners["escalation"] == "data-oncall@example.com"
    assert pipeline.workflow_timeout == 1800.0
    assert list(pipeline.tasks) == ["extract", "load"]
    assert "load" in pipeline and len(pipeline) == 2
    # the decorator hands the function back, so it stays testable on its own
    assert load(None) == 1  # type: ignore[arg-type]


def test_defaults_are_conservative() -> None:
    pipeline = make()
    pipeline.task(noop)
    task = pipeline.get_task("noop")
    assert task.retry.max_attempts == 1  # nothing retried unless asked
    assert task.timeout is None
    assert task.safe_repeat is False  # repeating side effects is an assertion, never assumed
    assert (task.pool, task.slots, task.transform_version) == (None, 1, "1")
    assert task.depends_on == ()
    warnings = pipeline.validate()
    assert warnings == [
        "task 'noop': no timeout; a hung attempt holds its slots until someone notices"
    ]


def test_timeout_fills_and_overrides_the_policy_attempt_timeout() -> None:
    pipeline = make()
    pipeline.task(name="a", timeout=timedelta(seconds=90))(noop)
    pipeline.task(name="b", retry=RetryPolicy(attempt_timeout=30), timeout=45)(noop)
    pipeline.task(name="c", retry=RetryPolicy(attempt_timeout=30))(noop)
    assert pipeline.get_task("a").retry.attempt_timeout == 90.0
    assert pipeline.get_task("b").timeout == 45.0
    assert pipeline.get_task("c").timeout == 30.0


def test_depends_on_accepts_a_single_name_functions_and_tasks() -> None:
    pipeline = make()

    @pipeline.task
    def extract(ctx: TaskContext) -> None: ...

    @pipeline.task(depends_on="extract")
    def transform(ctx: TaskContext) -> None: ...

    @pipeline.task(depends_on=[transform, pipeline.get_task("extract")])
    def load(ctx: TaskContext) -> None: ...

    assert pipeline.get_task("transform").depends_on == ("extract",)
    assert pipeline.get_task("load").depends_on == ("transform", "extract")


def test_depends_on_an_unregistered_function_is_refused() -> None:
    pipeline = make()
    with pytest.raises(PipelineError, match=r"task 'load': depends_on item .*noop.* is not a task"):
        pipeline.task(name="load", depends_on=[noop])(noop)


def test_add_task_for_generated_pipelines() -> None:
    pipeline = make()
    pipeline.add_task(Task.create(noop, name="gen_1", timeout=5))
    assert pipeline.get_task("gen_1").timeout == 5.0


# -- validation -------------------------------------------------------------------------------


def test_unknown_dependency_names_task_field_and_suggests() -> None:
    pipeline = make()
    pipeline.task(name="extract")(noop)
    pipeline.task(name="load", depends_on=["extrct"])(noop)
    with pytest.raises(PipelineError) as info:
        pipeline.validate()
    assert str(info.value) == (
        "task 'load': depends_on 'extrct' is not a task of pipeline 'funds_positions'; "
        "did you mean 'extract'? (tasks: extract, load)"
    )


def test_cycle_is_named() -> None:
    pipeline = make()
    pipeline.task(name="a", depends_on="c")(noop)
    pipeline.task(name="b", depends_on="a")(noop)
    pipeline.task(name="c", depends_on="b")(noop)
    with pytest.raises(PipelineError, match=r"dependency cycle .*: a -> c -> b -> a"):
        pipeline.validate()
    with pytest.raises(PipelineError, match="dependency cycle"):
        pipeline.topological_order()


def test_self_dependency_is_a_cycle() -> None:
    pipeline = make()
    pipeline.task(name="a", depends_on="a")(noop)
    with pytest.raises(PipelineError, match=r"dependency cycle .*: a -> a"):
        pipeline.validate()


def test_duplicate_task_names_fail_at_the_decorator() -> None:
    pipeline = make()
    pipeline.task(name="load")(noop)
    with pytest.raises(PipelineError, match=r"task 'load': defined twice in pipeline"):
        pipeline.task(name="load")(noop)


@pytest.mark.parametrize("timeout", [1800, 3600])
def test_task_timeout_must_be_smaller_than_the_workflow_timeout(timeout: int) -> None:
    pipeline = make(workflow_timeout=timedelta(minutes=30))
    pipeline.task(name="load", timeout=timeout)(noop)
    with pytest.raises(
        PipelineError,
        match=rf"task 'load': timeout {timeout} s must be smaller "
        r"than the workflow_timeout 1800 s",
    ):
        pipeline.validate()


def test_slots_beyond_pool_capacity() -> None:
    pipeline = make(pools={"positions_db": 2})
    pipeline.task(name="load", pool="positions_db", slots=3, timeout=5)(noop)
    with pytest.raises(
        PipelineError,
        match=r"task 'load': slots=3 exceeds pool 'positions_db' "
        r"capacity 2; it could never start",
    ):
        pipeline.validate()


def test_undeclared_pool() -> None:
    pipeline = make()
    pipeline.task(name="load", pool="positions_db", timeout=5)(noop)
    with pytest.raises(
        PipelineError,
        match=r"task 'load': pool 'positions_db' is not declared; "
        r"declare it with pipeline.pool",
    ):
        pipeline.validate()
    pipeline.pool("positions_db", slots=1)  # declaring it later is fine
    assert pipeline.validate() == []


def test_every_problem_is_reported_at_once() -> None:
    pipeline = make(workflow_timeout=60)
    pipeline.task(name="a", pool="nowhere", timeout=120)(noop)
    pipeline.task(name="b", depends_on="zzz", timeout=5)(noop)
    with pytest.raises(PipelineError) as info:
        pipeline.validate()
    assert len(info.value.problems) == 3
    assert str(info.value).startswith("pipeline definition has problems:\n  - task 'b'")


def test_empty_pipeline_is_invalid() -> None:
    with pytest.raises(PipelineError, match="has no tasks"):
        make().validate()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"estimated_duration": -1}, r"task 'load': estimated_duration: must be >= 0 seconds"),
        (
            {"validation_duration": timedelta(seconds=-5)},
            r"task 'load': validation_duration: must be >= 0 seconds",
        ),
        ({"timeout": 0}, r"task 'load': timeout: must be > 0 seconds"),
        ({"timeout": -3}, r"task 'load': timeout: must be > 0 seconds"),
        ({"timeout": float("inf")}, r"task 'load': timeout: must be finite"),
        ({"timeout": True}, r"task 'load': timeout: expected seconds or a timedelta"),
        ({"timeout": "60"}, r"task 'load': timeout: expected seconds or a timedelta"),
        ({"slots": 0, "pool": "db"}, r"task 'load': slots must be an integer >= 1"),
        ({"slots": 2}, r"task 'load': slots=2 needs a pool"),
        ({"retry": 3}, r"task 'load': retry must be a twice.RetryPolicy"),
        ({"transform_version": ""}, r"task 'load': transform_version must be a non-empty"),
        (
            {"input_partition": "positions/{strat:%Y}"},
            r"task 'load': input_partition template .* is invalid \(KeyError: 'strat'\)",
        ),
        ({"input_partition": 5}, r"task 'load': input_partition must be a str template"),
        ({"reconcile": "yes"}, r"task 'load': reconcile must be callable"),
        ({"safe_repeat": "yes"},
         r"task 'load': safe_repeat must be True, False or 'same-job-id', got 'yes'"),
        ({"pool": "bad pool"}, r"task 'load': pool: 'bad pool' is not a valid name"),
        ({"timout": 60}, r"task 'load': unknown option 'timout'; did you mean 'timeout'\?"),
    ],
)
def test_bad_task_fields_fail_at_the_decorator(options: dict[str, Any], message: str) -> None:
    pipeline = make()
    with pytest.raises(PipelineError, match=message):
        pipeline.task(name="load", **options)(noop)


@pytest.mark.parametrize(
    "name", ["", "has space", "dots.in.name", "x" * 65, "tab\t", "ends\n", "naïve", "<lambda>"]
)
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(PipelineError, match=r"task name: .* is not a valid name; use 1-64"):
        make().task(name=name)(noop)
    with pytest.raises(PipelineError, match=r"pipeline name: .* is not a valid name"):
        Pipeline(name, schedule=LISBON)
    with pytest.raises(PipelineError, match=r"pool: .* is not a valid name"):
        make().pool(name, slots=1)


def test_valid_names() -> None:
    pipeline = Pipeline("A-z_09", schedule=LISBON)
    pipeline.task(name="x" * 64)(noop)
    assert pipeline.pool("db-1", slots=1) == "db-1"


def test_lambda_needs_a_name() -> None:
    pipeline = make()
    with pytest.raises(PipelineError, match=r"'<lambda>' is not a valid name"):
        pipeline.task(lambda ctx: None)
    pipeline.task(name="inline")(lambda ctx: None)
    assert "inline" in pipeline


def test_task_function_must_take_the_context() -> None:
    def no_args() -> None: ...

    with pytest.raises(
        PipelineError,
        match=r"task 'no_args': the function must accept one "
        r"argument, the TaskContext",
    ):
        make().task(no_args)


def test_pipeline_fields_are_checked() -> None:
    with pytest.raises(PipelineError, match=r"workflow_timeout: must be > 0 seconds"):
        make(workflow_timeout=-5)
    with pytest.raises(PipelineError, match=r"schedule must be a twice.Schedule"):
        Pipeline("p", schedule="@daily")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match=r"deadline must be >= 0 after the interval end"):
        make(deadline=timedelta(hours=-1))
    with pytest.raises(PipelineError, match=r"deadline time must be naive"):
        make(deadline=time(6, tzinfo=UTC))
    with pytest.raises(PipelineError, match=r"deadline must be a timedelta"):
        make(deadline="06:00")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match=r"pool 'db': slots must be an integer >= 1"):
        make(pools={"db": 0})
    pipeline = make(pools={"db": 2})
    with pytest.raises(PipelineError, match=r"pool 'db': declared twice with different"):
        pipeline.pool("db", slots=3)


def test_warnings_do_not_block() -> None:
    pipeline = make(workflow_timeout=600)
    pipeline.task(name="slow", timeout=60, estimated_duration=90)(noop)
    pipeline.task(name="open")(noop)
    assert pipeline.validate() == [
        "task 'slow': estimated_duration 90 s is not below its timeout 60 s; most attempts "
        "would time out",
        "task 'open': no timeout; a hung attempt holds its slots until the workflow timeout",
    ]


# -- deadlines --------------------------------------------------------------------------------


def day(d: date) -> Interval:
    return LISBON.interval_for(d)


def test_deadline_after_interval_end() -> None:
    pipeline = make(deadline=timedelta(hours=6))
    assert pipeline.deadline_for(day(date(2026, 11, 30))) == datetime.fromisoformat(
        "2026-12-01T06:00+00:00"
    )
    assert make().deadline_for(day(date(2026, 11, 30))) is None


def test_deadline_as_local_time_of_day_follows_dst() -> None:
    pipeline = make(deadline=time(6, 0))
    # the interval ends at midnight; the first 06:00 after that is on the next morning
    assert pipeline.deadline_for(day(date(2026, 7, 1))) == datetime.fromisoformat(
        "2026-07-02T06:00+01:00"
    )
    # 2026-03-29 is the spring-forward day: 06:00 local is 05:00 UTC
    due = pipeline.deadline_for(day(date(2026, 3, 28)))
    assert due == datetime.fromisoformat("2026-03-29T05:00+00:00")
    july1 = day(date(2026, 7, 1))
    assert make(deadline=time(0, 0)).deadline_for(july1) == july1.end


def test_deadline_as_function() -> None:
    pipeline = make(deadline=lambda interval: interval.end + timedelta(hours=2))
    assert pipeline.deadline_for(day(date(2026, 11, 30))) == datetime.fromisoformat(
        "2026-12-01T02:00+00:00"
    )
    naive = make(deadline=lambda interval: datetime(2026, 12, 1, 6))
    with pytest.raises(PipelineError, match="expected a timezone-aware datetime"):
        naive.deadline_for(day(date(2026, 11, 30)))
    early = make(deadline=lambda interval: interval.start)
    with pytest.raises(PipelineError, match="is before the interval ends"):
        early.deadline_for(day(date(2026, 11, 30)))


# -- remote state and reconcile ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "state"),
    [
        ("succeeded", RemoteState.SUCCEEDED),
        ("NOT_FOUND", RemoteState.NOT_FOUND),
        ("not-found", RemoteState.NOT_FOUND),
        (RemoteState.RUNNING, RemoteState.RUNNING),
        (" Failed ", RemoteState.FAILED),
        ("unknown", RemoteState.UNKNOWN),
    ],
)
def test_remote_state_parse(value: object, state: RemoteState) -> None:
    assert RemoteState.parse(value) is state


def test_remote_state_values_and_finality() -> None:
    assert [s.value for s in RemoteState] == [
        "succeeded",
        "failed",
        "running",
        "unknown",
        "not-found",
    ]
    assert {s for s in RemoteState if s.is_final} == {RemoteState.SUCCEEDED, RemoteState.FAILED}
    with pytest.raises(ValueError, match="remote state must be one of"):
        RemoteState.parse("done")


def test_reconcile_result_is_coerced_and_checked() -> None:
    pipeline = make()
    seen: list[str] = []

    def ask(job_id: str, ctx: TaskContext) -> str:
        seen.append(job_id)
        return "running"

    pipeline.task(name="load", reconcile=ask)(noop)
    pipeline.task(name="bad", reconcile=lambda job_id, ctx: "done")(noop)
    pipeline.task(name="none")(noop)
    interval = day(date(2026, 11, 30))
    ctx = pipeline.context("load", interval)
    assert pipeline.get_task("load").remote_state(ctx.job_id, ctx) is RemoteState.RUNNING
    assert seen == [ctx.job_id]
    # without a reconciler there is no evidence either way
    none_ctx = pipeline.context("none", interval)
    assert pipeline.get_task("none").remote_state("x", none_ctx) is RemoteState.UNKNOWN
    bad_ctx = pipeline.context("bad", interval)
    with pytest.raises(PipelineError, match=r"task 'bad': reconcile returned 'done'"):
        pipeline.get_task("bad").remote_state("x", bad_ctx)


@pytest.mark.parametrize(("destination", "named"), [
    ("parquet:///tmp/w/positions?partition_column=day&key_columns=id", "Parquet datasets"),
    ("spark:///tmp/wh?partition_column=day&key_columns=id#t", "Spark Parquet tables"),
    ("sqlite:///tmp/w.db?partition_column=day#t", "key_columns"),
    ("postgresql://etl:s3cret@db/w?partition_column=day#public.t", "key_columns"),
    # the key must hold the partition column: an upsert by id alone would move a row with
    # the same id out of another interval's (verified) slice
    ("postgresql://etl:s3cret@db/w?partition_column=day&key_columns=id#public.t",
     "key_columns=id,day"),
    ("delta:///tmp/d?partition_column=day&key_columns=id", "'day' among its key_columns"),
])
def test_an_upsert_twice_cannot_do_is_refused_when_the_task_is_defined(
        destination: str, named: str) -> None:
    """Not at the first attempt of every interval: the destination cannot update rows, or has
    no key to update them by. The message names the field and never the password."""
    pipeline = Pipeline("p", schedule=Schedule.daily("UTC"))
    with pytest.raises(PipelineError, match="write='upsert'") as caught:
        pipeline.task(destination=destination, write="upsert", name="load")(lambda ctx: None)
    assert named in str(caught.value) and "s3cret" not in str(caught.value)


def test_an_upsert_with_its_key_is_accepted() -> None:
    pipeline = Pipeline("p", schedule=Schedule.daily("UTC"))
    for n, destination in enumerate([
        "sqlite:///tmp/w.db?partition_column=day&key_columns=id,day#t",
        "duckdb:///tmp/w.duckdb?key_columns=id#t",
        "delta:///tmp/d?partition_column=day&key_columns=day,id",
        "iceberg:///tmp/wh?key_columns=id#ns.t",
    ]):
        pipeline.task(destination=destination, write="upsert", name=f"t{n}")(lambda ctx: None)
    assert len(pipeline.tasks) == 4


def test_two_tasks_writing_one_table_are_refused_when_defined(tmp_path: Path) -> None:
    """Each interval's slice of a table is one task's output: a second task writing the same
    table (whatever its options) would replace the first one's rows, and both would still
    read as verified. Refused when the second task is defined; other tables of the same
    database are fine."""
    pipeline = Pipeline("p", schedule=Schedule.daily("UTC"))
    base = f"duckdb:///{tmp_path}/w.duckdb"
    pipeline.task(destination=f"{base}?partition_column=day#t", write="replace",
                  name="a")(lambda ctx: None)
    pipeline.task(destination=f"{base}?partition_column=day#other", write="replace",
                  name="c")(lambda ctx: None)
    with pytest.raises(PipelineError, match="the table task 'a' writes") as caught:
        pipeline.task(destination=f"{base}?partition_column=day&key_columns=id,day#t",
                      write="upsert", name="b")(lambda ctx: None)
    assert "task 'b'" in str(caught.value)
    assert sorted(pipeline.tasks) == ["a", "c"]


def test_twice_run_refuses_a_pipeline_with_two_writers_of_one_table(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from twice.cli import cli
    from twice.cli.exits import BAD_INPUT

    source = tmp_path / "two_writers.py"
    source.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('p6', schedule=Schedule.daily('UTC'))\n"
        f"DEST = 'duckdb:///{tmp_path}/w.duckdb?partition_column=day#t'\n"
        "@pipeline.task(destination=DEST, write='replace', safe_repeat=True)\n"
        "def a(ctx): return pa.table({'day': [ctx.interval.start.date()], 'x': [1]})\n"
        "@pipeline.task(destination=DEST, write='replace', safe_repeat=True)\n"
        "def b(ctx): return pa.table({'day': [ctx.interval.start.date()], 'x': [2]})\n"
    )
    done = CliRunner().invoke(cli, ["run", str(source), "--interval", "2026-11-01",
                                    "--deadline", "none", "--ledger", str(tmp_path / "l.db")])
    assert done.exit_code == BAD_INPUT, done.output
    assert "the table task 'a' writes" in done.output and "Traceback" not in done.output
    assert not (tmp_path / "w.duckdb").exists()  # nothing ran


def test_a_relative_file_destination_is_recorded_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a task records names the same file wherever the ledger is read from: a relative
    path is made absolute against the directory the pipeline is defined in (where it would
    be opened), so `twice verify` from another directory checks the right file."""
    from click.testing import CliRunner

    from twice.cli import cli

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    monkeypatch.chdir(work)
    source = work / "rel.py"
    source.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('p5', schedule=Schedule.daily('UTC'))\n"
        "@pipeline.task(destination='sqlite:data/rel.db?partition_column=day#t',\n"
        "               write='replace', safe_repeat=True)\n"
        "def t(ctx): return pa.table({'day': [ctx.interval.start.date()], 'x': [1]})\n"
    )
    ledger = str(tmp_path / "l.db")
    done = CliRunner().invoke(cli, ["run", str(source), "--interval", "2026-11-01",
                                    "--deadline", "none", "--ledger", ledger])
    assert done.exit_code == 0, done.output
    from twice.ledger import Ledger

    with Ledger.open(ledger) as opened:
        [unit] = opened.units()
    assert unit.destination == f"sqlite://{work}/data/rel.db?partition_column=day#t"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    checked = CliRunner().invoke(cli, ["verify", "--ledger", ledger])
    assert checked.exit_code == 0, checked.output
    assert not (elsewhere / "data").exists()
