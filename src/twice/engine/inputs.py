"""Inputs as read: the upstream versions a unit was identified on, pinned for its attempt.

A dependent's unit is keyed by its upstreams' recorded output versions when it is identified
(``twice.engine.units``), but its task reads those upstreams while its attempt runs. Another
holder may rewrite an upstream in between: the task then reads a version that belongs to
another unit, which reads it and acts again (an append landing twice, a remote job run twice).
So each attempt pins its inputs (docs/architecture.md, "Inputs as read"):

1. **Expected.** Where the ledger is, just before the attempt: each upstream with a
   destination, and the ledger's recorded version of its slice, the one the unit is keyed by
   (:func:`expect`). If the ledger no longer keys this unit, the inputs are already stale.
2. **Pinned.** As the attempt body begins, before the task runs: each upstream slice's newest
   commit record, read from its destination (:meth:`Expected.pin`). A newest record written by
   another unit than the one the ledger's version came from is a write the ledger does not know
   yet (its holder was killed after the commit, or is recording it now): stale too.
3. **Confirmed.** ``ctx.read_upstream(name)`` reads an upstream's slice, then confirms that its
   newest commit record is still the pinned one; every owned write of the attempt is admitted
   (``twice.engine.owned_write``) only while every pin still holds. Records are never rewritten
   and every owned write commits a new one, so an unchanged newest record after a read means
   the rows read are the pinned version's.

Otherwise :class:`~twice.errors.InputsChangedError`: nothing is returned or lands, the attempt
ends failed-transient, and the driver identifies the unit again (``drive.UnitDriver``):
superseded by the unit keyed by what the upstream holds now, or blocked while the upstream's
own write is unsettled.

What twice cannot pin: a task that reads an upstream on its own (not through
``ctx.read_upstream``) and acts where twice cannot see (a remote job, a delivery); its owned
writes are still admitted by rule 3. An upstream slice with no commit record (written
unstamped, or before records existed) is not pinned.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twice.destinations.commits import ADOPT_MODE, FENCE_MODE, CommitRecord
from twice.errors import InputsChangedError

if TYPE_CHECKING:
    import pyarrow as pa

    from twice.core.interval import Interval
    from twice.define.pipeline import Pipeline
    from twice.ledger import FingerprintRecord, Ledger


@dataclass(frozen=True)
class Upstream:
    """One upstream with a destination, and the ledger's version of its slice the unit is
    keyed by (None: nothing recorded)."""

    task: str
    destination: str
    fence_key: str  # the upstream's slot: every write of it for this interval carries it
    recorded: FingerprintRecord | None


@dataclass(frozen=True)
class Expected:
    """What the attempt expects its upstreams to hold (rule 1); crosses to a child process."""

    upstreams: tuple[Upstream, ...]
    stale: str | None = None  # why the ledger no longer keys this unit

    def pin(self) -> Pinned:
        """Rule 2: each upstream slice's newest commit record, now."""
        pins = {up.task: newest_write(up.destination, up.fence_key) for up in self.upstreams}
        stale = self.stale
        for up in self.upstreams:
            newest = pins[up.task]
            if stale is None and _unrecorded(up.recorded, newest):
                assert newest is not None and up.recorded is not None
                stale = (f"upstream {up.task!r}: its slice's newest write (unit "
                         f"{newest.uow_id}, attempt {newest.attempt}) is not the version the "
                         f"ledger records (unit {up.recorded.uow_id}); it is not settled yet")
        return Pinned(self, pins, stale)

    def read(self, upstream: str, destination: str, interval: Interval) -> pa.Table:
        """``upstream``'s slice for ``interval``, confirmed against the pin of the attempt
        running in this context (``TaskContext.read_upstream``)."""
        from twice.destinations import open_destination

        with open_destination(destination) as dest:
            table = dest.read_partition(interval if dest.partition_column else None)
        pins = active()
        if pins is not None and pins.upstream(upstream) is not None:
            pins.confirm([upstream])
        return table


def _unrecorded(recorded: FingerprintRecord | None, newest: CommitRecord | None) -> bool:
    """The slice's newest write is not the one the ledger's version came from."""
    if recorded is None or newest is None or recorded.uow_id is None:
        return False  # nothing to compare: not pinned against the ledger
    return newest.uow_id != recorded.uow_id


@dataclass(frozen=True)
class Pinned:
    """The attempt's inputs as pinned when its body began (rule 3 confirms against them)."""

    expected: Expected
    records: dict[str, CommitRecord | None]
    stale: str | None = None

    def upstream(self, task: str) -> Upstream | None:
        return next((up for up in self.expected.upstreams if up.task == task), None)

    def confirm(self, tasks: Iterable[str] | None = None) -> None:
        """Raise ``InputsChangedError`` unless each upstream (of ``tasks``; all by default)
        still holds its pinned version."""
        if self.stale is not None:
            raise InputsChangedError(f"the inputs changed before this attempt read them: "
                                     f"{self.stale}")
        wanted = None if tasks is None else set(tasks)
        for up in self.expected.upstreams:
            if wanted is not None and up.task not in wanted:
                continue
            pinned = self.records[up.task]
            if pinned is None:
                continue  # nothing twice committed there when the attempt began: not pinned
            now = newest_write(up.destination, up.fence_key)
            if now != pinned:
                assert now is not None  # records are never removed
                raise InputsChangedError(
                    f"upstream {up.task!r} was rewritten while this attempt ran (its slice's "
                    f"newest write was unit {pinned.uow_id} attempt {pinned.attempt}, token "
                    f"{pinned.token}; now unit {now.uow_id} attempt {now.attempt}, token "
                    f"{now.token}): nothing read from it is used and nothing lands; the unit "
                    "keyed by the new version runs instead"
                )


def newest_write(destination: str, fence_key: str) -> CommitRecord | None:
    """The newest commit record that wrote rows into the slot ``fence_key`` of
    ``destination`` (seals and adoptions write none); None when there is none."""
    from twice.destinations import open_destination

    with open_destination(destination) as dest:
        records = [r for r in dest.slot_records(fence_key)
                   if r.mode not in (FENCE_MODE, ADOPT_MODE)]
    return max(records, key=lambda record: record.sort_key, default=None)


def expect(pipeline: Pipeline, ledger: Ledger, task_name: str, unit_id: str,
           interval: Interval) -> Expected:
    """Rule 1: the upstreams of ``task_name`` with a destination and the ledger's version of
    each, read once; stale when the unit they identify is not ``unit_id``."""
    from twice.engine.units import identify_unit, upstream_fingerprints

    recorded = upstream_fingerprints(pipeline, ledger, task_name, interval)
    upstreams = tuple(
        Upstream(dep, pipeline.get_task(dep).destination,
                 f"{pipeline.name}/{dep}/{interval.label}", record)
        for dep, record in recorded.items()
    )
    now = identify_unit(pipeline, ledger, task_name, interval, upstream=recorded)
    stale = None if now.uow_id == unit_id else (
        f"the ledger now keys {task_name!r} for {interval.label} as unit {now.uow_id} "
        f"(input version {now.input_version})")
    return Expected(upstreams, stale)


_PINNED: contextvars.ContextVar[Pinned | None] = contextvars.ContextVar(
    "twice_pinned_inputs", default=None)


@contextmanager
def pinned(expected: object) -> Iterator[Pinned | None]:
    """Pin ``expected`` (rule 2; a context's ``inputs``, an ``Expected`` when the executor
    built it) for the attempt body run in this context."""
    pins = expected.pin() if isinstance(expected, Expected) and expected.upstreams else None
    token = _PINNED.set(pins)
    try:
        yield pins
    finally:
        _PINNED.reset(token)


def active() -> Pinned | None:
    """The pinned inputs of the attempt running in this context (None outside one)."""
    return _PINNED.get()


