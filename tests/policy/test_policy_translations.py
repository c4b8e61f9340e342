"""Counting conventions per tool, the schedules each tool really runs, and round trips."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import tenacity
from hypothesis import given
from hypothesis import strategies as st

from twice.core.policy import RetryPolicy
from twice.interop.translations import (
    FROM,
    TO,
    TOOLS,
    TranslationError,
    from_airflow,
    from_stamina,
    from_stepfunctions,
    from_temporal,
    from_tenacity,
    from_workflows,
    to_airflow,
    to_dagster,
    to_prefect,
    to_stepfunctions,
    to_temporal,
    to_tenacity,
    to_tenacity_retrying,
    to_workflows,
    translate,
)

LAB_CASE = Path("/work/shared/seeds/lab-case.json")


def lab_policy() -> RetryPolicy:
    """The lab fixture's policy: 4 total attempts, 4 s, doubling, capped at 12."""
    if LAB_CASE.exists():
        raw = json.loads(LAB_CASE.read_text())["policy"]
    else:
        raw = {"maxAttempts": 4, "initialDelay": 4, "maxDelay": 12, "multiplier": 2}
    return RetryPolicy(max_attempts=raw["maxAttempts"], initial_delay=raw["initialDelay"],
                       multiplier=raw["multiplier"], max_delay=raw["maxDelay"], jitter="none")


def waits(translation: object) -> list[tuple[float, float]]:
    return [(r.tool_wait.low, r.tool_wait.high) for r in translation.rows()][1:]  # type: ignore[attr-defined]


# -- one test per tool pinning its counting convention -----------------------------------------


def test_twice_and_the_lab_count_the_first_try() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [plan.number for plan in policy.attempts()] == [1, 2, 3]
    assert policy.retries == 2
    lab = lab_policy()
    assert [plan.delay_before for plan in lab.attempts()] == [0, 4, 8, 12]
    assert lab.backoff_after(2) == 8  # the lab's 'report' task: failed twice, waits 8


def test_airflow_retries_3_means_4_executions() -> None:
    translation = from_airflow(retries=3, retry_delay=300)
    assert translation.policy.max_attempts == 4
    assert translation.executions == 4 and len(translation.rows()) == 4
    assert "retries=3 counts retries only: 4 execution(s)" in translation.counting
    assert to_airflow(RetryPolicy(max_attempts=4)).config["retries"] == 3


def test_workflows_max_retries_3_means_4_executions() -> None:
    translation = from_workflows(max_retries=3)
    assert translation.policy.max_attempts == 4 and translation.executions == 4
    assert to_workflows(RetryPolicy(max_attempts=4)).config["max_retries"] == 3


def test_workflows_default_retry_is_5_retries_1s_x1_25_capped_60() -> None:
    translation = from_workflows()
    policy = translation.policy
    assert (policy.max_attempts, policy.initial_delay, policy.multiplier, policy.max_delay) == (
        6, 1, 1.25, 60)
    assert [low for low, _ in waits(translation)] == [1, 1.25, 1.5625, 1.953125, 2.44140625]


def test_stepfunctions_max_attempts_3_means_4_and_0_means_1() -> None:
    assert from_stepfunctions(MaxAttempts=3).policy.max_attempts == 4
    assert from_stepfunctions().policy.max_attempts == 4  # MaxAttempts defaults to 3
    never = from_stepfunctions(MaxAttempts=0)
    assert never.policy.max_attempts == 1 and never.executions == 1
    assert "0 means never retry" in never.counting
    assert to_stepfunctions(RetryPolicy(max_attempts=1)).config["Retry"][0]["MaxAttempts"] == 0
    assert to_stepfunctions(RetryPolicy(max_attempts=4)).config["Retry"][0]["MaxAttempts"] == 3


def test_temporal_maximum_attempts_3_means_3_and_unlimited_is_refused() -> None:
    assert from_temporal(maximum_attempts=3).policy.max_attempts == 3
    assert to_temporal(RetryPolicy(max_attempts=3)).config["maximum_attempts"] == 3
    with pytest.raises(TranslationError, match="unlimited") as caught:
        from_temporal(maximum_attempts=0)
    assert caught.value.setting == "maximum_attempts"


def test_tenacity_stop_after_attempt_3_means_3_calls_in_the_real_library() -> None:
    translation = from_tenacity(stop_after_attempt=3, wait="exponential", wait_multiplier=4,
                                wait_max=12)
    assert translation.policy.max_attempts == 3
    transient = replace(translation.policy, transient=(ConnectionError,))
    calls, sleeps = [], []

    def always_fails() -> None:
        calls.append(1)
        raise ConnectionError("source API down")

    retrying = to_tenacity_retrying(transient, sleep=sleeps.append)  # waits disabled
    with pytest.raises(ConnectionError):
        retrying(always_fails)
    assert len(calls) == 3
    assert sleeps == [4, 8]  # the waits tenacity asked for are twice's planned delays


def test_tenacity_retrying_stops_at_once_on_a_permanent_error() -> None:
    policy = RetryPolicy(max_attempts=5, transient=(ConnectionError,))
    calls = []

    def schema_changed() -> None:
        calls.append(1)
        raise ValueError("required column missing")

    with pytest.raises(ValueError):
        to_tenacity_retrying(policy, sleep=lambda _: None)(schema_changed)
    assert len(calls) == 1


@pytest.mark.parametrize("jitter", ["none", "full", "equal"])
def test_tenacity_waits_match_the_translated_ranges(jitter: str) -> None:
    policy = RetryPolicy(max_attempts=6, initial_delay=2, multiplier=3, max_delay=40,
                         jitter=jitter, transient=(TimeoutError,))
    sleeps: list[float] = []

    def always_times_out() -> None:
        raise TimeoutError

    with pytest.raises(TimeoutError):
        to_tenacity_retrying(policy, sleep=sleeps.append)(always_times_out)
    ranges = waits(to_tenacity(policy))
    assert len(sleeps) == len(ranges) == 5
    for slept, (low, high) in zip(sleeps, ranges, strict=True):
        assert low - 1e-9 <= slept <= high + 1e-9


def test_stamina_attempts_count_the_first_try() -> None:
    assert from_stamina(attempts=3).policy.max_attempts == 3
    assert from_stamina().policy.max_attempts == 10  # stamina's default
    with pytest.raises(TranslationError, match="unlimited"):
        from_stamina(attempts=None)


def test_dagster_and_prefect_count_retries() -> None:
    policy = RetryPolicy(max_attempts=4, initial_delay=4, max_delay=12)
    assert to_dagster(policy).config["max_retries"] == 3
    prefect = to_prefect(policy)
    assert prefect.config == {"retries": 3, "retry_delay_seconds": [4, 8, 12]}
    assert waits(prefect) == [(4, 4), (8, 8), (12, 12)]


# -- the schedules the tools really run ---------------------------------------------------------


def airflow_wait(retry_delay: float, try_number: int, cap: float) -> int:
    """Airflow's TaskInstance.next_retry_datetime, re-implemented independently."""
    min_backoff = max(1, math.ceil(retry_delay * 2 ** (try_number - 1)))
    digest = hashlib.sha1(f"dag#task#2026-11-05T00:00:00+00:00#{try_number}".encode())
    return min(cap, min_backoff + int(digest.hexdigest(), 16) % min_backoff)


def test_airflow_hash_spread_is_between_one_and_two_times_the_plan() -> None:
    translation = to_airflow(lab_policy())
    assert translation.config == {"retries": 3, "retry_delay": 4,
                                  "retry_exponential_backoff": True, "max_retry_delay": 12}
    assert waits(translation) == [(4, 7), (8, 12), (12, 12)]
    for try_number, (low, high) in enumerate(waits(translation), start=1):
        assert low <= airflow_wait(4, try_number, 12) <= high
    text = "\n".join(translation.differences)
    assert "not random" in text and "dagrun_timeout" in text and "AirflowFailException" in text


def test_airflow_without_exponential_backoff_waits_a_constant_delay() -> None:
    translation = from_airflow(retries=2, retry_delay=300, max_retry_delay=60)
    assert waits(translation) == [(300, 300), (300, 300)]
    assert translation.policy.multiplier == 1
    assert any("max_retry_delay is ignored" in d for d in translation.differences)


def test_airflow_multiplier_other_than_two_needs_a_newer_airflow() -> None:
    translation = to_airflow(RetryPolicy(initial_delay=1, multiplier=3, max_delay=100))
    assert translation.config["retry_delay_multiplier"] == 3
    assert any("56866" in d for d in translation.differences)


def test_stepfunctions_full_jitter_and_rounding() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay=0.5, multiplier=2, max_delay=2.5,
                         jitter="full", transient=(ConnectionError,))
    translation = to_stepfunctions(policy)
    retrier = translation.config["Retry"][0]
    assert retrier == {"ErrorEquals": ["ConnectionError"], "MaxAttempts": 2,
                       "IntervalSeconds": 1, "BackoffRate": 2, "MaxDelaySeconds": 3,
                       "JitterStrategy": "FULL"}
    assert waits(translation) == [(0, 1), (0, 2)]
    assert any("whole number" in d for d in translation.differences)


def test_stepfunctions_translation_reads_its_own_json() -> None:
    state = json.loads(to_stepfunctions(lab_policy()).snippet)
    retrier = {k: v for k, v in state["Retry"][0].items()}
    back = from_stepfunctions(**retrier)
    assert back.policy == RetryPolicy(max_attempts=4, initial_delay=4, multiplier=2,
                                      max_delay=12, jitter="none")


def test_uncapped_stepfunctions_gets_the_largest_reachable_delay_as_cap() -> None:
    translation = from_stepfunctions(MaxAttempts=3, IntervalSeconds=2, BackoffRate=3)
    assert translation.policy.max_delay == 18
    assert [p.delay_before for p in translation.policy.attempts()] == [0, 2, 6, 18]
    assert waits(translation) == [(2, 2), (6, 6), (18, 18)]


def test_temporal_unset_maximum_interval_is_100_times_initial() -> None:
    translation = from_temporal(maximum_attempts=10, initial_interval=1)
    assert translation.policy.max_delay == 100


def test_dagster_exponential_is_two_to_the_k_minus_one_uncapped() -> None:
    translation = to_dagster(RetryPolicy(max_attempts=5, initial_delay=1, multiplier=2,
                                         max_delay=5, jitter="none"))
    assert waits(translation) == [(1, 1), (3, 3), (7, 7), (15, 15)]


@pytest.mark.parametrize(("call", "setting"), [
    (lambda: from_stepfunctions(IntervalSeconds=0), "IntervalSeconds"),
    (lambda: from_stepfunctions(MaxAttempts=-1), "MaxAttempts"),
    (lambda: from_stepfunctions(JitterStrategy="SOME"), "JitterStrategy"),
    (lambda: from_workflows(multiplier=0.5), "multiplier"),
    (lambda: from_workflows(initial_delay=10, max_delay=5), "max_delay"),
    (lambda: from_airflow(retry_delay=float("nan")), "retry_delay"),
    (lambda: from_tenacity(stop_after_attempt=0), "stop_after_attempt"),
    (lambda: from_temporal(maximum_attempts=3, initial_interval=0), "initial_interval"),
])
def test_bad_tool_settings_name_the_setting(call, setting: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TranslationError) as caught:
        call()
    assert caught.value.setting == setting
    assert setting in str(caught.value)


# -- properties over every tool -----------------------------------------------------------------

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 12),
    initial_delay=st.integers(1, 60),
    multiplier=st.integers(1, 4),
    max_delay=st.integers(60, 600),
    jitter=st.sampled_from(["none", "full", "equal"]),
)


@given(policies)
def test_every_translation_writes_out_every_attempt(policy: RetryPolicy) -> None:
    for tool in TOOLS:
        translation = translate(policy, tool)
        rows = translation.rows()
        assert translation.executions == policy.max_attempts == len(rows)
        assert [r.twice_delay for r in rows] == [p.delay_before for p in policy.attempts()]
        text = str(translation)
        assert translation.counting in text and translation.snippet in text
        json.dumps(translation.to_dict())  # machine-readable as is


@given(policies)
def test_exact_tools_wait_exactly_twice_plan_when_there_is_no_jitter(policy: RetryPolicy) -> None:
    policy = replace(policy, jitter="none")
    for tool in ("workflows", "stepfunctions", "temporal", "tenacity", "prefect"):
        rows = translate(policy, tool).rows()
        assert [(r.tool_wait.low, r.tool_wait.high) for r in rows] == [
            (r.twice_delay, r.twice_delay) for r in rows], tool


@given(policies)
def test_round_trips_through_exact_tools(policy: RetryPolicy) -> None:
    policy = replace(policy, jitter="none")
    workflows = to_workflows(policy).config
    back = from_workflows(workflows["max_retries"], **workflows["backoff"]).policy
    assert list(back.attempts()) == list(policy.attempts())
    temporal = to_temporal(policy).config
    back = from_temporal(temporal["maximum_attempts"], temporal["initial_interval"],
                         temporal["backoff_coefficient"], temporal["maximum_interval"]).policy
    assert list(back.attempts()) == list(policy.attempts())
    retrier = to_stepfunctions(policy).config["Retry"][0]
    back = from_stepfunctions(**retrier).policy
    assert list(back.attempts()) == list(policy.attempts())


@given(policies)
def test_lossy_jitter_is_always_listed_as_a_difference(policy: RetryPolicy) -> None:
    if policy.jitter == "none":
        return
    for tool in ("airflow", "workflows", "temporal", "prefect", "stamina"):
        assert any("jitter" in d for d in translate(policy, tool).differences), tool


def test_tools_from_and_to_registries() -> None:
    assert set(TO) == set(TOOLS)
    assert set(FROM) <= set(TOOLS)
    with pytest.raises(TranslationError, match="unknown tool"):
        translate(RetryPolicy(), "cron")  # type: ignore[arg-type]


def test_render_shows_config_counting_sequence_and_differences() -> None:
    text = str(to_workflows(RetryPolicy(max_attempts=4, initial_delay=4, max_delay=12)))
    assert "max_retries: 3" in text
    assert "Workflows max_retries=3 counts retries only: 4 execution(s)" in text
    lines = text.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("attempt"))):]
    assert [line.split()[0] for line in table[1:5]] == ["1", "2", "3", "4"]
    assert "Not expressible / different:" in text and "documents no jitter" in text


def test_tenacity_snippet_names_real_tenacity_strategies() -> None:
    snippet = to_tenacity(RetryPolicy(jitter="equal", transient=(ConnectionError,))).snippet
    for name in ("stop_after_attempt", "wait_exponential", "wait_random_exponential",
                 "retry_if_exception_type"):
        assert name in snippet and hasattr(tenacity, name)
