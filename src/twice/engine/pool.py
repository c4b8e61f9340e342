"""Weighted slot pools around a real dependency (a database, an API).

A pool's capacity describes what the dependency can bear ("one heavy extraction or two small
ones"), not how many workers exist: free worker threads never create slots. A task occupies
``slots`` of the pool for as long as it runs; a 2-slot task in a 2-slot pool keeps every light
task waiting. How capacity maps to connections or queries is the operator's measurement to make;
a slot is not automatically one connection.

Fairness rule (``Pool``): strict first come, first served. Requests are granted in arrival order
and a request never overtakes an earlier one that is still waiting, even when enough slots are
free for it. That costs some utilisation (a light task may wait behind a heavy one while one slot
sits idle) and buys the guarantee that a heavy task is never starved by a stream of light ones.

``LedgerPool`` shares capacity across processes through the ledger; ``PoolRegistry`` holds the
pools of one run by name.

Work that continues after its caller stopped waiting keeps its slots (the lab text: releasing
local resources while an external job remains active admits more work against the same
dependency). ``LedgerPool.keep_for_job`` hands a lease's ledger holding to the remote job it
started, keyed by unit and attempt, with no expiry: it survives the process and the run, and is
released only when the job is confirmed ended (a reconcile observed it succeeded, failed or not
found) or an operator resolved its attempt (``twice resolve``). A request blocked by such
holdings waits at most ``job_wait`` seconds for one to be released, then raises
``PoolHeldByJob`` naming them, so a run never waits for ever on a job nobody observes.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from twice.errors import InputError, TwiceError

#: Holders of slots kept for a remote job (``twice.ledger.lease.job_holder`` makes them).
JOB_HOLDER_PREFIX = "job:"


class PoolError(InputError):
    """A pool or slot request is malformed (unknown pool, slots out of range)."""


class PoolTimeout(TwiceError, TimeoutError):
    """The slots were not granted within the timeout; the task did not start."""


class PoolHeldByJob(PoolTimeout):
    """The slots are held for remote jobs that may still run (``jobs``: their holder keys,
    ``slots``: how many they hold) and none was released within ``job_wait``."""

    def __init__(self, message: str, jobs: tuple[str, ...], slots: int) -> None:
        super().__init__(message)
        self.jobs = jobs
        self.slots = slots


@dataclass(frozen=True)
class PoolLease:
    """Slots held by one task: released when the ``acquire`` block exits."""

    pool: str
    slots: int
    holder: str


@dataclass(frozen=True)
class LedgerLease(PoolLease):
    """A lease held in the ledger; ``lost`` is set if a renewal was refused."""

    lost: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    #: Set once the holding was handed to a remote job (``LedgerPool.keep_for_job``): leaving
    #: the ``acquire`` block then does not release it.
    handed: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    renewal_done: threading.Event = field(
        default_factory=threading.Event, compare=False, repr=False
    )


@runtime_checkable
class SlotPool(Protocol):
    """What the executor needs from a pool, local or ledger-backed."""

    @property
    def name(self) -> str: ...

    @property
    def capacity(self) -> int: ...

    def acquire(
        self, slots: int = 1, timeout: float | None = None, holder: str | None = None
    ) -> AbstractContextManager[PoolLease]: ...


class PoolLedger(Protocol):
    """The ledger side of a cross-process pool (``twice.ledger.Ledger`` implements it).

    ``acquire_pool_slots`` grants ``slots`` to ``holder`` atomically if they fit beside every
    other unexpired holding and says whether it did; calling it again as the same holder
    extends the holding, and a holding nobody extends expires after ``ttl_seconds``, so a
    crashed worker cannot hold slots forever. ``release_pool_slots`` gives back everything
    ``holder`` holds in ``pool`` (a no-op if nothing).
    """

    def acquire_pool_slots(
        self, pool: str, capacity: int, slots: int, holder: str, ttl_seconds: float
    ) -> bool: ...

    def release_pool_slots(self, pool: str, holder: str) -> int: ...


def _check_capacity(name: str, capacity: int) -> None:
    if not isinstance(name, str) or not name:
        raise PoolError(f"pool name must be a non-empty string, got {name!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise PoolError(f"pool {name!r}: capacity must be an integer >= 1, got {capacity!r}")


def _check_slots(name: str, capacity: int, slots: int) -> None:
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise PoolError(f"pool {name!r}: slots must be an integer >= 1, got {slots!r}")
    if slots > capacity:
        raise PoolError(
            f"pool {name!r} has {capacity} slot(s) but the task asks for {slots}: it could "
            "never run; lower the task's slots or raise the pool's measured capacity"
        )


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and (math.isnan(timeout) or timeout < 0):
        raise PoolError(f"timeout must be None or >= 0 seconds, got {timeout!r}")


_holder_counter = itertools.count(1)


def new_holder() -> str:
    """A holder id unique across hosts, processes, threads and leases."""
    return (
        f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{next(_holder_counter)}"
    )


class Pool:
    """An in-process pool with ``capacity`` slots, granted first come, first served."""

    def __init__(self, name: str, capacity: int) -> None:
        _check_capacity(name, capacity)
        self._name = name
        self._capacity = capacity
        self._in_use = 0
        self._queue: deque[object] = deque()  # waiting requests, oldest first
        self._changed = threading.Condition()

    def __repr__(self) -> str:
        return f"Pool({self._name!r}, capacity={self._capacity}, in_use={self._in_use})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_use(self) -> int:
        """Slots held right now."""
        return self._in_use

    @property
    def waiting(self) -> int:
        """Requests queued for slots right now."""
        return len(self._queue)

    @contextmanager
    def acquire(
        self, slots: int = 1, timeout: float | None = None, holder: str | None = None
    ) -> Iterator[PoolLease]:
        """Hold ``slots`` for the duration of the block; wait in line if they are taken.

        Raises ``PoolTimeout`` if they are not granted within ``timeout`` seconds (None waits
        for ever) and ``PoolError`` if ``slots`` exceeds the capacity.
        """
        _check_slots(self._name, self._capacity, slots)
        _check_timeout(timeout)
        if not self._take(slots, timeout):
            raise PoolTimeout(
                f"pool {self._name!r}: {slots} slot(s) not granted within {timeout:g} s "
                f"({self._in_use}/{self._capacity} in use, {self.waiting} waiting)"
            )
        try:
            yield PoolLease(self._name, slots, holder or new_holder())
        finally:
            self._give_back(slots)

    def _take(self, slots: int, timeout: float | None) -> bool:
        ends = None if timeout is None else time.monotonic() + timeout
        ticket = object()
        with self._changed:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or self._in_use + slots > self._capacity:
                    left = None if ends is None else ends - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._changed.wait(left)
                self._in_use += slots
                return True
            finally:
                self._queue.remove(ticket)
                # The head changed (granted or gave up): let the next in line re-check.
                self._changed.notify_all()

    def _give_back(self, slots: int) -> None:
        with self._changed:
            self._in_use -= slots
            self._changed.notify_all()


class LedgerPool:
    """A pool whose capacity is shared by every process using the same ledger.

    Requests from this process first queue in a local ``Pool`` (first come, first served, and
    never more than ``capacity`` locally), then poll the ledger every ``poll_interval`` seconds
    until it grants the slots. Fairness *between* processes is whatever the ledger grants:
    polling is not a queue, so a heavy task in one process can lose races to light tasks of
    another. Each lease has its own holder id; while it is held a daemon thread extends it every
    ``ttl / 3`` seconds, so a live task keeps its slots however long it runs and a dead one
    loses them ``ttl`` seconds after its last renewal. If a renewal is refused (the holding
    expired and others took the slots) the lease's ``lost`` event is set: the task cannot be
    stopped from here, so the caller should treat the dependency as over capacity.

    ``keep_for_job`` hands a lease's holding to the remote job it started (see the module
    docstring); ``job_wait`` (seconds, None: no limit) bounds how long a request waits while
    holdings kept for jobs block it before ``PoolHeldByJob`` is raised.
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        ledger: PoolLedger,
        *,
        ttl: float = 60.0,
        poll_interval: float = 0.5,
        job_wait: float | None = None,
    ) -> None:
        _check_capacity(name, capacity)
        _check_timeout(job_wait)
        for setting, value in (("ttl", ttl), ("poll_interval", poll_interval)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise PoolError(f"pool {name!r}: {setting} must be > 0 seconds, got {value!r}")
        self._local = Pool(name, capacity)
        self._ledger = ledger
        self._ttl = ttl
        self._poll_interval = poll_interval
        self._job_wait = job_wait
        self._renewers: dict[str, threading.Thread] = {}
        self._renewers_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LedgerPool({self.name!r}, capacity={self.capacity}, ttl={self._ttl})"

    @property
    def name(self) -> str:
        return self._local.name

    @property
    def capacity(self) -> int:
        return self._local.capacity

    @contextmanager
    def acquire(
        self, slots: int = 1, timeout: float | None = None, holder: str | None = None
    ) -> Iterator[LedgerLease]:
        """Hold ``slots`` in the ledger for the duration of the block (see class docstring)."""
        _check_timeout(timeout)
        ends = None if timeout is None else time.monotonic() + timeout
        lease = LedgerLease(self.name, slots, holder or new_holder())
        with self._local.acquire(slots, timeout):
            blocked_by_jobs: float | None = None  # since when job holdings block us
            while not self._grant(lease):
                blocked_by_jobs = self._check_jobs(slots, blocked_by_jobs)
                left = None if ends is None else ends - time.monotonic()
                if left is not None and left <= 0:
                    raise PoolTimeout(
                        f"pool {self.name!r}: the ledger did not grant {slots} slot(s) "
                        f"within {timeout:g} s"
                    )
                time.sleep(self._poll_interval if left is None else min(self._poll_interval, left))
            self._start_renewal(lease)
            try:
                yield lease
            finally:
                self._stop_renewal(lease)
                if not lease.handed.is_set():
                    self._ledger.release_pool_slots(self.name, lease.holder)

    def keep_for_job(self, lease: PoolLease, job: str) -> int:
        """Hand ``lease``'s ledger holding to ``job`` (``twice.ledger.lease.job_holder``): it is
        no longer renewed and no longer released when the ``acquire`` block exits, and stays
        until the job is confirmed ended. Returns the slots handed over (0: the holding had
        been lost already). Idempotent for one lease."""
        if not isinstance(lease, LedgerLease) or lease.pool != self.name:
            raise PoolError(f"pool {self.name!r}: {lease!r} is not a lease of this pool")
        if lease.handed.is_set():
            return lease.slots
        self._stop_renewal(lease)  # a renewal after the hand-over would re-take the slots
        hand = getattr(self._ledger, "hand_pool_slots_to_job", None)
        if hand is None:
            raise PoolError(f"pool {self.name!r}: its ledger cannot keep slots for a job")
        handed = int(hand(self.name, lease.holder, job))
        if handed:
            lease.handed.set()
        return handed

    def take_back_from_job(self, lease: PoolLease, job: str) -> int:
        """The reverse of :meth:`keep_for_job`: ``job``'s holding is ``lease``'s again, renewed
        and released when the ``acquire`` block exits. For a job confirmed ended whose attempt
        still runs in this process (a timed-out thread): its slots stay held as long as the
        work continues, not released, nor left to the job holding (which any acquisition
        releases once the attempt is closed). Returns the slots taken back."""
        take = getattr(self._ledger, "take_pool_slots_from_job", None)
        if (take is None or not isinstance(lease, LedgerLease) or lease.pool != self.name
                or not lease.handed.is_set()):
            return 0
        taken = int(take(self.name, job, lease.holder, self._ttl))
        if taken:
            lease.handed.clear()
            lease.renewal_done.clear()
            self._start_renewal(lease)
        return taken

    def _start_renewal(self, lease: LedgerLease) -> None:
        """Extend ``lease`` from a daemon thread until its ``renewal_done`` is set."""
        renewer = threading.Thread(
            target=self._renew, args=(lease, lease.renewal_done),
            name=f"twice-pool-{self.name}", daemon=True,
        )
        with self._renewers_lock:
            self._renewers[lease.holder] = renewer
        renewer.start()

    def _stop_renewal(self, lease: LedgerLease) -> None:
        lease.renewal_done.set()
        with self._renewers_lock:
            renewer = self._renewers.pop(lease.holder, None)
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join()

    def _check_jobs(self, slots: int, since: float | None) -> float | None:
        """While holdings kept for remote jobs block the request, raise ``PoolHeldByJob`` once
        ``job_wait`` has passed; returns since when they block (None: they do not)."""
        listing = getattr(self._ledger, "pool_holdings", None)
        if self._job_wait is None or listing is None:
            return None
        active = list(listing(self.name))
        jobs = [h for h in active if str(h.holder).startswith(JOB_HOLDER_PREFIX)]
        others = sum(h.slots for h in active if h not in jobs)
        if not jobs or others + slots > self.capacity:
            return None  # live holders alone keep it waiting: they renew or release
        now = time.monotonic()
        since = now if since is None else since
        if now - since >= self._job_wait:
            held = sum(h.slots for h in jobs)
            names = tuple(str(h.holder) for h in jobs)
            raise PoolHeldByJob(
                f"pool {self.name!r}: {held} of its {self.capacity} slot(s) are kept for remote "
                f"job(s) that may still run ({', '.join(names)}); none was released within "
                f"{self._job_wait:g} s. They are released when a run of that task observes "
                "the job ended, or when an operator resolves its attempt (twice resolve)",
                names, held,
            )
        return since

    def _grant(self, lease: LedgerLease) -> bool:
        return self._ledger.acquire_pool_slots(
            self.name, self.capacity, lease.slots, lease.holder, self._ttl
        )

    def _renew(self, lease: LedgerLease, done: threading.Event) -> None:
        while not done.wait(self._ttl / 3):
            try:
                renewed = self._grant(lease)
            except Exception:  # the ledger is unreachable: the holding can no longer be vouched for
                renewed = False
            if not renewed:
                lease.lost.set()
                return


class PoolRegistry:
    """The named pools shared by the tasks of one run.

    ``ensure`` creates a local ``Pool`` on first use; ``add`` registers any ``SlotPool`` (for
    example a ``LedgerPool``). Declaring the same name twice with a different capacity is an
    error rather than a silent override, since two tasks would then disagree on the dependency.
    """

    def __init__(self) -> None:
        self._pools: dict[str, SlotPool] = {}
        self._lock = threading.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self._pools

    def add(self, pool: SlotPool) -> SlotPool:
        """Register ``pool``; refuses a second, different pool under the same name."""
        with self._lock:
            existing = self._pools.get(pool.name)
            if existing is not None and existing is not pool:
                raise PoolError(f"pool {pool.name!r} is already registered")
            self._pools[pool.name] = pool
            return pool

    def ensure(self, name: str, capacity: int) -> SlotPool:
        """The pool called ``name``, created as a local ``Pool`` if it does not exist yet."""
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                pool = self._pools[name] = Pool(name, capacity)
            elif pool.capacity != capacity:
                raise PoolError(
                    f"pool {name!r} already has capacity {pool.capacity}, not {capacity}"
                )
            return pool

    def get(self, name: str) -> SlotPool:
        try:
            return self._pools[name]
        except KeyError:
            known = ", ".join(sorted(self._pools)) or "none"
            raise PoolError(f"unknown pool {name!r} (known: {known})") from None

    def acquire(
        self, name: str, slots: int = 1, timeout: float | None = None, holder: str | None = None
    ) -> AbstractContextManager[PoolLease]:
        """Shortcut for ``registry.get(name).acquire(...)``."""
        return self.get(name).acquire(slots, timeout, holder)
