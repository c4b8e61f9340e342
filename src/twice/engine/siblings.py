"""Siblings: what another unit of the same slot left unsettled is settled before the slot is
judged.

A task's slot (its destination partition for an interval) can have several units, one per
input or transform version. Only the current one is ever claimed again, so an attempt of an
older one left ``running`` or ``unknown`` (its process killed after the destination committed,
before the ledger recorded it) would never be settled: the current unit would be skipped as
verified over rows it did not write, and every dependent reading through twice would be
refused (``InputsChangedError``) on every run. Found by the simulation's long run, seed 3721.

So the transaction that claims a unit with an owned destination looks for them (one indexed
statement, ``twice.ledger.ranges.unsettled_of_slot``); when there are some, the unit's lease is
given back and each other unit of its slot whose latest attempt is unsettled is claimed (its
lease must have run out: a live holder is left alone) and settled by the settlement rule
(``twice.engine.settlement``), only settled: nothing is attempted, whatever the verdict. A
write proven by its commit record becomes the slot's latest recorded version, so the current
unit's success no longer stands for the slot and it runs again
(``twice.engine.hold.RepeatHold.slot_overwritten``) once it is claimed again; a write that
never committed is sealed out and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Task
from twice.engine.leases import LeaseKeeper

if TYPE_CHECKING:
    from twice.engine.claim import Opening
    from twice.engine.evidence import PlanSettings
    from twice.engine.executor import Executor
    from twice.engine.timeouts import Deadline
    from twice.ledger import LeaseResult, Ledger


def settle_siblings(x: Executor, task: Task, found: Sequence[str],
                    upstream: Mapping[str, Any], deadline: Deadline | None,
                    settings: PlanSettings) -> list[str]:
    """Settle the units ``found`` (other units of a slot whose latest attempt was unsettled:
    ``twice.ledger.ranges.unsettled_of_slot``; see the module); how each settled, for the
    notes of the slot's current unit."""
    notes = []
    for uow_id in found:
        record = x.ledger.unit(uow_id)
        if record is None:  # pragma: no cover - units are never deleted
            continue
        sibling = record.to_unit_of_work()
        how = _settle(x, task, sibling, upstream, deadline, settings)
        notes.append(f"unit {uow_id} of this slot (input version "
                     f"{sibling.input_version or 'none'}) was unsettled: {how}")
    return notes


def settle_slot(x: Executor, task_name: str, interval: Interval) -> list[str]:
    """``settle_siblings`` for the slot of ``task_name``'s current unit for ``interval``, before
    a driver measures the slot itself (a backfill's drift check: the other unit's write is not
    a change behind twice's back). Claiming the unit does the same, so a driver that does not
    measure the slot first need not call this."""
    from twice.engine.evidence import PlanSettings
    from twice.ledger.ranges import unsettled_of_slot

    task = x.pipeline.get_task(task_name)
    if not task.owns_output:
        return []
    try:
        unit = x.unit_for(task_name, interval)
        settings = PlanSettings.for_task(x.pipeline, task, unit.interval,
                                         max_observation_age=x.max_observation_age)
    except Exception:  # reported when the unit is claimed
        return []
    found = unsettled_of_slot(x.ledger, unit.pipeline, unit.task, unit.interval.start,
                              unit.interval.end, unit.uow_id)
    return settle_siblings(x, task, found, {}, None, settings)


def _settle(x: Executor, task: Task, sibling: UnitOfWork, upstream: Mapping[str, Any],
            deadline: Deadline | None, settings: PlanSettings) -> str:
    from twice.engine.drive import UnitDriver

    run = UnitDriver(x, task, sibling, upstream, deadline, settings)

    def claim(ledger: Ledger) -> tuple[LeaseResult, Opening | None]:
        lease = ledger.acquire_lease(sibling.uow_id, x.holder, x.lease_ttl)
        if not lease.acquired:
            return lease, None
        return lease, run.claim.open_to_settle()

    lease, opening = x.ledger.atomic(claim)
    if opening is None:
        return f"left to its holder {lease.holder}, whose lease runs until {lease.expires_at}"
    with LeaseKeeper(x.ledger, sibling.uow_id, x.holder, x.lease_ttl,
                     x.renewals, lease.expires_at) as keeper:
        run.runner.token = lease.token
        run.scope.lease.keeper = keeper
        return run.settle_only(opening)
