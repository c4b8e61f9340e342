"""A real local remote-job service: DuckDB SQL jobs under client-selected ids.

Jobs run in background threads against one DuckDB database file. The job table lives in that
same file, and a job's statement and its DONE row commit in ONE transaction, so the table never
says DONE for work that was rolled back, nor RUNNING for work that committed. That is what lets
status survive a restart honestly: a job still PENDING/RUNNING in the table when a new service
opens the file belonged to a process that ended, its transaction was rolled back, and it is
reported DONE with ``errorResult`` ``backendError`` (confirmed failed, nothing committed).

Semantics follow ``twice.remote.jobs``: reusing an id raises ``DuplicateJob`` (``submit_or_
inspect`` then returns the existing job), DONE with ``error_result`` is a failure, and ``cancel``
only *requests* a cancel (``connection.interrupt()``): a job that finishes first succeeds.

Config keys: ``query`` (SQL, required), ``destination`` (optional table: the query's result
replaces it), ``maximum_bytes_billed`` (optional: a job whose Parquet estimate is over it ends
DONE with ``bytesBilledLimitExceeded`` without running, as BigQuery does).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twice.core.resources import Closeable
from twice.remote.jobs import (
    STOPPED,
    Clock,
    DuplicateJob,
    Estimate,
    JobError,
    JobNotFound,
    JobState,
    JobStatus,
    bytes_billed_exceeded,
    config_bytes_limit,
    config_query,
    utc_now,
)

_LIVE: set[str] = set()  # service instances alive in this process (their jobs may be running)
_LIVE_LOCK = threading.Lock()

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS twice_jobs (
        job_id VARCHAR PRIMARY KEY,
        config VARCHAR NOT NULL,
        state VARCHAR NOT NULL,
        owner VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        started_at TIMESTAMPTZ,
        ended_at TIMESTAMPTZ,
        error_reason VARCHAR,
        error_message VARCHAR,
        errors VARCHAR,
        result_rows BIGINT)""",
    """CREATE TABLE IF NOT EXISTS twice_job_cancels (
        job_id VARCHAR NOT NULL, requested_at TIMESTAMPTZ NOT NULL)""",
)


def _error_reason(exc: BaseException) -> str:
    """BigQuery's reason vocabulary for a DuckDB exception (for retry classification)."""
    import duckdb

    if isinstance(exc, duckdb.InterruptException):
        return "stopped"
    if isinstance(exc, duckdb.ParserException | duckdb.BinderException | duckdb.CatalogException):
        return "invalidQuery"
    if isinstance(exc, duckdb.ConstraintException | duckdb.ConversionException):
        return "invalid"
    if isinstance(exc, duckdb.OutOfMemoryException):
        return "resourcesExceeded"
    if isinstance(exc, duckdb.TransactionException | duckdb.IOException):
        return "backendError"
    return "internalError"


class DuckDBJobs(Closeable):
    """Run DuckDB SQL as jobs with client-selected ids; see the module docstring.

    ``datasets`` maps view names to Parquet directories (hive partitions): each job sees them as
    views, and ``estimate`` measures a query over them with
    ``twice.remote.dry_run.estimate_parquet``.
    """

    def __init__(
        self,
        database: str | Path,
        *,
        datasets: Mapping[str, str | Path] | None = None,
        name: str = "duckdb",
        clock: Clock | None = None,
    ) -> None:
        import duckdb

        self._name = name
        self._clock = clock or utc_now
        self._datasets = {k: Path(v) for k, v in (datasets or {}).items()}
        self._db = duckdb.connect(str(database))
        self._meta = self._db.cursor()
        self._lock = threading.RLock()
        self._running: dict[str, Any] = {}  # job id -> the cursor running it
        self._threads: dict[str, threading.Thread] = {}
        self._owner = f"{uuid.uuid4()}"
        for statement in _SCHEMA:
            self._meta.execute(statement)
        self._recover_orphans()
        with _LIVE_LOCK:
            _LIVE.add(self._owner)

    @property
    def name(self) -> str:
        return self._name

    # -- the API -----------------------------------------------------------------------------

    def submit(self, job_id: str, config: Mapping[str, Any]) -> JobStatus:
        """Create job ``job_id`` and start it in the background; ``DuplicateJob`` if it exists."""
        config_query(config)
        if not isinstance(job_id, str) or not job_id:
            raise ValueError("job_id: a non-empty string is required")
        config_bytes_limit(config)
        now = self._clock()
        with self._lock:
            exists = self._meta.execute(
                "SELECT 1 FROM twice_jobs WHERE job_id = ?", [job_id]
            ).fetchone()
            if exists:
                raise DuplicateJob(job_id)
            self._meta.execute(
                "INSERT INTO twice_jobs (job_id, config, state, owner, created_at) "
                "VALUES (?, ?, 'PENDING', ?, ?)",
                [job_id, json.dumps(dict(config), default=str), self._owner, now],
            )
            thread = threading.Thread(
                target=self._run, args=(job_id, dict(config)), name=f"duckdb-job-{job_id}",
                daemon=True,
            )
            self._threads[job_id] = thread
            thread.start()
        return self.get(job_id)

    def get(self, job_id: str) -> JobStatus:
        """The job's status as the job table says now (``JobNotFound`` if there is none)."""
        with self._lock:
            row = self._meta.execute(
                "SELECT job_id, state, created_at, started_at, ended_at, error_reason, "
                "error_message, errors, result_rows FROM twice_jobs WHERE job_id = ?",
                [job_id],
            ).fetchone()
            now = self._clock()
        if row is None:
            raise JobNotFound(job_id)
        _, state, created, started, ended, reason, message, errors, rows = row
        error_result = None if reason is None else JobError(reason, message or "")
        listed = tuple(JobError(e["reason"], e["message"]) for e in json.loads(errors or "[]"))
        statistics: dict[str, Any] = {"creationTime": created.isoformat()}
        if started is not None:
            statistics["startTime"] = started.isoformat()
        if ended is not None:
            statistics["endTime"] = ended.isoformat()
        if rows is not None:
            statistics["resultRows"] = int(rows)
        return JobStatus(
            job_id=job_id, state=JobState(state), observed_at=now, service=self._name,
            error_result=error_result, errors=listed, statistics=statistics,
        )

    def cancel(self, job_id: str) -> JobStatus:
        """Request a cancel: interrupt the job's connection if it runs. Returns at once; the
        job may still finish successfully, so poll ``get`` to learn what happened."""
        with self._lock:
            status = self.get(job_id)
            if status.done:
                return status
            self._meta.execute(
                "INSERT INTO twice_job_cancels VALUES (?, ?)", [job_id, self._clock()]
            )
            cursor = self._running.get(job_id)
        if cursor is not None:
            cursor.interrupt()
        return self.get(job_id)

    def estimate(self, query: str, config: Mapping[str, Any] | None = None) -> Estimate:
        """A dry run: bytes ``query`` reads from the Parquet datasets (nothing runs)."""
        from twice.remote.dry_run import estimate_parquet

        return estimate_parquet(query, self._datasets)

    def wait_idle(self, timeout: float | None = None) -> None:
        """Join the background threads (for tests and orderly shutdown)."""
        for thread in list(self._threads.values()):
            thread.join(timeout)

    def close(self) -> None:
        """Interrupt running jobs, wait for them to record their end, close the database."""
        with self._lock:
            cursors = list(self._running.values())
        for cursor in cursors:
            cursor.interrupt()
        self.wait_idle()
        with _LIVE_LOCK:
            _LIVE.discard(self._owner)
        self._meta.close()
        self._db.close()

    # -- internals ---------------------------------------------------------------------------

    def _recover_orphans(self) -> None:
        """PENDING/RUNNING jobs whose owner is not alive in this process ended with it.

        DuckDB locks the file against other processes, so a job another process was running is
        not running now; its transaction (statement + DONE row) was rolled back.
        """
        with _LIVE_LOCK:
            live = set(_LIVE)
        rows = self._meta.execute(
            "SELECT job_id, owner FROM twice_jobs WHERE state IN ('PENDING', 'RUNNING')"
        ).fetchall()
        for job_id, owner in rows:
            if owner in live:
                continue
            self._meta.execute(
                "UPDATE twice_jobs SET state = 'DONE', ended_at = ?, error_reason = "
                "'backendError', error_message = ?, errors = ? WHERE job_id = ?",
                [self._clock(), _ORPHANED,
                 json.dumps([JobError("backendError", _ORPHANED).to_api()]), job_id],
            )

    def _cancel_requested(self, job_id: str) -> bool:
        with self._lock:
            row = self._meta.execute(
                "SELECT count(*) FROM twice_job_cancels WHERE job_id = ?", [job_id]
            ).fetchone()
        return bool(row and row[0])

    def _finish_failed(self, job_id: str, error: JobError) -> None:
        with self._lock:
            self._meta.execute(
                "UPDATE twice_jobs SET state = 'DONE', ended_at = ?, error_reason = ?, "
                "error_message = ?, errors = ? WHERE job_id = ?",
                [self._clock(), error.reason, error.message, json.dumps([error.to_api()]),
                 job_id],
            )

    def _over_limit(self, config: Mapping[str, Any]) -> JobError | None:
        limit = config.get("maximum_bytes_billed")
        if limit is None or not self._datasets:
            return None
        try:
            estimate = self.estimate(str(config["query"]))
        except ValueError:
            return None  # not a query the estimator understands: DuckDB will judge it
        if estimate.bytes <= int(limit):
            return None
        return bytes_billed_exceeded(limit, estimate.bytes)

    def _run(self, job_id: str, config: dict[str, Any]) -> None:
        cursor = self._db.cursor()
        try:
            if self._cancel_requested(job_id):
                self._finish_failed(job_id, STOPPED)
                return
            over = self._over_limit(config)
            if over is not None:
                self._finish_failed(job_id, over)
                return
            for view, root in self._datasets.items():
                glob = str(root / "**" / "*.parquet").replace("'", "''")
                cursor.execute(
                    f'CREATE OR REPLACE TEMP VIEW "{view}" AS SELECT * FROM '
                    f"read_parquet('{glob}', hive_partitioning = true)"
                )
            with self._lock:
                self._running[job_id] = cursor
                self._meta.execute(
                    "UPDATE twice_jobs SET state = 'RUNNING', started_at = ? WHERE job_id = ?",
                    [self._clock(), job_id],
                )
            if self._cancel_requested(job_id):
                raise _Cancelled
            query = str(config["query"])
            destination = config.get("destination")
            cursor.execute("BEGIN TRANSACTION")
            if destination:
                name = str(destination).replace('"', '""')
                cursor.execute(f'CREATE OR REPLACE TABLE "{name}" AS {query}')
                counted = cursor.execute(f'SELECT count(*) FROM "{name}"').fetchone()
                rows = None if counted is None else int(counted[0])
            else:
                result = cursor.execute(query).fetchall()
                rows = len(result)
            cursor.execute(
                "UPDATE twice_jobs SET state = 'DONE', ended_at = ?, result_rows = ? "
                "WHERE job_id = ?",
                [self._clock(), rows, job_id],
            )
            cursor.execute("COMMIT")
        except _Cancelled:
            self._finish_failed(job_id, STOPPED)
        except Exception as exc:
            try:
                cursor.execute("ROLLBACK")
            except Exception:
                pass
            reason = _error_reason(exc)
            error = STOPPED if reason == "stopped" else JobError(
                reason, f"{type(exc).__name__}: {exc}"
            )
            self._finish_failed(job_id, error)
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            cursor.close()


class _Cancelled(Exception):
    """A cancel requested before the statement began."""


_ORPHANED = (
    "the process running this job ended before it finished; its transaction (statement and "
    "DONE row together) was rolled back, so nothing it did was committed"
)
