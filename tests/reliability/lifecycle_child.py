"""The child process of the lifecycle fault suite: the story pipeline driven by one real process
that the parent kills, pauses or breaks at a chosen point.

Run with ``--zygote`` it is a fork server: Python start-up and the imports (PyArrow, DuckDB,
SQLAlchemy, psycopg) cost about a second, so the zygote imports everything once and forks one
child per request. A forked child is a real, separate process (its own connections, file
locks and leases) that the parent SIGKILLs or SIGSTOPs like any other. Requests and replies are
JSON lines on stdin/stdout: ``{"start": REQUEST}`` -> ``{"pid": N}`` and ``{"poll": N}`` ->
``{"code": C}`` (None while it runs, negative when a signal ended it). A child writes its stdout
and stderr to the files the request names, so every child's traceback is seen by the parent.

A REQUEST (see :func:`main`) names the work folder, engine, ledger, operation (``run``,
``backfill``, ``worker``), days, holder, lease TTL and at most one fault:

- ``kill`` at a point: SIGKILL itself there (``at:<point>`` is printed first);
- ``stop`` at a point: sleep ``delay`` seconds inside the attempt, print ``paused``, SIGSTOP
  itself; after the parent's SIGCONT print ``resumed`` and go on (the zombie writer);
- ``raise`` at ``before-finish`` / ``after-finish``: ``Ledger.finish_attempt`` of the task's
  successful attempt raises ``sqlalchemy.exc.OperationalError`` instead of recording it, or
  after recording it (the ledger failed after the write, or its commit's answer was lost);
- ``random``: print ``ready`` and run on; the parent SIGKILLs it after a random delay.

Points: ``extract`` / ``transform`` (inside the task, before its write: the story's hooks),
``transform_after`` (after transform's own write), ``in-write`` (inside the destination's write
transaction: between the DELETE and the INSERT on SQL engines, before the directory swap on
Parquet), ``before-finish`` / ``after-finish`` (around ``Ledger.finish_attempt`` of the task's
succeeded attempt, inside the transaction that finishes it; a ``stop`` at ``before-finish``
pauses just before that transaction begins). ``hit`` picks the occurrence (1 = the first).
Only test code is wrapped here; production code is not changed. ``controls: ["no-fencing"]``
turns the fencing check off in the child (the suite's control: then the zombie's stale rows
must be caught).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STOP_GUARD = threading.Lock()  # held around lease renewals: never SIGSTOP inside one


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Fault:
    """The one fault a child carries (see the module docstring)."""

    def __init__(self, spec: dict[str, Any] | None) -> None:
        spec = spec or {}
        self.kind: str = spec.get("kind", "none")
        self.point: str = spec.get("point", "")
        self.task: str = spec.get("task", "")
        self.delay: float = float(spec.get("delay", 0.0))
        self._left = int(spec.get("hit", 1))
        self._lock = threading.Lock()

    def reached(self, point: str, task: str = "") -> bool:
        """Count a pass through ``point`` (of ``task``); True on the chosen hit."""
        if self.kind == "none" or point != self.point or (self.task and task != self.task):
            return False
        with self._lock:
            self._left -= 1
            return self._left == 0

    def strike(self, point: str) -> None:
        """Kill or pause this process right here (the hit was reached)."""
        if self.kind == "kill":
            _say(f"at:{point}")
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.kind == "stop":
            time.sleep(self.delay)  # a random moment inside the attempt
            with STOP_GUARD:  # not in the middle of a lease renewal's transaction
                _say("paused")
                # Directed at THIS thread: it stops before running another line. (os.kill of
                # the process lets the kernel pick another thread to take the stop, and this
                # one can run on into its write before the whole group has stopped.)
                signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
            _say("resumed")


def _install(fault: Fault, hooks: dict[str, Any]) -> None:
    """Wrap the seams the fault needs (test-only wrappers around existing methods)."""
    from sqlalchemy.exc import OperationalError

    from twice.destinations import base, parquet
    from twice.destinations.commits import active_stamp
    from twice.engine import attempting
    from twice.ledger import Ledger

    renew = Ledger.renew_lease

    @functools.wraps(renew)
    def guarded_renew(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        with STOP_GUARD:
            return renew(self, *args, **kwargs)

    Ledger.renew_lease = guarded_renew  # type: ignore[method-assign]

    for point in ("extract", "transform", "transform_after"):
        def hook(ctx: Any, point: str = point) -> None:
            if fault.reached(point):
                fault.strike(point)
        hooks[point] = hook

    def in_write(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            stamp = active_stamp()
            task = "" if stamp is None else stamp.fence_key.split("/")[1]
            if fault.reached("in-write", task):
                fault.strike("in-write")
            return original(self, *args, **kwargs)
        return wrapper

    base.SqlDestination._after_delete = in_write(  # type: ignore[method-assign]
        base.SqlDestination._after_delete)
    parquet.ParquetDestination._before_swap = in_write(  # type: ignore[method-assign]
        parquet.ParquetDestination._before_swap)

    finish = Ledger.finish_attempt
    # A pause at before-finish lands before the transaction that finishes the attempt: a
    # process stopped INSIDE a ledger write transaction holds SQLite's write lock (as inside a
    # renewal, see STOP_GUARD), which blocks every other process instead of testing fencing.
    # A kill or a raise lands inside it, where nothing of the finish is recorded.
    stop_early = fault.kind == "stop"
    run_finish = attempting.AttemptRunner.finish

    @functools.wraps(run_finish)
    def finish_run(self: Any, record: Any, report: Any) -> Any:
        if report.ending == "succeeded" and fault.reached("before-finish", self.task.name):
            fault.strike("before-finish")
        return run_finish(self, record, report)

    if stop_early:
        attempting.AttemptRunner.finish = finish_run  # type: ignore[method-assign]

    @functools.wraps(finish)
    def faulty_finish(self: Ledger, uow_id: str, number: int, outcome: str, *args: Any,
                      **kwargs: Any) -> Any:
        unit = self.unit(uow_id) if outcome == "succeeded" else None
        task = "" if unit is None else unit.task
        if unit is not None and not stop_early and fault.reached("before-finish", task):
            strike_finish("before-finish", task)
        value = finish(self, uow_id, number, outcome, *args, **kwargs)  # type: ignore[arg-type]
        if unit is not None and fault.reached("after-finish", task):
            strike_finish("after-finish", task)
        return value

    def strike_finish(point: str, task: str) -> None:
        if fault.kind == "raise":
            _say(f"raised:{point}:{task}")
            raise OperationalError(
                "UPDATE twice_attempts", {}, Exception("disk I/O error (injected)")
            )
        fault.strike(point)

    Ledger.finish_attempt = faulty_finish  # type: ignore[method-assign]


def _intervals(days: list[int]) -> list[Any]:
    from tests.lifecycle.story import DAYS
    from twice.define.schedule import Schedule

    schedule = Schedule.daily("UTC")
    return [schedule.interval_for(DAYS[i]) for i in days]


def main(request: dict[str, Any]) -> int:
    """Build the story pipeline with the fault installed and run the requested operation.

    Prints ``ready`` before the operation and ``done <json>`` after it: the outcome of every
    unit (``run``, ``worker``) or the status of every planned unit (``backfill``).
    """
    from tests.lifecycle.story import build
    from twice.drivers.backfill import run_backfill
    from twice.drivers.worker import Worker
    from twice.engine.executor import Executor
    from twice.ledger import Ledger

    root = Path(request["root"])
    fault = Fault(request.get("fault"))
    hooks: dict[str, Any] = {}
    _install(fault, hooks)
    if "no-fencing" in request.get("controls", ()):  # the control: a zombie NOT fenced
        from twice.destinations import base, parquet

        base.check_fence = parquet.check_fence = lambda *args, **kwargs: None  # type: ignore[assignment]
    if "no-input-pinning" in request.get("controls", ()):  # a dependent's pins pass, whatever
        from twice.engine import inputs

        inputs.Pinned.confirm = lambda self, tasks=None: None  # type: ignore[method-assign]
    pipeline = build(root, request["engine"], request.get("pg"), hooks=hooks)
    intervals = _intervals(request["days"])
    ttl = float(request.get("lease_ttl", 1.0))
    holder = request["holder"]
    barrier = request.get("barrier")
    with Ledger.open(request["ledger"]) as ledger:
        if barrier:  # racers: everyone is ready (ledger opened) before anyone starts
            Path(f"{barrier}.{holder}").touch()
            while not Path(barrier).exists():
                time.sleep(0.005)
        _say("ready")
        op = request["op"]
        units: list[dict[str, Any]]
        if op == "run":
            result = Executor(pipeline, ledger, holder=holder, lease_ttl=ttl,
                              max_workers=1).run(intervals, request.get("tasks"))
            units = [{"task": u.task, "day": u.interval.start.date().isoformat(),
                      "outcome": u.outcome, "reason": u.reason} for u in result.units]
        elif op == "backfill":
            backfill = run_backfill(pipeline, ledger, intervals, tasks=request.get("tasks"),
                                    force=bool(request.get("force")), holder=holder,
                                    lease_ttl=ttl, repeat=request.get("repeat", ()))
            units = [{"task": r.task, "day": r.interval.start.date().isoformat(),
                      "outcome": r.status, "reason": r.reason} for r in backfill.runs]
        elif op == "worker":
            report = Worker(pipeline, ledger, intervals, tasks=request.get("tasks"),
                            name=holder, lease_ttl=ttl, poll=0.05).run()
            units = [{"task": u.task, "day": u.interval.start.date().isoformat(),
                      "outcome": u.outcome, "settlement": u.settlement, "reason": u.reason}
                     for u in report.units]
        else:
            raise SystemExit(f"unknown op {op!r}")
    _say("done " + json.dumps(units))
    return 0


def zygote() -> int:
    """Serve forks (see the module docstring)."""
    import traceback

    import pyarrow
    import pyarrow.compute
    import pyarrow.parquet  # noqa: F401
    import sqlalchemy  # noqa: F401

    import tests.lifecycle.story  # noqa: F401
    import twice.drivers.backfill
    import twice.drivers.worker  # noqa: F401
    from twice.destinations import duckdb, parquet, postgres, sqlite  # noqa: F401
    from twice.ledger import Ledger  # noqa: F401

    for line in sys.stdin:
        message = json.loads(line)
        if "poll" in message:
            try:
                pid, status = os.waitpid(int(message["poll"]), os.WNOHANG)
            except ChildProcessError:
                reply: dict[str, Any] = {"code": "gone"}
            else:
                if pid == 0:
                    reply = {"code": None}
                elif os.WIFSIGNALED(status):
                    reply = {"code": -os.WTERMSIG(status)}
                else:
                    reply = {"code": os.WEXITSTATUS(status)}
        else:
            request = message["start"]
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    out = open(request["out"], "w", buffering=1)
                    err = open(request["err"], "w", buffering=1)
                    os.dup2(out.fileno(), 1)
                    os.dup2(err.fileno(), 2)
                    sys.stdout, sys.stderr = out, err
                    code = main(request)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            reply = {"pid": pid}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    sys.exit(zygote() if sys.argv[1:] == ["--zygote"] else main(json.loads(sys.argv[1])))
