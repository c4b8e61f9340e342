"""One lifecycle on every driver: the failures reported in issue 16, reproduced on our own
pipeline (tests/lifecycle/story.py) and compared row by row with an expectation computed
without twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lifecycle.story import (
    DAYS,
    build,
    count_calls,
    default_rows,
    expected_scaled,
    notified,
    spec,
    table_rows,
    write_source,
)
from twice import OutcomeUnknownError, RemoteState
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.backfill import run_backfill
from twice.drivers.worker import Worker
from twice.engine.executor import Executor
from twice.ledger import Ledger

SCHEDULE = Schedule.daily("UTC")
INTERVALS = [SCHEDULE.interval_for(day) for day in DAYS]


def _scaled(root: Path, engine: str, pg: str | None) -> list[tuple[str, int, int]]:
    return table_rows(spec(engine, root, "scaled", pg))


def test_run_reruns_dependents_whose_input_changed(
    root: Path, engine: str, pg: str | None, ledger: Ledger
) -> None:
    pipeline = build(root, engine, pg)
    first = Executor(pipeline, ledger).run(INTERVALS)
    assert first.ok, first.counts()
    assert _scaled(root, engine, pg) == expected_scaled(root)
    write_source(root, DAYS[1], default_rows(DAYS[1], bump=7))  # the source changes
    second = Executor(pipeline, ledger).run(INTERVALS)
    # extract and transform of the changed day ran again; transform follows its input
    assert count_calls(root) == {"extract": 4, "transform": 4, "notify": 3}
    assert _scaled(root, engine, pg) == expected_scaled(root)
    held = [u for u in second.units if u.outcome == "held"]
    assert [(u.task, u.interval) for u in held] == [("notify", INTERVALS[1])]
    assert "not safe_repeat" in held[0].reason and "--repeat notify" in held[0].reason
    # nothing changed since: nothing executes
    Executor(pipeline, ledger).run(INTERVALS)
    assert count_calls(root) == {"extract": 4, "transform": 4, "notify": 3}


def test_identical_upstream_output_is_not_a_rerun(root: Path, ledger: Ledger) -> None:
    pipeline = build(root, "duckdb")
    assert Executor(pipeline, ledger).run(INTERVALS).ok
    # the same rows, written in another order: a new input version for extract, same output
    write_source(root, DAYS[0], list(reversed(default_rows(DAYS[0]))))
    result = Executor(pipeline, ledger).run(INTERVALS[0])
    assert count_calls(root) == {"extract": 4, "transform": 3, "notify": 3}
    assert result.unit("transform").reason == "latest attempt succeeded in an earlier run"


def test_worker_reruns_dependents_whose_input_changed(root: Path, ledger: Ledger) -> None:
    pipeline = build(root, "sqlite")
    Worker(pipeline, ledger, INTERVALS, name="w1", once=False, poll=0.01).run()
    write_source(root, DAYS[2], default_rows(DAYS[2], bump=3))
    report = Worker(pipeline, ledger, INTERVALS, name="w2", once=False, poll=0.01).run()
    assert count_calls(root) == {"extract": 4, "transform": 4, "notify": 3}
    assert _scaled(root, "sqlite", None) == expected_scaled(root)
    outcomes = {(u.task, u.interval): u.outcome for u in report.units}
    assert outcomes[("notify", INTERVALS[2])] == "held"


def test_backfill_after_run_repeats_nothing(root: Path, engine: str, pg: str | None,
                                           ledger: Ledger) -> None:
    pipeline = build(root, engine, pg)
    assert Executor(pipeline, ledger).run(INTERVALS).ok
    result = run_backfill(pipeline, ledger, INTERVALS)
    assert result.ok, result.to_dict()
    assert count_calls(root) == {"extract": 3, "transform": 3, "notify": 3}
    assert {run.status for run in result.runs} == {"skipped"}
    assert len(notified(root)) == 3


def test_forced_backfill_holds_side_effects_unless_named(root: Path, ledger: Ledger) -> None:
    pipeline = build(root, "duckdb")
    assert Executor(pipeline, ledger).run(INTERVALS).ok
    forced = run_backfill(pipeline, ledger, INTERVALS, force=True)
    assert count_calls(root) == {"extract": 6, "transform": 6, "notify": 3}
    statuses = {(r.task, r.interval): r.status for r in forced.runs}
    assert all(statuses[("notify", i)] == "held" for i in INTERVALS)  # the email is not resent
    # forcing one task reruns it; its dependents follow only if its output changed
    run_backfill(pipeline, ledger, INTERVALS, force=True, tasks=["extract"])
    assert count_calls(root) == {"extract": 9, "transform": 6, "notify": 3}
    named = run_backfill(pipeline, ledger, INTERVALS[:1], force=True, tasks=["notify"],
                         repeat=["notify"])
    assert named.ok
    assert len(notified(root)) == 4
    # the operator's rerun is a new job generation: a new job id
    assert notified(root)[-1].endswith("_g2")


def test_forced_backfill_takes_a_new_generation(root: Path, ledger: Ledger) -> None:
    pipeline = build(root, "sqlite")
    assert Executor(pipeline, ledger).run(INTERVALS[0]).ok
    run_backfill(pipeline, ledger, INTERVALS[:1], force=True, tasks=["extract"])
    unit = Executor(pipeline, ledger).unit_for("extract", INTERVALS[0])
    generations = ledger.job_generations(unit.uow_id)
    assert [g.generation for g in generations] == [1, 2]
    assert generations[0].job_id != generations[1].job_id


def _remote_pipeline(root: Path, hooks: dict[str, object]) -> Pipeline:
    """One task that submits a job to a service keyed by the client-chosen job id (an effect
    twice cannot see): a known id answers "duplicate" and the existing job is adopted."""
    pipeline = Pipeline("remote", schedule=SCHEDULE)
    jobs_file = root / "jobs.json"

    def jobs() -> dict[str, list[dict[str, int]]]:
        return json.loads(jobs_file.read_text()) if jobs_file.exists() else {}

    def reconcile(job_id: str, ctx: TaskContext) -> RemoteState:
        return RemoteState.SUCCEEDED if job_id in jobs() else RemoteState.NOT_FOUND

    @pipeline.task(reconcile=reconcile, safe_repeat=True)
    def publish(ctx: TaskContext) -> None:
        known = jobs()
        if ctx.job_id in known:
            return  # 409 duplicate: the job exists, adopt it
        if "publish" in hooks:
            hooks["publish"](ctx)
        day = ctx.interval.start.date().isoformat()
        known[ctx.job_id] = json.loads((root / "source" / f"{day}.json").read_text())
        jobs_file.write_text(json.dumps(known))
        (root / "published.json").write_text(json.dumps(known[ctx.job_id]))

    return pipeline


def test_forced_backfill_really_reexecutes_a_remote_job(root: Path, ledger: Ledger) -> None:
    pipeline = _remote_pipeline(root, {})
    assert Executor(pipeline, ledger).run(INTERVALS[0]).ok
    write_source(root, DAYS[0], default_rows(DAYS[0], bump=9))
    assert run_backfill(pipeline, ledger, INTERVALS[:1], force=True).ok
    jobs = json.loads((root / "jobs.json").read_text())
    assert [job[-3:] for job in sorted(jobs)] == ["_g1", "_g2"]  # two jobs really ran
    assert json.loads((root / "published.json").read_text()) == default_rows(DAYS[0], bump=9)


def test_killed_rerun_never_adopts_the_previous_generation(root: Path, ledger: Ledger) -> None:
    """A rerun that loses its request before the job ran is reconciled by ITS job id: the
    earlier generation's success is not adopted, so stale output is never called succeeded."""
    hooks: dict[str, object] = {}
    pipeline = _remote_pipeline(root, hooks)
    assert Executor(pipeline, ledger).run(INTERVALS[0]).ok
    write_source(root, DAYS[0], default_rows(DAYS[0], bump=50))

    def lose(ctx: TaskContext) -> None:
        raise OutcomeUnknownError("connection dropped before the job was created (injected)")

    hooks["publish"] = lose
    first = run_backfill(pipeline, ledger, INTERVALS[:1], force=True)
    assert not first.ok
    assert first.runs[0].reconciled and first.runs[0].reconciled[0].endswith("not-found")
    del hooks["publish"]
    second = run_backfill(pipeline, ledger, INTERVALS[:1])
    assert second.ok, second.to_dict()
    assert json.loads((root / "published.json").read_text()) == default_rows(DAYS[0], bump=50)


def test_unknown_outcome_settled_from_the_commit_record(root: Path, engine: str,
                                                        pg: str | None, ledger: Ledger) -> None:
    """No reconcile= function: the commit record decides. Written -> succeeded, no re-run."""
    hooks: dict[str, object] = {}
    pipeline = build(root, engine, pg, hooks=hooks)

    def after_write(ctx: TaskContext) -> None:
        raise OutcomeUnknownError("acknowledgement lost after the write (injected)")

    # transform writes, then loses its acknowledgement; extract does not write before failing
    original = pipeline.get_task("transform").fn

    def transform_then_lose(ctx: TaskContext) -> object:
        value = original(ctx)
        after_write(ctx)
        return value

    object.__setattr__(pipeline.get_task("transform"), "fn", transform_then_lose)
    result = Executor(pipeline, ledger).run(INTERVALS[0])
    assert result.unit("transform").outcome == "succeeded", result.unit("transform")
    assert count_calls(root)["transform"] == 1  # settled from the record, not re-executed
    unit = result.unit("transform")
    outcomes = [a.outcome for a in ledger.attempts(unit.uow_id or "")]
    assert outcomes == ["succeeded"]
    sources = {o.source for o in ledger.observations(unit.uow_id or "")}
    assert any(s.startswith("destination:") for s in sources)
    assert _scaled(root, engine, pg) == [
        r for r in expected_scaled(root) if r[0] == DAYS[0].isoformat()
    ]


def test_unknown_outcome_without_a_write_is_retried(root: Path, ledger: Ledger) -> None:
    hooks: dict[str, object] = {}
    pipeline = build(root, "sqlite", hooks=hooks)
    calls = {"n": 0}

    def lose_once(ctx: TaskContext) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OutcomeUnknownError("timed out before the write (injected)")

    hooks["transform"] = lose_once
    first = Executor(pipeline, ledger).run(INTERVALS[0])
    assert first.unit("transform").outcome == "attempts-exhausted"  # one attempt per run
    second = Executor(pipeline, ledger).run(INTERVALS[0])
    assert second.ok
    assert count_calls(root)["transform"] == 2
    assert _scaled(root, "sqlite", None) == [
        r for r in expected_scaled(root) if r[0] == DAYS[0].isoformat()
    ]


def test_sys_exit_in_task_code_is_recorded_not_lost(root: Path, ledger: Ledger) -> None:
    hooks: dict[str, object] = {"transform": lambda ctx: exit(3)}
    pipeline = build(root, "sqlite", hooks=hooks)
    result = Executor(pipeline, ledger).run(INTERVALS[0])
    unit = result.unit("transform")
    assert unit.outcome != "succeeded"
    assert "sys.exit(3)" in (unit.error or "")
    attempts = ledger.attempts(unit.uow_id or "")
    assert attempts[0].outcome in ("unknown", "failed-transient")  # closed by its record
    assert attempts[0].finished_at is not None


def test_keyboard_interrupt_in_task_code_stops_the_run_recorded(root: Path,
                                                                ledger: Ledger) -> None:
    from twice.errors import Interrupted

    def interrupt(ctx: TaskContext) -> None:
        raise KeyboardInterrupt

    pipeline = build(root, "sqlite", hooks={"transform": interrupt})
    with pytest.raises(Interrupted, match="KeyboardInterrupt"):
        Executor(pipeline, ledger).run(INTERVALS[0])
    unit = Executor(pipeline, ledger).unit_for("transform", INTERVALS[0])
    assert [a.outcome for a in ledger.attempts(unit.uow_id)] == ["unknown"]
    # the next run settles it from the destination (nothing committed) and runs it
    assert Executor(build(root, "sqlite"), ledger).run(INTERVALS[0]).ok
    assert _scaled(root, "sqlite", None) == [
        r for r in expected_scaled(root) if r[0] == DAYS[0].isoformat()
    ]


def test_ledger_failure_after_the_write_is_settled_from_the_commit_record(
    root: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    pipeline = build(root, "duckdb")
    real = Ledger.finish_attempt
    failed = {"n": 0}

    def finish(self: Ledger, uow_id: str, number: int, outcome: str, *a: object,
               **k: object) -> object:
        unit = self.unit(uow_id)
        if unit is not None and unit.task == "transform" and failed["n"] == 0:
            failed["n"] += 1
            raise OperationalError("UPDATE twice_attempts", {}, Exception("disk I/O error"))
        return real(self, uow_id, number, outcome, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Ledger, "finish_attempt", finish)
    first = Executor(pipeline, ledger, lease_ttl=0.2).run(INTERVALS[0])
    transform = first.unit("transform")
    assert transform.outcome == "unknown-needs-reconcile"
    assert "ledger failed" in transform.reason
    monkeypatch.setattr(Ledger, "finish_attempt", real)
    import time

    time.sleep(0.3)  # the lease of the first run expires
    second = Executor(pipeline, ledger).run(INTERVALS[0])
    assert second.ok, second.to_dict()
    assert count_calls(root)["transform"] == 1  # the commit record settled it
    assert _scaled(root, "duckdb", None) == [
        r for r in expected_scaled(root) if r[0] == DAYS[0].isoformat()
    ]
