"""The simulated world of the engine's deterministic simulation (issue 36), driven by one seed.

One ``random.Random(seed)`` decides everything: the pipeline's shape (engines, write modes,
how many days), the source data versions, which fault fires at which crash point, which
holder acts next. Time is a ``ManualClock`` shared by the ledgers and executors; sleeping
advances it. The world keeps the ground truth the reference model checks against: which
source version each day has, the rows each version must produce, which outputs the
acceptance criteria reject, every delivery a receiver got and every job a remote service ran.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.simulation.faults import CRASH_POINTS, Crash
from twice.testing import ManualClock

#: World features that exercise the five failures reported in issue 36. Each maps to the known
#: bug that makes it fail on today's engine; the CI test runs with these switched off until
#: the fixes are merged (see test_simulation.KNOWN_BUG_FEATURES).
FEATURES: dict[str, str] = {
    "reconcile_with_owned_write": "issue 36 #1: reconcile= overrules a missing commit record",
    "acceptance_nonfatal": "issue 36 #2: an output rejected for its non-fatal count lands",
    "operator_resolution_failed": "issue 36 #3: resolve --as failed still needs --repeat",
    "second_ledger": "issue 36 #4: a second ledger writes a warehouse",
    "same_job_id": "issue 36 #5: safe_repeat='same-job-id' does not exist yet",
}

START = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
FIRST_DAY = date(2026, 11, 1)
LEASE_TTL = 60.0


def stable(*parts: object) -> int:
    """A deterministic 32-bit number from ``parts`` (Python's ``hash`` is salted per process)."""
    text = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], "big")


@dataclass
class Truth:
    """What each (day, source version) must produce, computed without twice."""

    seed: int
    features: frozenset[str]
    rows_per_day: dict[date, int] = field(default_factory=dict)

    def extract_rows(self, day: date, v: int) -> list[tuple[date, int, int, int]]:
        """(day, id, amount, v): the same ids for every version of a day (so an upsert of a
        new version leaves exactly the new rows), amounts that change with the version."""
        return [(day, i, stable(self.seed, day, v, i) % 1000, v)
                for i in range(1, self.rows_per_day[day] + 1)]

    def clean_kept(self, day: date, v: int) -> int:
        """How many rows ``clean`` keeps: 1 for a version its acceptance (min_rows=2) rejects."""
        return 1 if stable(self.seed, "short", day, v) % 100 < 12 else self.rows_per_day[day]

    def clean_nonfatal(self, day: date, v: int) -> int:
        """Non-fatal errors ``clean`` reports (acceptance tolerates 1)."""
        roll = stable(self.seed, "nonfatal", day, v) % 100
        if "acceptance_nonfatal" in self.features and roll < 15:
            return 2
        return 1 if roll < 40 else 0

    def clean_rejected(self, day: date, v: int) -> bool:
        return self.clean_kept(day, v) < 2 or self.clean_nonfatal(day, v) > 1

    def clean_rows(self, day: date, v: int) -> list[tuple[date, int, int, int]]:
        kept = self.clean_kept(day, v)
        return [(d, i, a * 10, vv) for d, i, a, vv in self.extract_rows(day, v)[:kept]]


@dataclass
class Receiver:
    """An effect twice cannot see: every delivery, with the job id it came with."""

    deliveries: list[tuple[str, date, int, str]] = field(default_factory=list)
    #: keyed deliveries the receiver accepted (it deduplicates by job id)
    accepted: dict[str, tuple[str, date, int]] = field(default_factory=dict)

    def deliver(self, task: str, day: date, v: int, job_id: str) -> None:
        self.deliveries.append((task, day, v, job_id))

    def deliver_keyed(self, task: str, day: date, v: int, job_id: str) -> None:
        self.accepted.setdefault(job_id, (task, day, v))

    def delivered(self, job_id: str) -> bool:
        return any(d[3] == job_id for d in self.deliveries) or job_id in self.accepted


@dataclass
class Job:
    job_id: str
    day: date
    v: int
    done_at: datetime


class RemoteService:
    """A remote job service with adopt-by-job-id semantics: ``submit`` is idempotent per id (a
    second submit of an id returns the existing job and runs nothing); ``status`` answers DONE,
    RUNNING or NOT_FOUND. ``executions`` lists every job that really ran."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.executions: list[tuple[date, int, str]] = []

    def submit(self, job_id: str, day: date, v: int, seconds: float) -> None:
        if job_id in self.jobs:
            return
        self.jobs[job_id] = Job(job_id, day, v, self.clock() + timedelta(seconds=seconds))
        self.executions.append((day, v, job_id))

    def status(self, job_id: str) -> str:
        job = self.jobs.get(job_id)
        if job is None:
            return "NOT_FOUND"
        return "DONE" if self.clock() >= job.done_at else "RUNNING"


class World:
    """The seed's world: clock, randomness, ground truth, receivers and the fault plan."""

    def __init__(self, seed: int, root: Path, features: frozenset[str],
                 fault_rate: float = 0.02) -> None:
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown world features {sorted(unknown)}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.root = root
        self.features = features
        self.clock = ManualClock(START)
        self.days = [FIRST_DAY + timedelta(days=i) for i in range(self.rng.randint(2, 4))]
        self.truth = Truth(seed, features,
                           {d: self.rng.randint(2, 5) for d in self.days})
        self.version: dict[date, int] = {d: 1 for d in self.days}
        self.seen_versions: dict[date, set[int]] = {d: {1} for d in self.days}
        self.receiver = Receiver()
        self.remote = RemoteService(self.clock)
        self.fault_rate = fault_rate
        self.faults_on = True
        self.steps = 0
        self.fired: Counter[str] = Counter()  # "point/fault" -> times fired
        self.reached: Counter[str] = Counter()  # point -> times reached
        self.dest_depth = 0  # open destination write transactions
        self.holder: Any = None  # the holder acting now (harness.Holder)
        self.on_pause: Callable[[], None] | None = None
        self.pausing = False
        #: the ledger (its URL) whose write first landed in each destination: the product's
        #: rule (a destination belongs to the first ledger that writes it)
        self.owners: dict[str, str] = {}
        #: destinations written by a holder of a ledger other than their owner (invariant 5)
        self.foreign_writes: list[tuple[str, str]] = []
        self.sleeps = 0

    # -- time ---------------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        """The executors' sleep: the clock moves, nobody waits."""
        self.sleeps += 1
        self.clock.advance(seconds)

    # -- crash points -------------------------------------------------------------------------

    def point(self, name: str, *, spec: str | None = None) -> None:
        """A crash-point opportunity (one step): a dead holder stays dead; otherwise maybe a
        fault allowed at ``name``."""
        self.steps += 1
        self.reached[name] += 1
        holder = self.holder
        if holder is not None and holder.dead:
            raise Crash(f"{holder.name} is dead")
        if not self.faults_on or holder is None or self.rng.random() >= self.fault_rate:
            return
        kinds = list(CRASH_POINTS[name])
        if "pause" in kinds and (self.pausing or self.dest_depth or self.on_pause is None
                                 or holder.ledger._session.current() is not None):
            kinds.remove("pause")
        kind = self.rng.choice(kinds)
        self.fired[f"{name}/{kind}"] += 1
        if kind == "crash":
            holder.dead = True
            raise Crash(f"{holder.name} killed at {name}")
        if kind == "pause":
            assert self.on_pause is not None
            self.pausing = True
            try:
                self.on_pause()
            finally:
                self.pausing = False
            return
        if kind == "ledger_fault":
            from twice.ledger import LedgerUnavailableError

            raise LedgerUnavailableError(f"simulated: ledger unavailable at {name}")
        if kind == "task_error":
            raise ConnectionError(f"simulated transient error at {name}")
        # lost acknowledgements: it happened, the caller cannot know
        if name.startswith("ledger."):
            from twice.ledger import LedgerCommitUnknownError

            raise LedgerCommitUnknownError(f"simulated: lost acknowledgement at {name}")
        if name.startswith("dest."):
            from twice.destinations.errors import DestinationCommitUnknownError

            raise DestinationCommitUnknownError.of(
                spec or "?", "simulated lost acknowledgement", ConnectionError("reset"))
        from twice.errors import OutcomeUnknownError

        raise OutcomeUnknownError(f"simulated: lost acknowledgement at {name}")

    def destination_committed(self, spec: str) -> None:
        holder = self.holder
        if holder is None:
            return
        if self.owners.setdefault(spec, holder.url) != holder.url:
            self.foreign_writes.append((holder.name, spec))

    # -- source changes -----------------------------------------------------------------------

    def change_source(self, day: date) -> None:
        self.version[day] += 1
        self.seen_versions[day].add(self.version[day])
