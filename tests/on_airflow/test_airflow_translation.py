"""The pure translation (no Airflow needed): timetable, operator arguments, pools, the gaps."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, time, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.airflow import (
    describe,
    describe_dict,
    pool_commands,
    task_settings,
    timetable_spec,
)
from twice.interop.translations import ROW_LIMIT


def _noop(ctx: TaskContext) -> None:
    return None


def _pipeline(policy: RetryPolicy, **task_options: object) -> Pipeline:
    pipeline = Pipeline("p", schedule=Schedule.daily("Europe/Lisbon"), deadline=time(6, 0),
                        workflow_timeout=timedelta(minutes=30))
    pipeline.pool("db", slots=2)
    pipeline.task(retry=policy, **task_options)(_noop)
    return pipeline


policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 8),
    initial_delay=st.floats(0.1, 600, allow_nan=False),
    multiplier=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
    max_delay=st.floats(600, 7200, allow_nan=False),
    jitter=st.sampled_from(["none", "full", "equal"]),
    transient=st.just((ConnectionError,)),
)


@settings(max_examples=60, deadline=None)
@given(policies)
def test_retry_numbers_follow_the_policy(policy: RetryPolicy) -> None:
    """retries counts retries only; the delay and multiplier are the policy's own numbers."""
    task = _pipeline(policy).get_task("_noop")
    s = task_settings(_pipeline(policy), task)
    assert s.retries + 1 == policy.max_attempts
    assert s.retry_delay == pytest.approx(policy.initial_delay)
    if policy.multiplier == 1:
        assert s.retry_exponential_backoff == 0  # Airflow 3.3: 0 means a constant delay
        assert s.max_retry_delay is None
    else:
        assert s.retry_exponential_backoff == pytest.approx(policy.multiplier)
        assert s.max_retry_delay == pytest.approx(policy.max_delay)
    kwargs = s.operator_kwargs()
    assert kwargs["retries"] == policy.max_attempts - 1
    assert kwargs["retry_delay"] == timedelta(seconds=s.retry_delay)
    # the written-out attempt sequence has one row per execution, numbered from 1
    rows = s.to_dict()["attempts"]
    assert [row["attempt"] for row in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == min(policy.max_attempts, ROW_LIMIT)
    assert rows[0]["twice_delay"] == 0
    if policy.max_attempts > 1:
        assert rows[1]["twice_delay"] == pytest.approx(policy.initial_delay)
    if policy.jitter != "none":
        assert any("jitter" in d for d in s.translation.differences)


def test_pool_timeout_and_gaps_are_stated() -> None:
    policy = RetryPolicy(max_attempts=4, initial_delay=30, multiplier=2, max_delay=300,
                         jitter="full", transient=(ConnectionError, TimeoutError))
    pipeline = _pipeline(policy, pool="db", slots=2, timeout=120)
    s = task_settings(pipeline, pipeline.get_task("_noop"))
    kwargs = s.operator_kwargs()
    assert kwargs["pool"] == "db" and kwargs["pool_slots"] == 2
    assert kwargs["execution_timeout"] > timedelta(seconds=120)  # twice times out first
    text = s.render()
    for needle in ("retries=3", "pool_slots=2", "4 execution(s)", "AirflowFailException",
                   "deadline-infeasible", "jitter", "ConnectionError, TimeoutError",
                   "attempts_per_call=1", "dagrun_timeout"):
        assert needle in text, needle
    assert "retry_delay_multiplier exists only" not in text  # 3.3 takes the float itself
    assert pool_commands(pipeline) == [
        "airflow pools set db 2 'twice pool of pipeline p; slots used by: _noop (2)' "
        "--include-deferred"
    ]
    assert "a deferred task keeps its pool slots" in describe(pipeline)


def test_timetables_pin_a_data_interval() -> None:
    daily = timetable_spec(Schedule.daily("Europe/Lisbon"))
    assert (daily.kind, daily.cron, daily.timezone) == ("cron", "0 0 * * *", "Europe/Lisbon")
    assert daily.code.startswith("CronDataIntervalTimetable(")
    assert timetable_spec(Schedule.hourly("UTC")).cron == "0 * * * *"
    anchor = datetime(2026, 1, 1, 0, 15, tzinfo=UTC)
    every = timetable_spec(Schedule.every(timedelta(minutes=30), anchor=anchor))
    assert every.kind == "delta" and every.delta == timedelta(minutes=30)
    assert datetime.fromisoformat(every.start_date or "") == anchor


def test_describe_lists_tasks_in_dependency_order() -> None:
    policy = RetryPolicy(max_attempts=2, initial_delay=1, transient=(ConnectionError,))
    pipeline = Pipeline("chain", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=policy)
    def a(ctx: TaskContext) -> None: ...

    @pipeline.task(retry=policy, depends_on=[a])
    def b(ctx: TaskContext) -> None: ...

    text = describe(pipeline, dag_id="chain_dag")
    assert text.index("Task a (upstream: none)") < text.index("Task b (upstream: a)")
    assert "DAG chain_dag" in text and "zero-width" in text
    data = describe_dict(pipeline)
    assert [t["task"] for t in data["tasks"]] == ["a", "b"]
    assert data["tasks"][1]["depends_on"] == ["a"]
    assert json.loads(json.dumps(data)) == data


def test_importing_twice_airflow_does_not_import_airflow() -> None:
    code = (
        "import sys, twice.drivers.airflow, twice.cli.airflow_cmd\n"
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
