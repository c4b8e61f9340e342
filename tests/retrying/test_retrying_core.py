"""twice.retry: budget counted including the first try, explicit transient errors only, the
policy's backoff, deadline refusal and the attempt log, in all three forms."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import twice
from tests.retrying.retrying_helpers import FakeClock, Script
from twice.core.backoff import delays, jitter_bounds
from twice.core.policy import RetryPolicy
from twice.engine.timeouts import AttemptTimeout, Deadline
from twice.interop.retrying import (
    RetryAttempt,
    RetryDeadlineExceeded,
    Retrying,
    RetryUsageError,
    retry,
)

Runner = Callable[[Retrying, Script], Any]


def via_call(r: Retrying, fn: Script) -> Any:
    return r.call(fn)


def via_decorator(r: Retrying, fn: Script) -> Any:
    return r(fn)()


def via_context(r: Retrying, fn: Script) -> Any:
    result = None
    for attempt in r:
        with attempt:
            result = fn()
    return result


FORMS = pytest.mark.parametrize("run", [via_call, via_decorator, via_context],
                                ids=["call", "decorator", "context"])


def policy(**overrides: Any) -> RetryPolicy:
    values: dict[str, Any] = {"max_attempts": 4, "initial_delay": 1.0, "multiplier": 2.0,
                              "max_delay": 3.0, "jitter": "none",
                              "transient": (ConnectionError,)}
    values.update(overrides)
    return RetryPolicy(**values)


def test_exported_as_twice_retry() -> None:
    assert twice.retry is retry


@FORMS
@pytest.mark.parametrize("max_attempts", [1, 2, 5])
def test_attempts_count_the_first_try(run: Runner, max_attempts: int) -> None:
    clock = FakeClock()
    fn = Script([ConnectionError(f"down {i}") for i in range(10)])
    r = retry(policy(max_attempts=max_attempts), sleep=clock.sleep)
    with pytest.raises(ConnectionError) as caught:
        run(r, fn)
    assert fn.calls == max_attempts
    assert str(caught.value) == f"down {max_attempts - 1}"  # the last error, not a wrapper
    assert any("gave up after" in note for note in caught.value.__notes__)
    assert [a.number for a in r.last_attempts] == list(range(1, max_attempts + 1))
    assert {a.outcome for a in r.last_attempts} == {"failed-transient"}
    assert len(clock.sleeps) == max_attempts - 1


@FORMS
def test_success_after_transient_failures(run: Runner) -> None:
    clock = FakeClock()
    fn = Script([ConnectionError(), ConnectionError()], result=42)
    r = retry(policy(), sleep=clock.sleep)
    assert run(r, fn) == 42
    assert fn.calls == 3
    assert [a.outcome for a in r.last_attempts] == [
        "failed-transient", "failed-transient", "succeeded"]


@FORMS
def test_non_transient_error_is_not_retried(run: Runner) -> None:
    clock = FakeClock()
    fn = Script([ValueError("bad row")] * 5)
    r = retry(policy(), sleep=clock.sleep)
    with pytest.raises(ValueError, match="bad row"):
        run(r, fn)
    assert fn.calls == 1
    assert clock.sleeps == []
    assert r.last_attempts == (RetryAttempt(1, "failed-permanent", "ValueError", 0.0),)


@FORMS
def test_nothing_declared_means_nothing_retried(run: Runner) -> None:
    fn = Script([ConnectionError()] * 3)
    r = retry(policy(transient=()), sleep=FakeClock().sleep)
    with pytest.raises(ConnectionError):
        run(r, fn)
    assert fn.calls == 1


@FORMS
def test_base_exceptions_are_never_retried(run: Runner) -> None:
    class Stop(BaseException):
        pass

    fn = Script([Stop()] * 3)
    r = retry(policy(transient=(Stop,)), sleep=FakeClock().sleep)
    with pytest.raises(Stop):
        run(r, fn)
    assert fn.calls == 1


@FORMS
def test_on_adds_classes_and_predicates(run: Runner) -> None:
    class Http(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(status)
            self.status = status

    def retryable(error: BaseException) -> bool:
        return isinstance(error, Http) and error.status >= 500

    clock = FakeClock()
    fn = Script([Http(503), Http(502), ConnectionError()], result="ok")
    r = retry(policy(), on=retryable, sleep=clock.sleep)
    assert run(r, fn) == "ok"  # predicate and the policy's classes both count
    assert fn.calls == 4

    fn = Script([Http(503), Http(404)])
    with pytest.raises(Http):
        run(retry(policy(), on=retryable, sleep=clock.sleep), fn)
    assert fn.calls == 2

    fn = Script([TimeoutError(), TimeoutError()], result="ok")
    assert run(retry(policy(transient=()), on=(TimeoutError,), sleep=clock.sleep), fn) == "ok"


@FORMS
def test_backoff_without_jitter_is_the_policy_schedule(run: Runner) -> None:
    p = policy(max_attempts=6, initial_delay=0.5, multiplier=3.0, max_delay=4.0)
    clock = FakeClock()
    fn = Script([ConnectionError()] * 10)
    r = retry(p, sleep=clock.sleep)
    with pytest.raises(ConnectionError):
        run(r, fn)
    planned = [plan.delay_before for plan in p.attempts()][1:]
    assert clock.sleeps == planned
    assert clock.sleeps == [p.backoff_after(n) for n in range(1, p.max_attempts)]
    assert [a.waited for a in r.last_attempts] == [0.0, *planned]


@FORMS
@pytest.mark.parametrize("jitter", ["full", "equal"])
def test_jittered_backoff_is_the_backoff_module_draw(run: Runner, jitter: str) -> None:
    p = policy(max_attempts=5, jitter=jitter)
    clock = FakeClock()
    r = retry(p, sleep=clock.sleep, rng=random.Random(7))
    with pytest.raises(ConnectionError):
        run(r, Script([ConnectionError()] * 10))
    assert clock.sleeps == list(delays(p, random.Random(7)))
    for n, wait in enumerate(clock.sleeps, start=1):
        low, high = jitter_bounds(p, n)
        assert low <= wait <= high


@FORMS
def test_deadline_refuses_an_attempt_that_cannot_finish(run: Runner) -> None:
    p = policy(max_attempts=5, initial_delay=2.0, multiplier=2.0, max_delay=60.0)
    clock = FakeClock()
    fn = Script([ConnectionError()] * 10, clock=clock, duration=3.0)
    r = retry(p, deadline=10.0, attempt_duration=3.0, sleep=clock.sleep, clock=clock)
    begin = clock.now
    with pytest.raises(RetryDeadlineExceeded) as caught:
        run(r, fn)
    ends = begin + 10.0
    # Every attempt that started finished in time, and the refused one would not have fit.
    assert all(end <= ends for end in fn.ends)
    refused_wait = p.backoff_after(fn.calls)
    assert clock.now + refused_wait + 3.0 > ends
    assert fn.calls < p.max_attempts
    assert len(clock.sleeps) == fn.calls - 1  # no sleep before the refused attempt
    assert isinstance(caught.value.__cause__, ConnectionError)
    log = caught.value.attempts
    assert log == r.last_attempts
    assert [a.outcome for a in log] == ["failed-transient"] * fn.calls + ["not-started"]
    assert log[-1].number == fn.calls + 1


@FORMS
def test_deadline_refuses_even_the_first_attempt(run: Runner) -> None:
    clock = FakeClock()
    fn = Script([], clock=clock, duration=1.0)
    r = retry(policy(), deadline=5.0, attempt_duration=6.0, sleep=clock.sleep, clock=clock)
    with pytest.raises(RetryDeadlineExceeded, match="attempt 1 of 4 not started") as caught:
        run(r, fn)
    assert fn.calls == 0
    assert caught.value.__cause__ is None


def test_deadline_uses_the_policy_attempt_timeout_and_a_shared_deadline() -> None:
    clock = FakeClock()
    shared = Deadline(7.0, clock=clock)
    fn = Script([ConnectionError()] * 10, clock=clock, duration=2.0)
    r = retry(policy(max_attempts=10, attempt_timeout=2.0), deadline=shared,
              sleep=clock.sleep, clock=clock)
    with pytest.raises(RetryDeadlineExceeded):
        r.call(fn)
    assert all(end <= shared.ends for end in fn.ends)
    assert fn.calls >= 1


def test_deadline_needs_an_expected_duration() -> None:
    with pytest.raises(ValueError, match="attempt_duration"):
        retry(policy(), deadline=10.0)
    with pytest.raises(ValueError, match="deadline"):
        retry(policy(), deadline=-1.0, attempt_duration=1.0)
    with pytest.raises(ValueError, match="attempt_duration"):
        retry(policy(), deadline=10.0, attempt_duration=float("nan"))
    with pytest.raises(TypeError, match="policy"):
        retry({"max_attempts": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on"):
        retry(policy(), on=(ConnectionError, "oops"))  # type: ignore[arg-type]


@FORMS
def test_unknown_outcomes_are_logged_as_unknown(run: Runner) -> None:
    fn = Script([AttemptTimeout(1.0, terminated=False)], result="ok")
    r = retry(policy(transient=(AttemptTimeout,)), sleep=FakeClock().sleep)
    assert run(r, fn) == "ok"
    assert [a.outcome for a in r.last_attempts] == ["unknown", "succeeded"]
    assert r.last_attempts[0].error_class == "twice.engine.timeouts.AttemptTimeout"


def test_fast_path_reads_no_clock_and_logs_one_success() -> None:
    clock = FakeClock()
    log: list[RetryAttempt] = []
    r = retry(policy(), sleep=clock.sleep, clock=clock, log=log)
    decorated = r(lambda x: x * 2)
    for i in range(3):
        assert decorated(i) == i * 2
        assert r.call(int, i) == i
    assert clock.reads == 0
    assert r.last_attempts == (RetryAttempt(1, "succeeded"),)
    assert log == [RetryAttempt(1, "succeeded")] * 6


def test_caller_log_collects_every_attempt_across_calls() -> None:
    log: list[RetryAttempt] = []
    clock = FakeClock()
    r = retry(policy(), sleep=clock.sleep, log=log)
    r.call(Script([ConnectionError()]))
    with pytest.raises(ValueError):
        r.call(Script([ValueError()]))
    assert [(a.number, a.outcome) for a in log] == [
        (1, "failed-transient"), (2, "succeeded"), (1, "failed-permanent")]
    assert log[1].to_dict() == {"number": 2, "outcome": "succeeded", "error_class": None,
                                "waited": clock.sleeps[0]}


def test_decorator_keeps_the_function_identity_and_arguments() -> None:
    @retry(policy())
    def add(a: int, b: int = 0) -> int:
        """Adds."""
        return a + b

    assert add(1, b=2) == 3
    assert add.__name__ == "add"
    assert add.__doc__ == "Adds."


def test_context_form_demands_with() -> None:
    r = retry(policy())
    with pytest.raises(RuntimeError, match="with attempt"):
        for _attempt in r:
            pass


def test_an_async_function_is_retried_as_a_coroutine() -> None:
    """Found by a probe: decorating an ``async def`` retried nothing and logged a success
    (calling it only made the coroutine; the error came when it was awaited)."""
    clock = FakeClock()
    fn = Script([ConnectionError(), ConnectionError()], result=42)

    async def fetch(x: int) -> object:
        return fn() if x == 1 else None

    r = retry(policy(), sleep=clock.sleep)
    assert asyncio.run(r(fetch)(1)) == 42
    assert fn.calls == 3 and clock.sleeps == [1.0, 2.0]
    assert [a.outcome for a in r.last_attempts] == [
        "failed-transient", "failed-transient", "succeeded"]
    assert asyncio.run(r.call(fetch, 1)) == 42 and fn.calls == 4
    assert r(fetch).__name__ == "fetch"


def test_an_async_function_gives_up_like_a_plain_one_and_never_blocks_the_loop() -> None:
    fn = Script([ConnectionError("down")] * 5)
    seen: list[float] = []

    async def fetch() -> object:
        return fn()

    async def main() -> None:
        ticker = asyncio.create_task(ticks())
        with pytest.raises(ConnectionError, match="down"):
            await retry(policy(max_attempts=3, initial_delay=0.05, max_delay=0.05))(fetch)()
        ticker.cancel()

    async def ticks() -> None:
        while True:
            seen.append(time.monotonic())
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert fn.calls == 3
    assert len(seen) >= 3  # the waits were asyncio.sleep: other tasks ran meanwhile


def test_a_generator_function_is_refused() -> None:
    def rows() -> Iterator[int]:
        yield 1

    async def arows() -> AsyncIterator[int]:
        yield 1

    for fn in (rows, arows):
        with pytest.raises(RetryUsageError, match="generator function"):
            retry(policy())(fn)
        with pytest.raises(RetryUsageError, match="generator function"):
            retry(policy()).call(fn)


@FORMS
@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_attempt_is_logged_unknown(run: Runner, stop: type[BaseException]
                                                  ) -> None:
    """Found by a probe: the attempt a KeyboardInterrupt or SystemExit ended was missing from
    the log (two calls, one row; none at all on the first call)."""
    for errors in ([stop()], [ConnectionError(), stop()]):
        fn = Script(errors)
        r = retry(policy(), sleep=FakeClock().sleep)
        with pytest.raises(stop):
            run(r, fn)
        assert len(r.last_attempts) == fn.calls == len(errors)
        assert r.last_attempts[-1].outcome == "unknown"
        assert r.last_attempts[-1].error_class == stop.__name__


@FORMS
def test_an_interrupt_while_waiting_closes_the_log(run: Runner) -> None:
    """Found by a probe: a KeyboardInterrupt during the backoff sleep left ``last_attempts``
    as the previous call's."""
    def sleep(seconds: float) -> None:
        raise KeyboardInterrupt

    r = retry(policy(), sleep=sleep)
    r.last_attempts = (RetryAttempt(9, "succeeded"),)  # a previous call's
    with pytest.raises(KeyboardInterrupt):
        run(r, Script([ConnectionError()]))
    assert [(a.number, a.outcome) for a in r.last_attempts] == [(1, "failed-transient")]
