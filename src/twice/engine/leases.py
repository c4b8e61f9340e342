"""Keeping a unit's lease while it runs: renewed every ``ttl / 3`` seconds on one thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING

from twice.ledger.lease_holders import new_holder

if TYPE_CHECKING:
    from twice.ledger import Ledger


def default_holder() -> str:
    """A holder id unique across hosts, processes and executors (``lease_holders``)."""
    return new_holder()


class Renewals:
    """Renews the leases of the units an executor is running, each every ``ttl / 3`` seconds,
    on one thread started while there are leases to renew (a thread started per unit cost
    more than the unit's whole bookkeeping). Renewals run one at a time; ``stop`` returns once
    none of the keeper's is running, and none starts after it."""

    #: How long the thread waits for a lease to renew before it ends (a new one starts then).
    IDLE_SECONDS = 5.0

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[LeaseKeeper, float] = {}  # keeper -> time.monotonic() of its renewal
        self._renewing: LeaseKeeper | None = None
        self._thread: threading.Thread | None = None
        self._wakes_at = 0.0  # when the thread looks at ``_due`` again

    def start(self, keeper: LeaseKeeper) -> None:
        with self._changed:
            due = self._due[keeper] = time.monotonic() + keeper.period
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="twice-leases")
                self._thread.start()
            elif due < self._wakes_at:  # otherwise the thread finds it when it wakes anyway
                self._changed.notify_all()

    def renewing(self, keeper: LeaseKeeper) -> bool:
        with self._changed:
            return keeper in self._due

    def stop(self, keeper: LeaseKeeper) -> None:
        with self._changed:
            self._due.pop(keeper, None)
            while self._renewing is keeper and threading.current_thread() is not self._thread:
                self._changed.wait()

    def _run(self) -> None:
        try:
            while self._renew_next():
                pass
        finally:  # idle, or ended by surprise: the next start() starts a new thread
            with self._changed:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _renew_next(self) -> bool:
        """Wait for the next renewal that is due and run it; False when idle (decided under
        the lock, so a ``start`` after it sees the thread gone)."""
        with self._changed:
            keeper = self._next()
            if keeper is None:
                self._thread = None
                return False
            self._due[keeper] = time.monotonic() + keeper.period
            self._renewing = keeper
        try:
            keeper.renew()
        finally:
            with self._changed:
                self._renewing = None
                if keeper.lost:
                    self._due.pop(keeper, None)
                self._changed.notify_all()
        return True

    def _next(self) -> LeaseKeeper | None:
        """The keeper whose renewal is due, once it is (the lock held); None after waiting
        ``IDLE_SECONDS`` with nothing to renew."""
        while True:
            now = time.monotonic()
            if not self._due:
                self._wakes_at = now + self.IDLE_SECONDS
                self._changed.wait(self.IDLE_SECONDS)
                if not self._due:
                    return None
                continue
            keeper, at = min(self._due.items(), key=lambda item: item[1])
            if at <= now:
                return keeper
            self._wakes_at = at
            self._changed.wait(at - now)


class LeaseKeeper:
    """Keeps a unit's lease while it runs (attempts can outlive it): renewed every ``ttl / 3``
    seconds by the executor's ``Renewals``."""

    def __init__(self, ledger: Ledger, uow_id: str, holder: str, ttl: float,
                 renewals: Renewals, expires_at: datetime | None = None) -> None:
        self._ledger, self._uow_id, self._holder, self._ttl = ledger, uow_id, holder, ttl
        self._renewals = renewals
        self.period = ttl / 3
        self.lost = False
        self.released = False  # given back by the run itself (see stop_renewing)
        self.expires_at = expires_at  # of the last lease we know we hold

    def __enter__(self) -> LeaseKeeper:
        self._renewals.start(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_renewing()
        if self.released:
            return
        with contextlib.suppress(Exception):  # releasing is a courtesy; expiry also frees it
            self._ledger.release_lease(self._uow_id, self._holder)

    def resume_renewing(self) -> None:
        """Renew again after ``stop_renewing`` when the lease was not given back after all."""
        if self.released or self.lost or self._renewals.renewing(self):
            return
        self._renewals.start(self)

    def stop_renewing(self) -> None:
        """No renewal after this returns: the run is about to give the lease back itself (in
        the transaction that finishes its attempt, then setting ``released``)."""
        self._renewals.stop(self)

    def renew(self) -> None:
        """One renewal (by ``Renewals``); a failed call is tried again a period later."""
        try:
            renewed = self._ledger.renew_lease(self._uow_id, self._holder, self._ttl)
        except Exception:
            return
        if not renewed.acquired:
            self.lost = True
            return
        self.expires_at = renewed.expires_at

    def expired(self, now: datetime) -> bool:
        """Whether we may no longer hold the lease: a renewal failed, or the last lease we
        know of has run out (a process paused past it has not renewed yet)."""
        return self.lost or (self.expires_at is not None and now >= self.expires_at)
