"""Per-attempt timeouts and the workflow deadline.

A timeout tells you when to stop *waiting*, not what happened. When an attempt times out, the
request may have reached the service, the job may still be running, and it may yet succeed: the
outcome is UNKNOWN, never "failed". Record it as unknown and reconcile (look the job up by its
deterministic id) before deciding to retry; retrying blindly is how rows get loaded twice.

Two ways to bound an attempt, with different guarantees:

- ``run_with_timeout`` runs the callable in a daemon thread. Python cannot kill a thread, so on
  timeout the work KEEPS RUNNING in the background (its side effects still happen) until it
  returns on its own; the thread is a daemon only so that it cannot keep the interpreter alive.
- ``run_in_process`` runs the callable in a child process and terminates it on timeout
  (SIGTERM, then SIGKILL after a grace period), so local work really stops. Remote work the child
  already submitted (a warehouse job, an HTTP request in flight) may still complete: still
  unknown.

``Deadline`` bounds the whole run: per-attempt timeouts should be smaller than it, and a retry
should only start if it can finish before it.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from typing import Any, Literal, ParamSpec, TypeVar, cast

from twice.errors import TwiceError

P = ParamSpec("P")
T = TypeVar("T")

StartMethod = Literal["spawn", "fork", "forkserver"]
_Context = SpawnContext | ForkContext | ForkServerContext


class AttemptTimeout(TwiceError, TimeoutError):
    """An attempt ran past its timeout. Its outcome is UNKNOWN, not failed.

    ``terminated`` says whether local work was stopped (process) or may still be running
    (thread); either way remote effects may still happen, so reconcile before retrying.
    """

    outcome = "unknown"

    def __init__(self, timeout: float, *, terminated: bool,
                 worker: threading.Thread | None = None) -> None:
        self.timeout = timeout
        self.terminated = terminated
        self.worker = worker  # the thread still running the attempt (thread isolation)
        where = (
            "the child process was terminated, but remote work it submitted may still complete"
            if terminated
            else "the work may still be running in a background thread"
        )
        super().__init__(
            f"attempt exceeded its {timeout:g} s timeout; outcome unknown: {where}"
        )


#: Timed-out attempt threads of this process, by the key their caller gave (``outliving``).
_OUTLIVING: dict[str, threading.Thread] = {}
_OUTLIVING_LOCK = threading.Lock()


def outliving(key: str, worker: threading.Thread) -> None:
    """Remember ``worker``, a timed-out attempt's thread, under ``key``: while it runs, the
    attempt can still cause its effects, so nothing may conclude that they never happened
    (:func:`still_running`)."""
    with _OUTLIVING_LOCK:
        for done in [name for name, thread in _OUTLIVING.items() if not thread.is_alive()]:
            del _OUTLIVING[done]
        if worker.is_alive():
            _OUTLIVING[key] = worker


def still_running(key: str) -> threading.Thread | None:
    """The timed-out thread remembered under ``key`` while it still runs, else None."""
    with _OUTLIVING_LOCK:
        worker = _OUTLIVING.get(key)
        if worker is not None and not worker.is_alive():
            del _OUTLIVING[key]
            return None
        return worker


class AttemptCrashed(TwiceError, RuntimeError):
    """The child process died without reporting a result (killed, segfault, os._exit).

    Like a timeout, the outcome is UNKNOWN: the child may have submitted remote work first.
    """

    outcome = "unknown"

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        super().__init__(
            f"attempt process exited with code {exitcode} without a result; outcome unknown"
        )


class WorkflowTimeout(TwiceError, TimeoutError):
    """The run's overall deadline has passed, or the next step cannot finish before it."""


def _check_timeout(timeout: float) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")


def run_with_timeout(
    fn: Callable[P, T], timeout: float, /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """Call ``fn(*args, **kwargs)`` in a daemon thread and wait at most ``timeout`` seconds.

    Returns the result or re-raises the exception of ``fn``. On timeout raises
    ``AttemptTimeout(terminated=False)``: the thread is NOT stopped and ``fn`` may still complete
    and cause its side effects later; treat the outcome as unknown. (A thread of our own rather
    than ``concurrent.futures``: executor threads are joined at interpreter exit, so one hung
    attempt would hang the process.)
    """
    _check_timeout(timeout)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, name=f"twice-attempt-{fn.__name__}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise AttemptTimeout(timeout, terminated=False, worker=worker)
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["result"]
    return result


def _die_with(parent: int) -> None:
    """End this process when its parent dies, and now if it already has: an attempt's child
    must not outlive the holder that started it. A holder killed with ``kill -9`` would
    otherwise leave it running, unseen: the next holder finds the holder's process gone, asks
    the service, hears "not found", and sends again while the orphan sends too. Linux's
    ``PR_SET_PDEATHSIG``, or a thread watching the parent elsewhere
    (:func:`twice.core.processes.die_with_parent`)."""
    from twice.core import processes

    processes.die_with_parent(parent)


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...],
           kwargs: dict[str, Any], parent: int | None = None) -> None:
    """Child-process entry point: send ("ok", result) or ("error", exception) to the parent."""
    if parent is not None:
        _die_with(parent)
    try:
        message: tuple[str, Any] = ("ok", fn(*args, **kwargs))
    except BaseException as exc:
        exc.add_note("".join(traceback.format_exception(exc)).rstrip())
        message = ("error", exc)
    try:
        conn.send(message)
    except Exception as exc:  # unpicklable result or exception
        conn.send(("error", RuntimeError(f"attempt result could not be sent back: {exc!r}")))
    finally:
        conn.close()


def run_in_process(
    fn: Callable[..., T],
    timeout: float,
    /,
    *args: Any,
    start_method: StartMethod = "spawn",
    grace: float = 1.0,
    **kwargs: Any,
) -> T:
    """Call ``fn(*args, **kwargs)`` in a child process; terminate it after ``timeout`` seconds.

    ``fn``, its arguments and its result must be picklable (a module-level function). The
    default start method is 'spawn': 'fork' from a process that has other threads running (for
    example attempts abandoned by ``run_with_timeout``) can copy a held lock and deadlock.
    ``start_method`` and ``grace`` are therefore not passed on to ``fn``.

    On timeout the child gets SIGTERM, then SIGKILL if it is still alive ``grace`` seconds
    later, and ``AttemptTimeout(terminated=True)`` is raised: local work has stopped, but remote
    work the child submitted may still complete, so the outcome is unknown. If the child dies
    without a result, ``AttemptCrashed`` is raised (also unknown). An exception raised by ``fn``
    is re-raised here with the child's traceback attached as a note.
    """
    _check_timeout(timeout)
    # typeshed declares ``Process`` on each concrete context, not on their base
    context = cast(_Context, multiprocessing.get_context(start_method))
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        # under forkserver the child's parent is the fork server, not this holder
        target=_child, name="twice-attempt", daemon=True,
        args=(sender, fn, args, kwargs, None if start_method == "forkserver" else os.getpid()),
    )
    process.start()
    sender.close()  # only the child writes; EOF on our end then means the child is gone
    try:
        if not wait([receiver], timeout):
            _stop(process, grace)
            raise AttemptTimeout(timeout, terminated=True)
        try:
            status, value = receiver.recv()
        except EOFError:
            process.join(grace)
            raise AttemptCrashed(process.exitcode) from None
        process.join(grace)
        if status == "error":
            raise value
        result: T = value
        return result
    finally:
        receiver.close()
        if process.is_alive():
            _stop(process, grace)


def _stop(process: multiprocessing.process.BaseProcess, grace: float) -> None:
    """SIGTERM, wait ``grace`` seconds, then SIGKILL: a child that ignores SIGTERM still dies."""
    process.terminate()
    process.join(grace)
    if process.is_alive():
        process.kill()
        process.join()


class Deadline:
    """The run's time budget on a monotonic clock (wall-clock jumps cannot extend it).

    ``check(needed)`` refuses to start a step that cannot finish in time, which is what Airflow
    misses when it schedules a retry past ``dagrun_timeout``; ``cap(t)`` keeps a per-attempt
    timeout inside what is left. ``started`` defaults to now; ``clock`` is injectable for tests.
    """

    __slots__ = ("clock", "started", "timeout")

    def __init__(
        self,
        timeout: float,
        started: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        _check_timeout(timeout)
        self.timeout = timeout
        self.clock = clock
        self.started = clock() if started is None else started

    def __repr__(self) -> str:
        return f"Deadline(timeout={self.timeout!r}, started={self.started!r})"

    @property
    def ends(self) -> float:
        """The deadline on ``clock``'s scale."""
        return self.started + self.timeout

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        """Seconds left before the deadline, never negative."""
        return max(0.0, self.ends - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.ends

    def check(self, needed: float = 0.0) -> None:
        """Raise ``WorkflowTimeout`` if the deadline passed or ``needed`` seconds do not fit."""
        left = self.ends - self.clock()
        if left <= 0:
            raise WorkflowTimeout(
                f"workflow timeout of {self.timeout:g} s passed {-left:.3g} s ago"
            )
        if needed > left:
            raise WorkflowTimeout(
                f"next step needs {needed:g} s but only {left:.3g} s remain of the "
                f"{self.timeout:g} s workflow timeout"
            )

    def cap(self, attempt_timeout: float | None) -> float:
        """The timeout to give the next attempt: its own timeout, but never past the deadline.

        Raises ``WorkflowTimeout`` if no time is left at all.
        """
        self.check()
        left = self.remaining()
        return left if attempt_timeout is None else min(attempt_timeout, left)
