"""Rules the simulation can switch off, one function each, to show it catches their absence.

``switched_off(name)`` monkeypatches the one function that implements rule ``name`` for the
duration of the block. A control test runs seeds with a rule off and expects an invariant
violation within a stated number of seeds. Issue 36's fixes add rules here (acceptance before
landing, ledger identity, operator resolution) with their own one-function switch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _no_fencing() -> list[tuple[Any, str, Any]]:
    """Fencing: ``twice.destinations.commits.check_fence`` accepts every token."""
    from twice.destinations import commits

    original = commits.check_fence
    patched = []
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("twice.") and getattr(module, "check_fence", None) is original:
            patched.append((module, "check_fence", original))
            module.check_fence = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    return patched


def _no_commit_record_precedence() -> list[tuple[Any, str, Any]]:
    """Commit-record precedence: a reconciler's "succeeded" stands in for a missing commit
    record (the settlement rule, ``twice.engine.settle.settle``, as ``twice.engine.settlement``
    calls it, asks
    the service first and takes its success as the owned write's)."""
    from twice.core.outcomes import RemoteState
    from twice.engine import settle as rule
    from twice.engine import settlement

    original = settlement.settle

    def reconcile_first(known: Any, *, ask_remote: Any, still_acting: Any) -> Any:
        if known.can_reconcile and known.commit is rule.Commit.ABSENT:
            state = ask_remote()
            if state is RemoteState.SUCCEEDED:
                return rule.Settlement(rule.Verdict.REMOTE_SUCCEEDED, rule.Proof.REMOTE_JOB,
                                       state)
            return original(known, ask_remote=lambda: state, still_acting=still_acting)
        return original(known, ask_remote=ask_remote, still_acting=still_acting)

    settlement.settle = reconcile_first  # type: ignore[assignment]
    return [(settlement, "settle", original)]


def _no_operator_resolution() -> list[tuple[Any, str, Any]]:
    """Operator resolution: an operator's "failed" no longer means "execute it" (the next run
    holds it, as before issue 36), through ``twice.core.resolution.next_run_after``."""
    from twice.core import resolution

    original = resolution.next_run_after
    resolution.next_run_after = lambda outcome: (  # type: ignore[assignment]
        resolution.NextRun.SETTLED if outcome == "succeeded" else resolution.NextRun.HOLD)
    return [(resolution, "next_run_after", original)]


def _no_acceptance_before_landing() -> list[tuple[Any, str, Any]]:
    """Acceptance before landing: ``twice.engine.verification.check_before_landing`` admits
    every write (what the check after the write finds is then too late)."""
    from twice.engine import verification

    original = verification.check_before_landing
    verification.check_before_landing = lambda *args, **kwargs: None  # type: ignore[assignment]
    return [(verification, "check_before_landing", original)]


def _no_ledger_identity() -> list[tuple[Any, str, Any]]:
    """Ledger identity: ``twice.destinations.commits.check_ledger`` lets any ledger write."""
    from twice.destinations import commits

    original = commits.check_ledger
    commits.check_ledger = lambda *args, **kwargs: None  # type: ignore[assignment]
    return [(commits, "check_ledger", original)]


def _no_input_pinning() -> list[tuple[Any, str, Any]]:
    """Input pinning: ``twice.engine.inputs.Pinned.confirm`` passes whatever the upstream
    holds now (a dependent acts on an upstream rewritten during its attempt)."""
    from twice.engine import inputs

    original = inputs.Pinned.confirm
    inputs.Pinned.confirm = lambda self, tasks=None: None  # type: ignore[method-assign]
    return [(inputs.Pinned, "confirm", original)]


def _no_sibling_settlement() -> list[tuple[Any, str, Any]]:
    """Sibling settlement: ``twice.engine.siblings.settle_siblings`` settles nothing, so another
    unit of a slot that left a write unsettled is never settled (the current one is skipped
    over rows it did not write)."""
    from twice.engine import siblings

    original = siblings.settle_siblings
    siblings.settle_siblings = lambda *args, **kwargs: []  # type: ignore[assignment]
    return [(siblings, "settle_siblings", original)]


#: rule -> (what switching it off does, the switch)
RULES: dict[str, Callable[[], list[tuple[Any, str, Any]]]] = {
    "fencing": _no_fencing,
    "commit_record_precedence": _no_commit_record_precedence,
    "operator_resolution": _no_operator_resolution,
    "acceptance_before_landing": _no_acceptance_before_landing,
    "ledger_identity": _no_ledger_identity,
    "input_pinning": _no_input_pinning,
    "sibling_settlement": _no_sibling_settlement,
}


@contextmanager
def switched_off(rule: str) -> Iterator[None]:
    patched = RULES[rule]()
    try:
        yield
    finally:
        for owner, attribute, original in patched:
            setattr(owner, attribute, original)
