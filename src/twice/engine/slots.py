"""Slots: pool slots held while the work may continue, and one writer per embedded file.

An attempt takes its slots before it starts. If it ends (succeeded or failed) they are given
back. If its outcome is unknown and a remote job may still run, the slots stay held: in this
process while this run observes the job, and in the ledger (a LedgerPool) under a holder keyed by
the unit and attempt, with no expiry, so they outlive the run and the process; a task with a
``reconcile`` function has its holding keyed by its job from the attempt's start, so a crash
mid-attempt cannot lose it either. The ledger holding is released when the job is confirmed
ended (``job_ended``: succeeded, failed, not found, in this run or a later one), or once an
operator resolves the attempt (``twice resolve``: the next acquisition of the pool releases
holdings of closed attempts). A pool that is not shared (``shared_pools=False``) has no durable
memory: it keeps the slots only while this run observes the job. ``SlotHolding`` owns what it
holds (the pool, its lease, a timed-out attempt's thread); no other phase reads it.
"""

from __future__ import annotations

import contextlib
import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from twice.core.outcomes import UNSETTLED_OUTCOMES
from twice.engine.attempt import AttemptReport
from twice.engine.evidence import EXECUTOR_SOURCE
from twice.engine.phase import Account, Phase, Stop, UnitScope
from twice.engine.pool import (
    LedgerLease,
    LedgerPool,
    PoolHeldByJob,
    PoolLease,
    PoolTimeout,
    SlotPool,
)
from twice.engine.timeouts import outliving
from twice.errors import OutcomeUnknownError

if TYPE_CHECKING:
    pass


class FileWriters:
    """One writer at a time per embedded destination file (SQLite, DuckDB, Parquet), on every
    path: embedded engines take one writer per file, so attempts of one process queue for the
    file instead of failing with lock or catalog conflicts. Server engines need no lock here."""

    EMBEDDED = ("sqlite", "duckdb", "parquet")

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    def holding(self, spec: str) -> AbstractContextManager[object]:
        lock = self._lock(spec)
        return contextlib.nullcontext() if lock is None else lock

    def held_if_free(self, spec: str) -> contextlib.ExitStack | None:
        """The file's writer taken without waiting (held until the stack closes), or None
        when another attempt holds it now."""
        held = contextlib.ExitStack()
        lock = self._lock(spec)
        if lock is not None:
            if not lock.acquire(blocking=False):
                return None
            held.callback(lock.release)
        return held

    def _lock(self, spec: str) -> Any:
        scheme = spec.partition(":")[0].lower()
        if not spec or scheme not in self.EMBEDDED:
            return None
        key = spec.split("?", 1)[0].split("#", 1)[0]
        with self._guard:
            return self._locks.setdefault(key, threading.RLock())


class SlotHolding(Phase):
    """Decides when the task's pool slots are taken, kept for a job, and given back."""

    def __init__(self, scope: UnitScope, account: Account) -> None:
        super().__init__(scope, account)
        self._pool: SlotPool | None = None
        self._pool_stack: contextlib.ExitStack | None = None
        self._pool_lease: PoolLease | None = None
        self._pool_worker: threading.Thread | None = None  # a timed-out attempt's thread

    def take(self) -> Stop | None:
        """Hold the task's pool slots for the next attempt (already held: keep them)."""
        pool = self.x.pool_for(self.task)
        if pool is None or self._pool_stack is not None:
            return None
        wait_limit = None if self.deadline is None else self.deadline.remaining()
        stack = contextlib.ExitStack()
        try:
            lease = stack.enter_context(pool.acquire(self.task.slots, wait_limit))
        except PoolHeldByJob as exc:
            return self._held_by_jobs(pool, exc)
        except PoolTimeout as exc:
            return self.not_started(
                f"not started: pool {pool.name!r} had no {self.task.slots} free slot(s) "
                f"before the workflow deadline ({exc})", "pool-capacity",
            )
        self._pool, self._pool_stack, self._pool_lease = pool, stack, lease
        return None

    def _held_by_jobs(self, pool: SlotPool, exc: PoolHeldByJob) -> Stop:
        """Refused: the pool's slots are kept for remote jobs that may still run."""
        reason = f"not started: {exc}"
        self.ledger.record_observation(
            self.uow_id, "blocked", source=EXECUTOR_SOURCE,
            detail={"reason": reason, "cause": "pool-held-by-job", "pool": pool.name,
                    "slots": self.task.slots, "jobs": list(exc.jobs), "jobs_hold": exc.slots},
        )
        return Stop("blocked", reason)

    def keep_for_job(self, number: int, why: str) -> None:
        """Hand the ledger holding to attempt ``number``'s job (shared pools only)."""
        pool, lease = self._pool, self._pool_lease
        if not isinstance(pool, LedgerPool) or not isinstance(lease, LedgerLease):
            return
        if lease.handed.is_set():
            return
        from twice.ledger.lease import job_holder

        key = job_holder(self.uow_id, number)
        if pool.keep_for_job(lease, key):
            self.ledger.record_observation(
                self.uow_id, "pool-held", source=EXECUTOR_SOURCE, attempt=number,
                detail={"pool": pool.name, "slots": lease.slots, "holder": key, "why": why,
                        "released": "when the job is confirmed ended (reconcile) or the "
                                    "attempt is resolved by an operator (twice resolve)"},
            )

    def after_attempt(self, report: AttemptReport, number: int) -> None:
        """Give the slots back unless the attempt's work may go on (see the section comment)."""
        if report.ending != "unknown":
            self.job_ended(number, kept=self.handed_to_job())
            return
        remote = (
            self.task.reconcile is not None or report.remote is not None
            or isinstance(report.error, OutcomeUnknownError)
            or getattr(report.error, "job_id", None) is not None
        )
        if remote:
            self.keep_for_job(number, "outcome unknown: the job may still run")
            return  # held while this run observes the job
        self.give_back()  # a timed-out thread keeps them (_hold_while_running)

    def handed_to_job(self) -> bool:
        """Whether this run handed its ledger pool holding to its job (only then is a holding
        keyed by the attempt kept in the ledger)."""
        lease = self._pool_lease
        return isinstance(lease, LedgerLease) and lease.handed.is_set()

    def job_ended(self, number: int, *, kept: bool = True) -> None:
        """Attempt ``number``'s work is confirmed ended: release what was kept for it
        (``kept=False``: this run knows nothing was, so the ledger is not asked). While the
        attempt's timed-out thread still runs here, its slots are taken back from the job
        instead, and released once that thread ends (``give_back``)."""
        if kept and self._kept_while_running(number):
            self.give_back()
            return
        released = self.ledger.release_job_pool_slots(self.uow_id, number) if kept else []
        for holding in released:
            self.ledger.record_observation(
                self.uow_id, "pool-released", source=EXECUTOR_SOURCE, attempt=number,
                detail={"pool": holding.pool, "slots": holding.slots,
                        "holder": holding.holder, "basis": "the job is confirmed ended"},
            )
        self.give_back()

    def _kept_while_running(self, number: int) -> bool:
        """Take attempt ``number``'s slots back from its job when its thread still runs."""
        worker, pool, lease = self._pool_worker, self._pool, self._pool_lease
        if (worker is None or not worker.is_alive() or not isinstance(pool, LedgerPool)
                or lease is None):
            return False
        from twice.ledger.lease import job_holder

        taken = pool.take_back_from_job(lease, job_holder(self.uow_id, number))
        if taken:
            self.ledger.record_observation(
                self.uow_id, "pool-kept", source=EXECUTOR_SOURCE, attempt=number,
                detail={"pool": pool.name, "slots": taken, "holder": lease.holder,
                        "basis": "its job is confirmed ended, but the attempt's thread still "
                                 "runs in this process: held until it ends"},
            )
        return bool(taken)

    def give_back(self) -> None:
        """Leave the ``acquire`` block: local slots freed, the ledger holding too unless it was
        handed to a job; deferred until a timed-out attempt's thread ends."""
        stack, worker = self._pool_stack, self._pool_worker
        self._pool, self._pool_stack, self._pool_lease, self._pool_worker = None, None, None, None
        if stack is None:
            return
        if worker is None or not worker.is_alive():
            stack.close()
            return

        def release_when_done() -> None:
            worker.join()
            stack.close()

        threading.Thread(target=release_when_done, daemon=True,
                         name=f"twice-hold-{self.task.name}").start()

    def leave(self) -> None:
        """The unit's run ends: slots still held stay with a job that may still run."""
        if self._pool_stack is None:
            return
        try:
            latest = self.ledger.latest_attempt(self.uow_id)
            if latest is not None and latest.outcome in UNSETTLED_OUTCOMES:
                lease = self._pool_lease
                if isinstance(lease, LedgerLease) and not lease.handed.is_set() and (
                    self.task.reconcile is not None
                ):
                    self.keep_for_job(latest.number, "run ended, job not confirmed ended")
        finally:
            self.give_back()

    def hold_while_running(self, report: AttemptReport, number: int) -> None:
        """A timed-out attempt whose thread still runs keeps its pool slots until that thread
        ends: the work really continues, and the pool's dependency is still loaded by it (the
        English lab text: never release local resources while the work remains active)."""
        still = getattr(report.error, "worker", None)
        if not isinstance(still, threading.Thread) or not still.is_alive():
            return
        outliving(self._attempt_key(number), still)  # it may still act: CommitEvidence.still_acting
        if self._pool_stack is None:
            return
        self._pool_worker = still
        self.notes.append(
            f"attempt {number} timed out but its thread still runs: its pool slots stay held "
            "until it ends"
        )
