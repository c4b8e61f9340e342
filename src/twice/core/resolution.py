"""What an operator may assert with ``twice resolve``, and what each assertion means for the
next run: the one rule, written once.

An operator settles an attempt whose effect twice cannot see (no owned write, no
``reconcile=``, not ``safe_repeat``) by saying what they found where the effect would be:

- ``succeeded``: the effect happened. The unit is done; it is not executed again without
  ``--force`` (and, not being ``safe_repeat``, ``--repeat``).
- ``failed``: the effect did not happen. The next run executes the task, with no ``--repeat``
  and no other operator step: nothing would be repeated.
- ``failed-after-acting``: it acted, then failed (a partial effect, such as half the mails
  sent). Running it again may repeat what went out, so the next run holds it until the
  operator names the task with ``--repeat``.

Every driver that runs units (``twice run``, ``twice backfill``, ``twice worker``) reaches this
through the executor's claim, so they all agree. Reports show the assertion as a person's word,
never as verified.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args

ResolutionOutcome = Literal["succeeded", "failed", "failed-after-acting"]
RESOLUTION_OUTCOMES: tuple[ResolutionOutcome, ...] = get_args(ResolutionOutcome)


class NextRun(StrEnum):
    """What the next run does with a unit whose latest attempt an operator resolved."""

    SETTLED = "settled"  # the effect happened: not executed again unless forced and repeated
    EXECUTE = "execute"  # the effect did not happen: executed, no --repeat needed
    HOLD = "hold"  # it acted, then failed: held until --repeat names the task


_NEXT_RUN: dict[ResolutionOutcome, NextRun] = {
    "succeeded": NextRun.SETTLED,
    "failed": NextRun.EXECUTE,
    "failed-after-acting": NextRun.HOLD,
}

#: What the next run does, for people (reports).
NEXT_RUN_DOES: dict[NextRun, str] = {
    NextRun.SETTLED: "not executed again (unless --force, and --repeat)",
    NextRun.EXECUTE: "executed, no --repeat needed",
    NextRun.HOLD: "held until --repeat names the task",
}

#: What each assertion says happened, for people (help, reports).
CLAIMS: dict[ResolutionOutcome, str] = {
    "succeeded": "its effect happened",
    "failed": "its effect did not happen",
    "failed-after-acting": "a partial effect: it acted, then failed",
}


def next_run_after(resolution: ResolutionOutcome) -> NextRun:
    """The next run's treatment of an attempt the operator resolved as ``resolution``.

    The executor calls it through this module (``resolution.next_run_after``), so a simulation
    can switch the rule off and check that its invariants catch it.
    """
    return _NEXT_RUN[resolution]
