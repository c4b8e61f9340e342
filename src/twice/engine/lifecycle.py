"""The unit's lifecycle as a state machine: its states and allowed transitions, declared once.

One run of one unit of work (claimed under its lease by ``twice.engine.claim``, driven by
``twice.engine.drive.UnitDriver``) moves only through a :class:`Lifecycle`, which refuses any
transition not in :data:`TRANSITIONS`. The phases that decide each step are small collaborators,
each owning its own state and answering with typed values (docs/architecture.md, "The lifecycle
as a state machine"):

=============  ==============================================================================
state          what happens there, and who decides
=============  ==============================================================================
claimed        the claim's transaction read the unit (``claim.Claim``, ``hold.RepeatHold``)
settling       an unknown or running attempt is settled (``settlement.Settler``)
planning       the lab planner is asked on ledger evidence (``drive.UnitDriver``)
waiting        the policy's backoff is waited (``gates.StartGates``)
starting       may the next attempt start: deadlines, cost, inputs, lease, pool slots, the
               file's writer (``gates.StartGates``, ``slots.SlotHolding``)
attempting     the attempt runs under its write stamp (``attempting.AttemptRunner``)
verifying      its output is checked and its end recorded (``verify.OutputCheck``,
               ``attempting.AttemptRunner.finish``)
stopped        terminal: the run left the unit with an outcome
superseded     terminal: the unit's inputs changed; the driver identifies the new unit
=============  ==============================================================================

An exception (the ledger failing, an interrupt) leaves the machine where it stood: the run
ends there, and the next run settles what it left from the ledger and the destination.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from enum import StrEnum


class UnitState(StrEnum):
    """Where one run of one unit stands (see the module docstring)."""

    CLAIMED = "claimed"
    SETTLING = "settling"
    PLANNING = "planning"
    WAITING = "waiting"
    STARTING = "starting"
    ATTEMPTING = "attempting"
    VERIFYING = "verifying"
    STOPPED = "stopped"
    SUPERSEDED = "superseded"


S = UnitState

#: Every transition a run may make, declared once: state -> the states it may move to.
TRANSITIONS: dict[UnitState, frozenset[UnitState]] = {
    # the claim found: a success not to repeat, a hold, an unknown attempt to settle first,
    # an attempt begun in the claim's own transaction, or nothing in the way
    S.CLAIMED: frozenset({S.STOPPED, S.SETTLING, S.ATTEMPTING, S.PLANNING}),
    # settled (plan again; a rewritten success runs again) or left for later / the operator
    S.SETTLING: frozenset({S.PLANNING, S.STOPPED}),
    # the planner's decision: done, stop, settle, refresh (plan again), back off, or start;
    # or the attempt just recorded read or landed nothing because its inputs moved under it
    # (``drive.UnitDriver._inputs_moved``): superseded
    S.PLANNING: frozenset({S.STOPPED, S.SETTLING, S.PLANNING, S.WAITING, S.STARTING,
                           S.SUPERSEDED}),
    # waited (plan again: the deadline check sees the real start), or refused before waiting
    S.WAITING: frozenset({S.PLANNING, S.STOPPED}),
    # every gate passed (begin), refused (not started, blocked, lease lost), inputs changed
    S.STARTING: frozenset({S.ATTEMPTING, S.STOPPED, S.SUPERSEDED}),
    S.ATTEMPTING: frozenset({S.VERIFYING}),
    # recorded (plan again), or another holder had closed it meanwhile
    S.VERIFYING: frozenset({S.PLANNING, S.STOPPED}),
    S.STOPPED: frozenset(),
    S.SUPERSEDED: frozenset(),
}

TERMINAL = frozenset(state for state, onward in TRANSITIONS.items() if not onward)


class LifecycleError(AssertionError):
    """The engine tried a transition the lifecycle does not declare: a bug in twice, never a
    user's error (so not a ``twice.errors.TwiceError``)."""


Watcher = Callable[[UnitState, UnitState], None]
_watchers: list[Watcher] = []
#: every refused transition of this process, described (the test suite fails on any: an
#: engine path that catches broad exceptions could otherwise hide one)
refused: list[str] = []
_watchers_lock = threading.Lock()


@contextlib.contextmanager
def watching(watcher: Watcher) -> Iterator[None]:
    """Call ``watcher(from, to)`` on every transition any run makes meanwhile (tests)."""
    with _watchers_lock:
        _watchers.append(watcher)
    try:
        yield
    finally:
        with _watchers_lock:
            _watchers.remove(watcher)


class Lifecycle:
    """The state of one run of one unit; the only thing that moves it."""

    def __init__(self, state: UnitState = UnitState.CLAIMED) -> None:
        self.state = state
        self.path: list[UnitState] = [state]

    def move(self, to: UnitState) -> None:
        """Move to ``to``; :class:`LifecycleError` when the table does not allow it."""
        here = self.state
        if to not in TRANSITIONS[here]:
            why = (f"undeclared lifecycle transition {here} -> {to} "
                   f"(path so far: {' -> '.join(self.path)})")
            refused.append(why)
            raise LifecycleError(why)
        self.state = to
        self.path.append(to)
        for watcher in tuple(_watchers):
            watcher(here, to)

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL
