"""Backfill behaviour on the real example: DuckDB warehouse, SQLite ledger, no mocks."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.backfill import helpers

from twice.drivers.backfill import plan_backfill, run_backfill
from twice.ledger import Ledger


@pytest.fixture
def setup(tmp_path: Path):
    root = helpers.make_workdir(tmp_path / "wh")
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    pipeline = helpers.example().build_pipeline(root)
    yield root, ledger, pipeline
    ledger.close()


def test_backfill_twice_gives_identical_fingerprints_and_no_duplicates(setup) -> None:
    root, ledger, pipeline = setup
    spans = helpers.intervals(3)
    first = run_backfill(pipeline, ledger, spans, concurrency=2)
    assert first.ok and first.counts() == {"succeeded": 12}
    before, rows_before = helpers.fingerprints(root, spans), helpers.contents(root)
    second = run_backfill(pipeline, ledger, spans, concurrency=3, force=True)
    assert second.ok and second.counts() == {"succeeded": 12}
    assert helpers.fingerprints(root, spans) == before
    assert helpers.contents(root) == rows_before
    assert helpers.duplicates(root) == 0
    assert {d.verdict for d in second.diffs} == {"unchanged"}
    assert all(d.version == 2 and d.rows_before == d.rows_after for d in second.diffs)
    diff = ledger.fingerprint_diff(pipeline.get_task("load").destination, spans[0].label)
    assert diff is not None and diff.checksum_changed is False and diff.row_delta == 0


def test_dependents_rerun_for_the_same_intervals(setup) -> None:
    _, ledger, pipeline = setup
    spans = helpers.intervals(2)
    run_backfill(pipeline, ledger, spans)
    result = run_backfill(pipeline, ledger, spans, tasks=["transform"], force=True)
    assert result.plan.dependents == ("load", "aggregate")
    ran = {(r.task, r.interval) for r in result.runs if r.status == "succeeded"}
    # the forced transform wrote the same rows: its dependents' inputs did not change
    assert ran == {("transform", s) for s in spans}
    follow = {(r.task, r.status) for r in result.runs if r.task != "transform"}
    assert follow == {("load", "skipped"), ("aggregate", "skipped")}
    assert not any(r.task == "extract" for r in result.runs)


def test_resume_skips_verified_intervals_and_force_reruns(setup) -> None:
    root, ledger, pipeline = setup
    spans = helpers.intervals(3)
    run_backfill(pipeline, ledger, spans)
    again = run_backfill(pipeline, ledger, spans)
    assert again.counts() == {"skipped": 12}
    # tamper with one partition behind twice's back: only that unit and its direct dependent
    # rerun (the dependent may have read the tampered rows: twice cannot tell when they
    # changed); the dependent's output comes out the same, so nothing follows it
    import duckdb

    con = duckdb.connect(str(root / "warehouse.duckdb"))
    con.execute("DELETE FROM positions WHERE day = DATE '2026-11-24' AND fund_id = 'FUND_A'")
    con.close()
    before = helpers.contents(root)
    # a plain resume decides verified units from the ledger alone: the drift waits for
    # twice verify, or for a backfill that asks to measure untouched partitions
    assert run_backfill(pipeline, ledger, spans).counts() == {"skipped": 12}
    assert helpers.contents(root) == before
    resumed = run_backfill(pipeline, ledger, spans, verify_untouched=True)
    ran = sorted((r.interval.start.day, r.task) for r in resumed.runs if r.status == "succeeded")
    readers = [t.name for t in pipeline if "load" in t.depends_on]
    assert ran == sorted([(24, "load"), *((24, name) for name in readers)])
    assert {r.status for r in resumed.runs if r.interval != spans[1]} == {"skipped"}
    assert helpers.contents(root) != before  # the deleted rows are back
    forced = run_backfill(pipeline, ledger, spans, force=True)
    assert forced.counts() == {"succeeded": 12}


def test_dry_run_plan_changes_nothing(setup) -> None:
    root, ledger, pipeline = setup
    spans = helpers.intervals(2)
    plan = plan_backfill(pipeline, ledger, spans)
    assert [i.action for i in plan.items] == ["run"] * 8
    assert ledger.units() == [] and not (root / "warehouse.duckdb").exists()


def test_a_first_backfill_reports_no_new_input_version(setup) -> None:
    """Dependents are planned before their upstream ran, so the unit they run as differs from
    the one planned; with no earlier unit for the task and interval, nothing "changed"."""
    _, ledger, pipeline = setup
    result = run_backfill(pipeline, ledger, helpers.intervals(2))
    assert result.ok
    assert [r for r in result.runs if r.new_input_version] == []
    assert result.to_dict()["new_input_versions"] == []


def test_source_change_is_a_new_input_version(setup) -> None:
    root, ledger, pipeline = setup
    spans = helpers.intervals(3)
    run_backfill(pipeline, ledger, spans)
    old = pipeline.unit_of_work("extract", spans[1])
    helpers.example().source.write_day(root / "source", spans[1].start.date(), revision=1)
    new = pipeline.unit_of_work("extract", spans[1])
    assert new.input_version != old.input_version and new.uow_id != old.uow_id
    plan = plan_backfill(pipeline, ledger, spans)
    changed = [i for i in plan.items if i.action == "run"]
    assert changed[0].task == "extract" and changed[0].new_input_version
    assert "source changed" in changed[0].reason
    result = run_backfill(pipeline, ledger, spans)
    followers = result.to_dict()["new_input_versions"]
    assert followers[0] == new.uow_id  # then transform, load, aggregate: their input changed
    assert [ledger.unit(u).task for u in followers] == ["extract", "transform", "load",
                                                         "aggregate"]
    assert ledger.unit(new.uow_id) is not None and ledger.unit(old.uow_id) is not None
    extract = next(r for r in result.runs if r.task == "extract" and r.status == "succeeded")
    assert extract.diff is not None and extract.diff.checksum_changed
    assert sum(r.status == "succeeded" for r in result.runs) == 4


def test_schema_change_is_refused(setup) -> None:
    root, ledger, pipeline = setup
    spans = helpers.intervals(3)
    run_backfill(pipeline, ledger, spans)
    before = helpers.contents(root)
    v2 = helpers.example().build_pipeline(root, transform_version="2")
    result = run_backfill(v2, ledger, spans)
    assert not result.ok and result.refusal is not None
    assert "schema" in result.refusal and "--accept-schema-change" in result.refusal
    assert helpers.contents(root) == before  # the destination refused atomically
    first = [(r.task, r.status) for r in result.runs if r.interval == spans[0]]
    assert first == [("extract", "skipped"), ("transform", "refused"), ("load", "blocked"),
                     ("aggregate", "blocked")]  # nothing ran on the refused output
    # later intervals never started: their verified extract stays skipped, the rest blocked
    later = [r.status for r in result.runs if r.interval != spans[0]]
    assert later == ["skipped", "blocked", "blocked", "blocked"] * 2


def test_faults_are_retried_and_reconciled_without_duplicates(setup) -> None:
    root, ledger, _ = setup
    faults = helpers.example().FaultPlan(
        transient_extract={helpers.START: 2}, lost_ack_load={helpers.START})
    pipeline = helpers.example().build_pipeline(root, faults)
    result = run_backfill(pipeline, ledger, helpers.intervals(2))
    assert result.ok
    extract = next(r for r in result.runs if r.task == "extract")
    assert [o for _, o in extract.attempts] == ["failed-transient"] * 2 + ["succeeded"]
    load = next(r for r in result.runs if r.task == "load")
    assert load.reconciled and load.reconciled[0].endswith("succeeded")
    assert len(load.attempts) == 1 and helpers.duplicates(root) == 0


def _backfilled_then_migrated(setup):
    """Three days backfilled, then both tables migrated (a new column) behind twice's back."""
    import duckdb

    root, ledger, pipeline = setup
    spans = helpers.intervals(3)
    run_backfill(pipeline, ledger, spans)
    con = duckdb.connect(str(root / "warehouse.duckdb"))
    for table in ("positions_stage", "positions"):
        con.execute(f"ALTER TABLE {table} ADD COLUMN currency VARCHAR")
    con.close()
    return root, ledger, spans


def test_migrated_schema_needs_accept_and_then_rewrites_every_interval(setup) -> None:
    root, ledger, spans = _backfilled_then_migrated(setup)
    v2 = helpers.example().build_pipeline(root, transform_version="2")
    refused = run_backfill(v2, ledger, spans[1:])
    assert not refused.ok and "schema differs across the backfill range" in str(refused.refusal)
    assert {(r.task, r.status) for r in refused.runs if r.status != "blocked"} == {
        ("extract", "skipped")}  # verified and untouched; nothing else started
    accepted = run_backfill(v2, ledger, spans, accept_schema_change=True)
    assert accepted.ok, accepted.to_dict()
    changed = {(d.task, d.partition) for d in accepted.diffs if d.schema_changed}
    assert changed == {(t, s.label) for t in ("transform", "load") for s in spans}
    assert {r[-1] for r in helpers.contents(root)["positions"]} == {"EUR"}


def test_accepting_a_schema_change_over_part_of_the_destination_is_refused(setup) -> None:
    """A schema change applies to the whole destination or not at all: accepting it over part
    of what the destination holds would leave the rest on the old schema, silently."""
    root, ledger, spans = _backfilled_then_migrated(setup)
    before = helpers.contents(root)
    v2 = helpers.example().build_pipeline(root, transform_version="2")
    partial = run_backfill(v2, ledger, spans[1:], accept_schema_change=True)
    assert not partial.ok and partial.refusal is not None
    refusal = partial.refusal
    assert "outside the range" in refusal and spans[0].label in refusal
    old = ledger.latest_fingerprint(v2.get_task("transform").destination,
                                    spans[0].label)
    assert old is not None and f"[{old.schema}]" in refusal  # the old schema, shown
    assert "currency" in refusal  # the new one, shown
    assert "(; )" not in refusal and "[]" not in refusal
    assert helpers.contents(root) == before  # nothing was rewritten
    assert {r.status for r in partial.runs} <= {"skipped", "blocked"}
    whole = run_backfill(v2, ledger, spans, accept_schema_change=True)
    assert whole.ok, whole.to_dict()


def test_the_plan_says_what_the_engine_will_hold_or_block(tmp_path: Path) -> None:
    """Found by a probe: the dry run said "would run" for a forced task that is not
    safe_repeat (the backfill then held it) and for a task whose unselected dependency never
    ran (the backfill then blocked it). Each such item now says what the engine will do, and
    the backfill does exactly that."""
    import pyarrow as pa

    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule

    pipeline = Pipeline("plans", schedule=Schedule.daily("UTC"))
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day"

    @pipeline.task(destination=spec + "#a", write="replace", safe_repeat=True)
    def a(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "v": [1]})

    @pipeline.task(depends_on="a")
    def notify(ctx: TaskContext) -> None:
        """A side effect: not safe_repeat."""

    @pipeline.task(depends_on="notify", safe_repeat=True)
    def archive(ctx: TaskContext) -> None:
        """Runs after the side effect: blocked when it is held."""

    spans = helpers.intervals(1)
    with Ledger.open(tmp_path / "l.db") as ledger:
        blocked = plan_backfill(pipeline, ledger, spans, tasks=["notify"]).items
        assert [(i.task, i.expected) for i in blocked] == [("notify", "blocked"),
                                                          ("archive", "blocked")]
        assert "dependency a is not selected" in blocked[0].reason
        ran = run_backfill(pipeline, ledger, spans, tasks=["notify"])
        assert [r.status for r in ran.runs] == ["blocked", "blocked"]
        assert run_backfill(pipeline, ledger, spans).ok
        forced = plan_backfill(pipeline, ledger, spans, force=True).items
        assert [(i.task, i.action, i.expected) for i in forced] == [
            ("a", "run", None), ("notify", "run", "held"), ("archive", "run", "blocked")]
        assert "--repeat notify" in forced[1].reason
        assert "dependency notify is held" in forced[2].reason
        again = run_backfill(pipeline, ledger, spans, force=True)
        assert sorted((r.task, r.status) for r in again.runs) == [
            ("a", "succeeded"), ("archive", "blocked"), ("notify", "held")]
        named = plan_backfill(pipeline, ledger, spans, force=True, repeat=["notify"]).items
        assert [i.expected for i in named] == [None, None, None]


def test_a_unit_that_already_made_an_attempt_is_not_planned_held(tmp_path: Path) -> None:
    """Found by a probe: the plan said "held" for a task that is not safe_repeat whose NEW
    unit had failed once, because an older unit of the interval had succeeded; the engine
    holds on another unit's success only before a unit's first attempt, so it ran, and the
    plan had skipped its dependents."""
    import pyarrow as pa

    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule

    state = {"v": 1, "fail": False}
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day"
    pipeline = Pipeline("again", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=spec + "#a", write="replace",
                   input_version=lambda interval: str(state["v"]))
    def a(ctx: TaskContext) -> pa.Table:
        if state["fail"]:
            raise ValueError("bad source")
        return pa.table({"day": [ctx.interval.start.date()], "v": [state["v"]]})

    @pipeline.task(destination=spec + "#b", write="replace", safe_repeat=True,
                   depends_on="a")
    def b(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "v": [state["v"] * 2]})

    spans = helpers.intervals(1)
    with Ledger.open(tmp_path / "l.db") as ledger:
        assert run_backfill(pipeline, ledger, spans).ok
        state.update(v=2, fail=True)
        first = run_backfill(pipeline, ledger, spans, tasks=["a"], repeat=["a"])
        assert [r.status for r in first.runs if r.task == "a"] == ["failed"]
        state["fail"] = False
        plan = plan_backfill(pipeline, ledger, spans, tasks=["a"]).items
        assert [(i.task, i.action, i.expected) for i in plan] == [
            ("a", "run", None), ("b", "run", None)]  # b follows a, which runs
        ran = run_backfill(pipeline, ledger, spans, tasks=["a"])
        statuses = {r.task: r.status for r in ran.runs}
        assert statuses["a"] == "succeeded"
        assert statuses["b"] == "succeeded"  # its input changed: it ran, not skipped


def test_the_plan_foresees_the_hold_of_a_failed_side_effect(tmp_path: Path) -> None:
    """A task twice cannot see (no destination, no reconcile=) whose attempt failed is held
    by a later run; the plan says so, and the backfill holds it."""
    from twice.core.policy import RetryPolicy
    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule

    sent: list[int] = []
    pipeline = Pipeline("mail", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=2, transient=(ConnectionError,)))
    def notify(ctx: TaskContext) -> None:
        sent.append(ctx.attempt)
        raise ConnectionError("hung up after sending")

    spans = helpers.intervals(1)
    with Ledger.open(tmp_path / "l.db") as ledger:
        run_backfill(pipeline, ledger, spans)
        assert sent == [1]
        [item] = plan_backfill(pipeline, ledger, spans).items
        assert (item.action, item.expected) == ("run", "held")
        again = run_backfill(pipeline, ledger, spans)
        assert [r.status for r in again.runs] == ["held"] and sent == [1]


def test_dependents_of_a_repaired_drift_run_again(tmp_path: Path) -> None:
    """Found by a probe: a dependent that read an upstream partition edited behind twice's
    back kept the rows it made from it for good. The backfill that found the drift and
    rewrote the upstream left the dependent alone, since the upstream's rows came back to
    its recorded fingerprint (the dependent's input version), and every check said
    verified. Now the dependents of a partition that drifted run again when it is rewritten."""
    import sqlite3

    import pyarrow as pa

    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule

    warehouse = tmp_path / "w.db"
    pipeline = Pipeline("drifts", schedule=Schedule.daily("UTC"))
    spec = f"sqlite:///{warehouse}?partition_column=day"

    @pipeline.task(destination=spec + "#a", write="replace", safe_repeat=True)
    def a(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "v": [4]})

    @pipeline.task(destination=spec + "#b", write="replace", safe_repeat=True, depends_on="a")
    def b(ctx: TaskContext) -> pa.Table:
        with sqlite3.connect(warehouse) as conn:
            [(total,)] = conn.execute("SELECT sum(v) FROM a WHERE day = ?",
                                      [ctx.interval.start.date().isoformat()]).fetchall()
        return pa.table({"day": [ctx.interval.start.date()], "total": [total]})

    def totals() -> list[int]:
        with sqlite3.connect(warehouse) as conn:
            return [row[0] for row in conn.execute("SELECT total FROM b")]

    spans = helpers.intervals(1)
    with Ledger.open(tmp_path / "l.db") as ledger:
        assert run_backfill(pipeline, ledger, spans).ok and totals() == [4]
        with sqlite3.connect(warehouse) as conn:
            conn.execute("UPDATE a SET v = 1000")  # behind twice's back
        assert run_backfill(pipeline, ledger, spans, tasks=["b"], force=True).ok
        assert totals() == [1000]  # b read the drifted rows
        repaired = run_backfill(pipeline, ledger, spans, verify_untouched=True)
        assert repaired.ok
        assert {r.task: r.status for r in repaired.runs} == {"a": "succeeded",
                                                             "b": "succeeded"}
        assert totals() == [4]
        assert [r.action for r in plan_backfill(pipeline, ledger, spans,
                                                verify_untouched=True).items] == ["skip",
                                                                                  "skip"]


def test_the_plan_foresees_the_hold_of_a_dependent_that_follows_its_upstream(
    tmp_path: Path,
) -> None:
    """Found by a probe: a dependent that is not safe_repeat and follows a rerun upstream was
    planned "would run"; the backfill held it (its new input makes a new unit, and the
    interval already has a success). It can only be skipped or held: the plan says held if
    its input changes."""
    import pyarrow as pa

    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule

    value = [1]
    pipeline = Pipeline("follows", schedule=Schedule.daily("UTC"))
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day"

    @pipeline.task(destination=spec + "#a", write="replace", safe_repeat=True,
                   input_version=lambda interval: str(value[0]))
    def a(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "v": [value[0]]})

    @pipeline.task(depends_on="a")
    def report(ctx: TaskContext) -> None:
        """A side effect: not safe_repeat."""

    spans = helpers.intervals(1)
    with Ledger.open(tmp_path / "l.db") as ledger:
        assert run_backfill(pipeline, ledger, spans).ok
        value[0] = 2  # the source changed
        planned = {i.task: i for i in plan_backfill(pipeline, ledger, spans).items}
        assert planned["report"].action == "run"
        assert planned["report"].expected == "held"
        assert "held if its input changes" in planned["report"].reason
        ran = {r.task: r.status for r in run_backfill(pipeline, ledger, spans).runs}
        assert ran == {"a": "succeeded", "report": "held"}
        repeated = {i.task: i for i in plan_backfill(pipeline, ledger, spans,
                                                      repeat=["report"]).items}
        assert repeated["report"].expected is None


def test_a_success_recorded_after_the_plan_read_its_running_attempt_is_not_repeated(
    tmp_path: Path,
) -> None:
    """Found by a probe: a plain backfill planned a unit whose attempt was running in another
    process, reached it after that attempt succeeded, and ran it again under a new job
    generation, so an append task landed its rows twice, all verified. Only a success the plan
    saw is a rerun's baseline; one recorded since stands."""
    import pyarrow as pa

    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule
    from twice.engine.executor import identify_unit

    pipeline = Pipeline("racing", schedule=Schedule.daily("UTC"))
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day"
    executed: list[str] = []
    spans = helpers.intervals(1)
    ledger = Ledger.open(tmp_path / "l.db")
    other: dict[str, str] = {}

    @pipeline.task(destination=spec + "#first", write="replace", safe_repeat=True)
    def first(ctx: TaskContext) -> pa.Table:
        # meanwhile, the other process's attempt of `app` (running when the plan read it)
        # succeeds and lets its lease go
        ledger.finish_attempt(other["uow"], 1, "succeeded")
        ledger.release_lease(other["uow"], "other-process")
        return pa.table({"day": [ctx.interval.start.date()], "v": [1]})

    @pipeline.task(destination=spec + "#app", write="append", safe_repeat=True)
    def app(ctx: TaskContext) -> pa.Table:
        executed.append(ctx.job_id)
        return pa.table({"day": [ctx.interval.start.date()], "v": [1]})

    with ledger:
        uow = identify_unit(pipeline, ledger, "app", spans[0])
        other["uow"] = ledger.record_unit(uow).uow_id
        ledger.acquire_lease(other["uow"], "other-process", ttl_seconds=300)
        ledger.begin_attempt(other["uow"], holder="other-process")
        planned = {i.task: i.action for i in plan_backfill(pipeline, ledger, spans).items}
        assert planned == {"first": "run", "app": "run"}  # app: in progress, not verified
        ran = {r.task: r.status for r in run_backfill(pipeline, ledger, spans).runs}
        assert executed == [] and ran["app"] == "skipped"
        assert [a.outcome for a in ledger.attempts(other["uow"])] == ["succeeded"]


def test_progress_counts_held_intervals_apart_from_failed_ones(tmp_path: Path) -> None:
    """Found in review: the interval-finished event said ``failed`` for an interval whose only
    trouble was a held unit (a side effect twice will not repeat unasked), so the progress bar
    of a forced backfill counted every such interval as failed."""
    from twice.define.pipeline import Pipeline, TaskContext
    from twice.define.schedule import Schedule

    pipeline = Pipeline("progress", schedule=Schedule.daily("UTC"))

    @pipeline.task(safe_repeat=True)
    def extract(ctx: TaskContext) -> None:
        """Safe to repeat: forced, it runs again."""

    @pipeline.task(depends_on="extract")
    def notify(ctx: TaskContext) -> None:
        """A side effect: not safe_repeat, held when forced."""

    spans = helpers.intervals(2)

    @pipeline.task(safe_repeat=True)
    def broken(ctx: TaskContext) -> None:
        if ctx.interval == spans[1]:
            raise ValueError("bad day")

    finished: list[dict[str, object]] = []

    def emit(kind: str, data: dict[str, object]) -> None:
        if kind == "interval-finished":
            finished.append(data)

    with Ledger.open(tmp_path / "l.db") as ledger:
        first = run_backfill(pipeline, ledger, spans, tasks=["extract", "notify"])
        assert first.ok
        forced = run_backfill(pipeline, ledger, spans, force=True, emit=emit)
    statuses = sorted((r.interval, r.task, r.status) for r in forced.runs)
    assert [s for _, t, s in statuses if t == "notify"] == ["held", "held"]
    assert sorted((d["failed"], d["held"]) for d in finished) == [(False, True), (True, True)]
