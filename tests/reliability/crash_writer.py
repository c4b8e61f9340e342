"""The writer the crash trials kill, plus the pipeline and the rows it writes.

Run as a script it is the child process: it builds the pipeline, installs ONE kill point (a
wrapper around an existing method, in this process only: production code is not changed) and
runs the executor over ``DAYS``. When the kill point is reached for the ``hit``-th time it prints
``at:<point>`` and sleeps; the parent then sends SIGKILL. ``--point none`` prints ``ready`` and
runs to the end (the parent kills it at a random time instead).

The task replaces the day's partition with the rows of ``version``; its ``reconcile`` answers
from the destination itself (SUCCEEDED only if the partition holds exactly this version's rows,
else NOT_FOUND so the same job id is written again). That is how a rerun after a crash knows
whether the killed attempt's write happened, without trusting the ledger's "running".
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor, RunResult
from twice.ledger import Ledger

FIRST_DAY = date(2026, 11, 1)
DAYS = 3
HOLDER = "crash-writer"

# kill points -> engines they apply to ("sql" = sqlite, duckdb, postgresql)
SQL_POINTS = ("task-start", "after-delete", "after-insert", "after-write",
              "before-ledger-commit", "after-ledger-commit")
PARQUET_POINTS = ("task-start", "before-swap", "after-swap", "between-renames", "after-write",
                  "before-ledger-commit", "after-ledger-commit")


def day(offset: int) -> date:
    return FIRST_DAY + timedelta(days=offset)


def intervals() -> list[Interval]:
    schedule = Schedule.daily("UTC")
    return [schedule.interval_for(day(i)) for i in range(DAYS)]


def rows_for(version: str, when: date) -> list[dict[str, Any]]:
    """Distinct, deterministic rows per version and day (old and new differ in count too)."""
    base = when.toordinal() % 1000
    if version == "old":
        return [{"id": i, "day": when, "amount": base + i, "note": "old"} for i in range(7)]
    return [{"id": 1000 + i, "day": when, "amount": base * 3 + i, "note": f"new-{i}"}
            for i in range(23)]


def build_pipeline(spec: str, version: str) -> Pipeline:
    """One task writing ``version``'s rows into ``spec``, one unit of work per day."""
    from twice.destinations import open_destination

    pipeline = Pipeline("crash", schedule=Schedule.daily("UTC"))

    def holds_version(ctx: TaskContext) -> bool:
        with open_destination(spec) as dest:
            if dest.schema() is None:
                return False
            found = dest.read_partition(ctx.interval).to_pylist()
        expected = rows_for(version, ctx.interval.start.date())
        return _canonical(found) == _canonical(expected)

    def reconcile(_job_id: str, ctx: TaskContext) -> RemoteState:
        return RemoteState.SUCCEEDED if holds_version(ctx) else RemoteState.NOT_FOUND

    @pipeline.task(
        retry=RetryPolicy(max_attempts=2, initial_delay=0.01, jitter="none",
                          transient=(ConnectionError,)),
        safe_repeat=True, timeout=60, transform_version=version, destination=spec,
        reconcile=reconcile,
    )
    def write(ctx: TaskContext) -> int:
        _hook("task-start")
        with open_destination(spec) as dest:
            result = dest.replace_partition(rows_for(version, ctx.interval.start.date()),
                                            ctx.interval)
        _hook("after-write")
        return result.rows_written

    return pipeline


def run(spec: str, ledger_url: str, version: str, *, holder: str = HOLDER,
        lease_ttl: float = 30.0) -> RunResult:
    pipeline = build_pipeline(spec, version)
    with Ledger.open(ledger_url) as ledger:
        executor = Executor(pipeline, ledger, holder=holder, lease_ttl=lease_ttl,
                            max_workers=1, poll_interval=0.01, observe_timeout=1.0)
        return executor.run(intervals())


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(row.items())) for row in rows)


# -- kill points (child process only) ---------------------------------------------------------

_ARMED: dict[str, int] = {}


def _hook(point: str) -> None:
    """Stop here for the parent's SIGKILL if ``point`` is armed and this is the chosen hit."""
    if point not in _ARMED:
        return
    _ARMED[point] -= 1
    if _ARMED[point] == 0:
        print(f"at:{point}", flush=True)
        time.sleep(600)


def _around(owner: Any, name: str, *, before: str | None = None,
            after: str | None = None) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before:
            _hook(before)
        value = original(*args, **kwargs)
        if after:
            _hook(after)
        return value

    setattr(owner, name, wrapper)


def arm(point: str, hit: int) -> None:
    """Install the wrapper that makes ``point`` reachable (methods that exist already)."""
    from twice.destinations import base, parquet

    _ARMED[point] = hit
    if point == "after-delete":
        _around(base.SqlDestination, "_after_delete", before=point)
    elif point == "after-insert":
        from twice.destinations import duckdb, postgres, sqlite

        for cls in (sqlite.SQLiteDestination, duckdb.DuckDBDestination,
                    postgres.PostgresDestination):
            _around(cls, "_insert_arrow", after=point)
    elif point == "before-swap":
        _around(parquet.ParquetDestination, "_before_swap", before=point)
    elif point == "between-renames":
        _around(parquet.ParquetDestination, "_between_renames", before=point)
    elif point == "after-swap":
        _around(parquet, "_exchange", after=point)
    elif point == "before-ledger-commit":
        _around(Ledger, "finish_attempt", before=point)
    elif point == "after-ledger-commit":
        _around(Ledger, "finish_attempt", after=point)
    elif point not in ("task-start", "after-write"):
        raise SystemExit(f"unknown kill point {point!r}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dest", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--point", default="none")
    parser.add_argument("--hit", type=int, default=1)
    parser.add_argument("--fallback", action="store_true",
                        help="Parquet: two renames instead of renameat2 (non-Linux path)")
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.point != "none":
        arm(args.point, args.hit)
    if args.fallback:
        from twice.destinations import parquet

        original_init = parquet.ParquetDestination.__init__

        def init(self: Any, *a: Any, **k: Any) -> None:
            original_init(self, *a, **k)
            self.use_exchange = False

        parquet.ParquetDestination.__init__ = init  # type: ignore[method-assign]
    print("ready", flush=True)
    result = run(args.dest, args.ledger, args.version, lease_ttl=args.lease_ttl)
    print("done " + ",".join(u.outcome for u in result.units), flush=True)
    return 0 if result.ok else 1


def zygote() -> int:
    """Serve forks: import everything once, then fork one writer per request.

    Python start-up and imports cost about a second; a forked writer is a real, separate
    process (its own file descriptors, locks and connections, killed with SIGKILL like any
    other) that starts in milliseconds. Requests and replies are JSON lines on stdin/stdout:
    ``{"argv": [...], "out": FILE}`` -> ``{"pid": N}`` (the writer prints to FILE) and
    ``{"wait": N}`` -> ``{"code": C}`` (negative: killed by that signal).
    """
    import json
    import traceback

    from twice.destinations import duckdb, parquet, postgres, sqlite  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        if "wait" in request:
            _, status = os.waitpid(request["wait"], 0)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            reply = {"code": code}
        else:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    out = open(request["out"], "w", buffering=1)
                    os.dup2(out.fileno(), 1)
                    sys.stdout = out
                    code = main(request["argv"])
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            reply = {"pid": pid}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    sys.exit(zygote() if sys.argv[1:] == ["--zygote"] else main(sys.argv[1:]))
