"""Run one attempt of a task and say what kind of ending it had.

The only judgement made here is the classification, and it is deliberately narrow:

- **unknown**: the attempt timed out (``AttemptTimeout``), its process died (``AttemptCrashed``),
  or it raised an error whose ``outcome`` attribute is ``"unknown"`` (``twice.remote``'s lost
  acknowledgements, 5xx answers to a submit, waits that gave up while the job ran). The remote
  side may have done the work, so this is never a failure and never blindly retried, even when
  the error's class (say ``ConnectionError``) is listed as transient.
- **transient**: the error's class is listed in ``RetryPolicy.transient``.
- **permanent**: everything else.

Isolation. ``thread`` (the default) runs the task in a daemon thread via
``twice.engine.timeouts.run_with_timeout``: on timeout the thread is NOT stopped, its side effects
may still happen and remote work it started continues, which is exactly why the outcome is unknown.
``process`` uses ``run_in_process`` (spawned child, terminated on timeout): local work stops, remote
work it submitted may still complete, so the outcome is still unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from twice.core.outcomes import Ending
from twice.core.policy import RetryPolicy
from twice.core.secrets import redact
from twice.define.load import load_pipeline
from twice.define.pipeline import NonFatal, Pipeline, Task, TaskContext
from twice.destinations.errors import DestinationUnavailableError
from twice.engine.owned_write import Landed, run_body
from twice.engine.timeouts import AttemptCrashed, AttemptTimeout, run_in_process, run_with_timeout
from twice.engine.verification import AcceptanceFailed
from twice.errors import ConflictError, InputsChangedError
from twice.remote.jobs import JobFailed, JobStatus, JobStillRunning

Isolation = Literal["thread", "process"]
# run_in_process needs a finite timeout; an attempt without one gets this (about ten years).
_UNBOUNDED = 10 * 365 * 86_400.0


@dataclass(frozen=True)
class AttemptReport:
    """How an attempt ended. ``nonfatals`` come back only from a child process (a thread
    records them as they happen); ``remote`` is a ``JobStatus`` the task returned."""

    ending: Ending
    value: Any = None
    error: BaseException | None = None
    nonfatals: tuple[NonFatal, ...] = ()
    remote: JobStatus | None = None
    written: Any = None  # the WriteResult when twice landed the returned output (write=)
    interrupted: bool = False  # KeyboardInterrupt in task code: record it, then stop the run
    intermediate: Any = None  # an intermediate= task's IntermediateUse (reused or computed)

    @property
    def error_text(self) -> str | None:
        if self.error is None:
            return None
        # masked here too: an exception class whose __str__ ignores its args keeps what
        # twice.engine.phase.mask_error rewrote
        return redact(f"{type(self.error).__name__}: {self.error}")


def is_unknown(error: BaseException) -> bool:
    """Whether ``error`` leaves the outcome unknown (see the module docstring)."""
    if isinstance(error, AttemptTimeout | AttemptCrashed):
        return True
    return getattr(error, "outcome", None) == "unknown"


def is_timeout(error: BaseException) -> bool:
    """A timeout raised inside task code: ``TimeoutError`` (``socket.timeout``, asyncio's and
    concurrent.futures' too) or a client library's timeout class (a class in its hierarchy
    named ``...Timeout``, ``...TimeoutError`` or ``...TimeoutException``: requests, httpx,
    urllib3, botocore). The request may have reached the service, so the outcome is unknown."""
    if isinstance(error, TimeoutError):
        return True
    return any(
        cls.__name__.endswith(("Timeout", "TimeoutError", "TimeoutException"))
        for cls in type(error).__mro__
    )


def classify(error: BaseException, policy: RetryPolicy, *,
             timeout_is_failure: bool = False) -> Ending:
    """unknown before transient before permanent: an unknown outcome is never 'just retried'.

    A timeout in task code is unknown too (reconcile first), unless the task declares that its
    timeouts leave nothing behind (``timeout_is_failure``): then the transient list decides."""
    if is_unknown(error):
        return "unknown"
    if is_timeout(error) and not timeout_is_failure:
        return "unknown"
    if isinstance(error, InputsChangedError):  # nothing landed; the driver identifies again
        return "transient"
    if isinstance(error, ConflictError):  # fenced: a newer writer owns the slice; never retry
        return "permanent"
    if isinstance(error, AcceptanceFailed):  # refused before landing: a retry is refused again
        return "permanent"
    if isinstance(error, DestinationUnavailableError):
        # the destination failed (locked, unreachable, out of space) and rolled the write
        # back: nothing landed, and the cause is a service, not the task (a commit that may
        # have landed is DestinationCommitUnknownError: unknown, above)
        return "transient"
    if policy.is_transient(error):
        return "transient"
    return "permanent"


def call_attempt(
    task: Task,
    ctx: TaskContext,
    *,
    timeout: float | None,
    isolation: Isolation = "thread",
    source_file: Path | None = None,
    body: Callable[[Task, TaskContext], Any] | None = None,
) -> AttemptReport:
    """Call the task once within ``timeout`` seconds and classify the ending.

    ``body`` replaces ``run_body`` in a thread (an ``intermediate=`` task's
    ``owned_write.intermediate_body``); process isolation always runs ``run_body``.

    A returned ``JobStatus`` is judged like the job it describes: DONE with ``errorResult`` is a
    ``JobFailed``, not DONE yet is an unknown outcome (the job is still running).
    """
    nonfatals: tuple[NonFatal, ...] = ()
    try:
        if isolation == "process":
            if source_file is None:
                raise ValueError("process isolation needs a pipeline loaded from a file")

            result = run_in_process(
                call_task, timeout or _UNBOUNDED, str(source_file), task.name, ctx
            )
            value, nonfatals = result.value, tuple(result.nonfatals)
        elif timeout is None:
            value = (body or run_body)(task, ctx)
        else:
            value = run_with_timeout(body or run_body, timeout, task, ctx)
    except Exception as exc:
        return AttemptReport(
            classify(exc, task.retry, timeout_is_failure=task.timeout_is_failure), error=exc
        )
    except (SystemExit, KeyboardInterrupt) as exc:
        # Task code ended the process's flow: its writes may or may not have committed, so the
        # outcome is unknown (settled from the commit record), never a silent stop.
        return AttemptReport(
            "unknown", error=TaskExited(exc), interrupted=isinstance(exc, KeyboardInterrupt)
        )
    written = intermediate = None
    if isinstance(value, Landed):
        value, written, intermediate = value.value, value.write, value.intermediate
    remote = value if isinstance(value, JobStatus) else None
    if remote is not None and remote.failed:
        error: Exception = JobFailed(remote)
        return AttemptReport(
            classify(error, task.retry, timeout_is_failure=task.timeout_is_failure), value,
            error, nonfatals, remote, written, intermediate=intermediate,
        )
    if remote is not None and not remote.done:
        error = JobStillRunning(remote.job_id, 0.0, remote.state)
        return AttemptReport("unknown", value, error, nonfatals, remote, written,
                             intermediate=intermediate)
    return AttemptReport("succeeded", value, None, nonfatals, remote, written,
                         intermediate=intermediate)


class TaskExited(Exception):
    """Task code raised ``SystemExit`` or ``KeyboardInterrupt``: recorded as an unknown outcome
    (its writes are settled from the destination's commit record)."""

    outcome = "unknown"

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        if isinstance(cause, SystemExit):
            text = f"task code called sys.exit({cause.code!r})"
        else:
            text = "task interrupted (KeyboardInterrupt); the run stops after recording it"
        super().__init__(text)


# -- process isolation: a task of a pipeline file, called in a child process ------------------

# Per process: a spawned child loads each file once, however many attempts it runs.
_LOADED: dict[tuple[str, int], Pipeline] = {}


@dataclass(frozen=True)
class TaskCallResult:
    """What ``call_task`` hands back across a process boundary."""

    value: Any
    nonfatals: tuple[NonFatal, ...]


def call_task(path: str, task_name: str, ctx: TaskContext) -> TaskCallResult:
    """Run one task of a pipeline file: a picklable entry point for child processes.

    Functions defined in a pipeline file live in a private module that a spawned child cannot
    import by name, so pickling ``task.fn`` fails there. Send ``(path, task_name, ctx)`` instead:
    the child loads the file (once per process) and calls the task. Non-fatal records come back
    in the result when ``ctx`` has no recorder (a recorder cannot report across processes).
    """
    file = Path(path).resolve()
    try:
        key = (str(file), file.stat().st_mtime_ns)
    except OSError:
        key = (str(file), -1)  # load_pipeline reports the missing file
    pipeline = _LOADED.get(key)
    if pipeline is None:
        pipeline = _LOADED[key] = load_pipeline(path)
    value = run_body(pipeline.get_task(task_name), ctx)
    return TaskCallResult(value=value, nonfatals=ctx.nonfatals)
