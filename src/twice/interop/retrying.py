"""In-process retries with twice semantics: ``twice.retry``.

In the spirit of ``stamina`` and ``tenacity``, but counted and bounded the way the rest of twice
is, so a policy means the same thing in the planner, the executor and a plain function call:

- the budget is a :class:`twice.core.policy.RetryPolicy`; ``max_attempts`` counts the first try
  (``max_attempts=3`` is at most three calls, never four);
- only errors declared transient are retried (the policy's ``transient`` classes, plus ``on``:
  classes or a predicate); anything else propagates at once, after one call. ``KeyboardInterrupt``
  and other non-``Exception`` errors are never retried;
- the waits are the policy's capped exponential backoff with its jitter
  (:func:`twice.core.backoff.jittered_delay`; ``additive`` may lengthen a wait by 25 %, the deadline
  check below uses the wait actually drawn);
- with a ``deadline`` an attempt is started only if the wait before it plus its expected duration
  still fit (tenacity's ``stop_before_delay`` ignores the attempt's own duration); a refusal
  raises :class:`RetryDeadlineExceeded` chained to the last error, without sleeping first;
- every call leaves an attempt log (:class:`RetryAttempt` rows: outcome, error class, seconds
  waited before it) in ``last_attempts`` and, if given, appended to the caller's ``log`` list;
  an attempt interrupted by ``KeyboardInterrupt`` or ``SystemExit`` is logged ``unknown``;
- an ``async def`` function is retried as a coroutine (the decorator and ``call`` return one;
  the waits are ``asyncio.sleep`` unless ``sleep`` is injected). A generator function is
  refused (:class:`RetryUsageError`): calling it runs nothing, so there is nothing to retry.

Three forms, one behaviour::

    policy = RetryPolicy(max_attempts=4, initial_delay=0.5, transient=(ConnectionError,))

    @twice.retry(policy)
    def fetch(url: str) -> bytes: ...

    data = twice.retry(policy).call(fetch_once, url)

    for attempt in twice.retry(policy):
        with attempt:
            data = fetch_once(url)

Success on the first try is the fast path: no clock reads without a deadline and no allocation
(its log is a shared constant). ``sleep``, ``clock`` (monotonic seconds) and ``rng`` are
injectable so tests run without waiting. ``last_attempts`` is per ``Retrying`` object: threads
sharing one object should pass their own ``log`` list via :func:`retry` instead.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from twice.core.backoff import jittered_delay
from twice.core.outcomes import RetryOutcome
from twice.core.policy import RetryPolicy
from twice.core.timescale import nonnegative_seconds
from twice.errors import TwiceError

P = ParamSpec("P")
T = TypeVar("T")

Predicate = Callable[[BaseException], bool]
Transient = type[BaseException] | tuple[type[BaseException], ...] | Predicate


class DeadlineLike(Protocol):
    """What :class:`twice.engine.timeouts.Deadline` offers (duck-typed to keep this module
    light)."""

    def remaining(self) -> float: ...


class RetryDeadlineExceeded(TwiceError, TimeoutError):
    """The next attempt was not started: its wait plus its expected duration would pass the
    deadline. ``__cause__`` is the last attempt's error (None if no attempt could start);
    ``attempts`` is the attempt log, ending with the refused ``not-started`` row."""

    def __init__(self, message: str, attempts: tuple[RetryAttempt, ...]) -> None:
        super().__init__(message)
        self.attempts = attempts


class RetryUsageError(TwiceError, TypeError):
    """``twice.retry`` cannot retry this callable as asked; the message says what to do."""


@dataclass(frozen=True, slots=True)
class RetryAttempt:
    """One row of the attempt log: attempt ``number`` (from 1), how it ended, and the seconds
    slept before it. ``unknown`` is an error whose class says its outcome is unknown (a timeout,
    a lost acknowledgement: ``outcome = "unknown"`` on the exception class); it is retried only
    if declared transient, like any other error."""

    number: int
    outcome: RetryOutcome
    error_class: str | None = None
    waited: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "outcome": self.outcome,
                "error_class": self.error_class, "waited": self.waited}


_FIRST_TRY_OK: tuple[RetryAttempt, ...] = (RetryAttempt(1, "succeeded"),)


def _class_name(error: BaseException) -> str:
    cls = type(error)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class Retrying:
    """A retry loop for ``policy`` (``twice.retry``): use it as a decorator, ``.call(fn, ...)``
    or ``for/with``. Reusable and cheap to create.

    ``on`` adds transient errors to the policy's (classes, or a predicate on the error).
    ``deadline`` is seconds per call (from its start, on ``clock``) or a shared
    :class:`twice.engine.timeouts.Deadline`; it needs ``attempt_duration`` (default: the policy's
    ``attempt_timeout``), the time an attempt is expected to take at most.
    """

    __slots__ = ("_budget", "_clock", "_deadline", "_duration", "_log", "_on_types",
                 "_predicate", "_rng", "_sleep", "last_attempts", "policy")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        on: Transient | None = None,
        deadline: float | DeadlineLike | None = None,
        attempt_duration: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        log: list[RetryAttempt] | None = None,
    ) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a twice.RetryPolicy, got {type(policy).__name__}")
        types: tuple[type[BaseException], ...] = policy.transient
        predicate: Predicate | None = None
        if isinstance(on, type) and issubclass(on, BaseException):
            types = (*types, on)
        elif isinstance(on, tuple):
            for cls in on:
                if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                    raise TypeError(f"on must list exception classes, got {cls!r}")
            types = (*types, *on)
        elif on is not None:
            if isinstance(on, type) or not callable(on):
                raise TypeError(f"on must be exception classes or a predicate, got {on!r}")
            predicate = on
        self._budget: float | None = None
        self._deadline: DeadlineLike | None = None
        if deadline is not None:
            if isinstance(deadline, int | float):  # a bool is refused by nonnegative_seconds
                self._budget = nonnegative_seconds(deadline, "deadline")
            elif callable(getattr(deadline, "remaining", None)):
                self._deadline = deadline
            else:
                raise ValueError(f"deadline must be seconds or a Deadline, got {deadline!r}")
            expected = policy.attempt_timeout if attempt_duration is None else attempt_duration
            if expected is None:
                raise ValueError(
                    "attempt_duration is required with a deadline (or set the policy's "
                    "attempt_timeout): an attempt is started only if it can finish in time"
                )
            self._duration = nonnegative_seconds(expected, "attempt_duration")
        else:
            self._duration = 0.0 if attempt_duration is None else nonnegative_seconds(
                attempt_duration, "attempt_duration")
        if log is not None and not isinstance(log, list):
            raise TypeError("log must be a list (attempt rows are appended to it)")
        self.policy = policy
        self._on_types = types
        self._predicate = predicate
        self._sleep = sleep
        self._clock = clock
        self._rng = rng
        self._log = log
        self.last_attempts: tuple[RetryAttempt, ...] = ()

    def __repr__(self) -> str:
        return f"Retrying(policy={self.policy!r})"

    # -- classification --------------------------------------------------------------------

    def is_transient(self, error: BaseException) -> bool:
        """Declared transient: listed in the policy or ``on``, or accepted by the predicate."""
        if self._on_types and isinstance(error, self._on_types):
            return True
        return self._predicate is not None and bool(self._predicate(error))

    # -- forms -----------------------------------------------------------------------------

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` under the policy; returns its result or raises (see module).
        For an ``async def`` ``fn``, a coroutine to await."""
        if _is_async(fn):
            return cast(T, self._slow_async(cast(Callable[..., Awaitable[Any]], fn), args, kwargs))
        if self._budget is None and self._deadline is None:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                return self._slow(fn, args, kwargs, exc)
            except BaseException as exc:
                _Run(self).interrupted(exc)
                raise
            self.last_attempts = _FIRST_TRY_OK
            if self._log is not None:
                self._log.append(_FIRST_TRY_OK[0])
            return result
        return self._slow(fn, args, kwargs, None)

    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]:
        """Decorator form: every call of ``fn`` runs under the policy."""
        if _is_async(fn):

            @functools.wraps(fn)
            async def retried(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await self._slow_async(cast(Callable[..., Awaitable[Any]], fn), args,
                                              kwargs)

            return cast(Callable[P, T], retried)
        if self._budget is not None or self._deadline is not None:

            @functools.wraps(fn)
            def bounded(*args: P.args, **kwargs: P.kwargs) -> T:
                return self._slow(fn, args, kwargs, None)

            return bounded

        log, first_ok = self._log, _FIRST_TRY_OK  # closure cells: the fast path's only reads

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                return self._slow(fn, args, kwargs, exc)
            except BaseException as exc:
                _Run(self).interrupted(exc)
                raise
            self.last_attempts = first_ok
            if log is not None:
                log.append(first_ok[0])
            return result

        return wrapper

    def __iter__(self) -> Iterator[AttemptContext]:
        """Context form: ``for attempt in retrying: with attempt: ...``."""
        run = _Run(self)
        run.check_start()
        while True:
            attempt = AttemptContext(run)
            yield attempt
            if attempt.done:
                return
            if not attempt.entered:
                raise RuntimeError("twice.retry: each attempt must be used as `with attempt:`")

    # -- internals -------------------------------------------------------------------------

    def _slow(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
              first_error: Exception | None) -> T:
        run = _Run(self)
        if first_error is not None:
            self._wait(run.failed(first_error), run)  # raises unless a retry is due
        else:
            run.check_start()
        while True:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                self._wait(run.failed(exc), run)
                continue
            except BaseException as exc:
                run.interrupted(exc)
                raise
            run.succeeded()
            return result

    def _wait(self, delay: float, run: _Run) -> None:
        """Sleep the backoff; interrupted, the log closes with the attempts made."""
        if delay > 0:
            try:
                self._sleep(delay)
            except BaseException:
                run._close()
                raise

    async def _slow_async(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> T:
        """``_slow`` for a coroutine function: each attempt awaited, each wait awaited too."""
        run = _Run(self)
        run.check_start()
        while True:
            try:
                result = await fn(*args, **kwargs)
            except Exception as exc:
                delay = run.failed(exc)
                try:
                    if delay > 0 and self._sleep is time.sleep:  # never block the event loop
                        await asyncio.sleep(delay)
                    elif delay > 0:
                        slept = cast(Any, self._sleep)(delay)
                        if inspect.isawaitable(slept):
                            await slept
                except BaseException:  # cancelled while waiting: the log closes
                    run._close()
                    raise
                continue
            except BaseException as exc:  # cancelled, interrupted: not retried
                run.interrupted(exc)
                raise
            run.succeeded()
            return result


class AttemptContext:
    """One attempt of the context form: ``with attempt:`` runs it once; a transient error with
    budget left is swallowed (after the backoff wait) so the loop continues."""

    __slots__ = ("done", "entered", "number", "run")

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.number = run.number
        self.entered = False
        self.done = False

    def __enter__(self) -> AttemptContext:
        if self.entered:
            raise RuntimeError("twice.retry: an attempt can be entered only once")
        self.entered = True
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 _tb: TracebackType | None) -> bool:
        if error is None:
            self.done = True
            self.run.succeeded()
            return False
        if not isinstance(error, Exception):
            self.done = True
            self.run.interrupted(error)
            return False
        self.run.owner._wait(self.run.failed(error), self.run)  # raises unless a retry is due
        return True


class _Run:
    """The state of one retried call: attempt number, log, wait before the next attempt."""

    __slots__ = ("ends", "log", "number", "owner", "waited")

    def __init__(self, owner: Retrying) -> None:
        self.owner = owner
        self.number = 1
        self.waited = 0.0
        self.log: list[RetryAttempt] = []
        self.ends: float | None = None
        if owner._budget is not None:
            self.ends = owner._clock() + owner._budget

    def _remaining(self) -> float | None:
        owner = self.owner
        if owner._deadline is not None:
            return owner._deadline.remaining()
        if self.ends is not None:
            return self.ends - owner._clock()
        return None

    def _record(self, row: RetryAttempt) -> None:
        self.log.append(row)
        if self.owner._log is not None:
            self.owner._log.append(row)

    def _close(self) -> tuple[RetryAttempt, ...]:
        attempts = tuple(self.log)
        self.owner.last_attempts = attempts
        return attempts

    def check_start(self, delay: float = 0.0, cause: BaseException | None = None) -> None:
        """Refuse attempt ``number`` if ``delay`` + its expected duration pass the deadline."""
        left = self._remaining()
        if left is None:
            return
        needed = delay + self.owner._duration
        if needed <= left and left > 0:
            return
        self._record(RetryAttempt(self.number, "not-started", None, 0.0))
        attempts = self._close()
        message = (
            f"twice.retry: attempt {self.number} of {self.owner.policy.max_attempts} not "
            f"started: it needs {needed:.3g} s (wait {delay:.3g} s + expected duration "
            f"{self.owner._duration:.3g} s) but only {max(left, 0.0):.3g} s remain before "
            "the deadline"
        )
        raise RetryDeadlineExceeded(message, attempts) from cause

    def succeeded(self) -> None:
        self._record(RetryAttempt(self.number, "succeeded", None, self.waited))
        self._close()

    def interrupted(self, error: BaseException) -> None:
        """Record an attempt ended by a ``BaseException`` that is not an ``Exception``
        (``KeyboardInterrupt``, ``SystemExit``, a cancellation): never retried, its outcome
        unknown; the caller re-raises it."""
        self._record(RetryAttempt(self.number, "unknown", _class_name(error), self.waited))
        self._close()

    def failed(self, error: Exception) -> float:
        """Record a failed attempt, then raise it, or return the wait before the next
        attempt (which the caller sleeps)."""
        owner = self.owner
        policy = owner.policy
        transient = owner.is_transient(error)
        if getattr(type(error), "outcome", None) == "unknown":
            outcome: RetryOutcome = "unknown"
        else:
            outcome = "failed-transient" if transient else "failed-permanent"
        self._record(RetryAttempt(self.number, outcome, _class_name(error), self.waited))
        if not transient:
            self._close()
            raise error
        if not policy.allows_another(self.number):
            self._close()
            error.add_note(
                f"twice.retry: gave up after {self.number} attempts "
                f"(max_attempts={policy.max_attempts} counts the first try)"
            )
            raise error
        delay = jittered_delay(policy, self.number, owner._rng)
        self.number += 1
        self.check_start(delay, error)
        self.waited = delay
        return delay


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` makes a coroutine to await (then retried as one); a generator
    function is refused: calling it runs nothing, its errors come while it is iterated."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise RetryUsageError(
            f"twice.retry cannot retry the generator function {getattr(fn, '__qualname__', fn)!r}"
            ": calling it runs nothing (its errors come while it is iterated). Retry the "
            "function that consumes it, or the call each item needs"
        )
    return inspect.iscoroutinefunction(fn)


#: ``retry(policy, ...)`` builds the loop; the name users call (``twice.retry``).
retry = Retrying


__all__ = ["AttemptContext", "RetryAttempt", "RetryDeadlineExceeded", "RetryUsageError",
           "Retrying", "retry"]
