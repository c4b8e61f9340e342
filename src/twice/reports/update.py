"""A short English status update for an international incident meeting.

Four questions, one line each (the seed's order): what is confirmed, what is still unknown, what
the planner decided to do next, and when the next piece of evidence is due. Plain sentences, UTC
times, short unit names (the shared pipeline and business date are said once, in the header),
and nothing the ledger has no evidence for: a unit that finished without error is "not yet
validated", not "done".
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from twice.reports import wording
from twice.reports.evidence import OPEN_STATES, Evidence, UnitReport

MAX_ITEMS = 5
#: The order decisions are read out in a meeting: what needs a human first.
URGENCY = (
    "deadline-infeasible", "reconcile-remote", "repair-cause", "attempts-exhausted",
    "reconcile-effects", "refresh-observation", "observe-running", "validate-output",
    "retry-eligible", "wait-backoff",
)

Namer = Callable[[UnitReport], str]


def _listing(items: list[str], limit: int = MAX_ITEMS) -> str:
    shown = items[:limit]
    if len(items) > limit:
        shown.append(f"and {len(items) - limit} more")
    return "; ".join(shown)


def _namer(evidence: Evidence) -> tuple[Namer, str]:
    """Short names, and the scope they leave out ("pipeline p, business date d")."""
    pipelines = {u.unit.pipeline for u in evidence.units}
    intervals = {u.unit.interval for u in evidence.units}
    scope = []
    if len(pipelines) == 1:
        scope.append(f"pipeline {next(iter(pipelines))}")
    if len(intervals) == 1:
        scope.append(f"interval {wording.interval(next(iter(intervals)))}")

    def name(unit: UnitReport) -> str:
        text = unit.unit.task if len(pipelines) == 1 else f"{unit.unit.pipeline}.{unit.unit.task}"
        return text if len(intervals) == 1 else f"{text} {wording.interval(unit.unit.interval)}"

    return name, ", ".join(scope)


def _age(unit: UnitReport, as_of: datetime) -> str:
    asserted = unit.asserted
    if asserted is not None:
        return f"{asserted.label}, {wording.span(as_of - asserted.at)} ago"
    evidence = unit.status.evidence
    if evidence is None:
        return "no observation recorded"
    record = evidence.record
    return (f"{record.state} via {record.source}, evidence "
            f"{wording.span(as_of - record.observed_at)} old")


def _confirmed(evidence: Evidence, name: Namer) -> str:
    verified = evidence.in_state("verified")
    succeeded = evidence.in_state("succeeded")
    unvalidated = [u for u in succeeded if u.status.basis != "asserted"]
    asserted = [u for u in succeeded if u.status.basis == "asserted"]
    total = len(evidence.units)
    if verified:
        names = [f"{name(u)} ({_age(u, evidence.as_of)})" for u in verified]
        line = (f"Confirmed: {len(verified)} of {total} verified succeeded (output validated): "
                f"{_listing(names)}.")
    else:
        line = f"Confirmed: none of the {total} units is verified succeeded."
    if unvalidated:
        names = [f"{name(u)} ({_age(u, evidence.as_of)})" for u in unvalidated]
        line += (f" Finished without error but not yet validated: {_listing(names)}.")
    if asserted:
        names = [f"{name(u)} ({_age(u, evidence.as_of)})" for u in asserted]
        line += (f" Succeeded as {wording.ASSERTED_BY_OPERATOR}, not observed by twice: "
                 f"{_listing(names)}.")
    return line


def _job(unit: UnitReport) -> str:
    latest = unit.attempts[-1] if unit.attempts else None
    return f"job {latest.job_id}" if latest is not None and latest.job_id else ""


def _unknown(evidence: Evidence, name: Namer) -> str:
    as_of = evidence.as_of
    items = []
    for unit in evidence.in_state("unknown"):
        attempt = unit.attempts[-1]
        since = attempt.unknown_since or attempt.started_at
        job = f" ({_job(unit)})" if _job(unit) else ""
        items.append(f"{name(unit)} attempt {attempt.number}{job} unknown since "
                     f"{wording.clock_time(since)}, do not retry before reconciling it")
    for unit in evidence.in_state("running"):
        attempt = unit.attempts[-1]
        seen = unit.latest_observation
        last = ("never observed" if seen is None else
                f"last observed {seen.record.state} {wording.span(as_of - seen.record.observed_at)}"
                " ago")
        items.append(f"{name(unit)} attempt {attempt.number} still running since "
                     f"{wording.clock_time(attempt.started_at)} ({last})")
    if not items:
        return "Outcome unknown: none; every recorded attempt has a known outcome."
    return f"Outcome still unknown: {_listing(items)}."


def _failed(evidence: Evidence, name: Namer) -> str | None:
    items = []
    for unit in evidence.in_state("failed-permanent", "failed-transient", "not-started"):
        error = unit.errors[-1] if unit.errors else None
        decision = unit.current_decision
        if unit.status.state == "not-started" and decision is not None:
            cause = f" ({decision.record.decision})"
        elif unit.asserted is not None:
            cause = f" ({_age(unit, evidence.as_of)})"
        else:
            cause = f" ({error.classification}: {error.message})" if error else ""
        items.append(f"{name(unit)} {unit.status.state}{cause}")
    return f"Not delivered: {_listing(items)}." if items else None


def _action_note(unit: UnitReport) -> str:
    decision = unit.current_decision
    assert decision is not None
    kind = decision.record.decision
    if kind == "wait-backoff" and decision.earliest_start is not None:
        return f" until {wording.clock_time(decision.earliest_start)}"
    if kind == "reconcile-remote" and _job(unit):
        return f" ({_job(unit)})"
    return ""


def _next_action(evidence: Evidence, name: Namer) -> str:
    grouped: dict[str, list[str]] = {}
    missing = []
    for unit in evidence.units:
        decision = unit.current_decision
        if decision is None:
            if unit.status.state != "verified":
                missing.append(name(unit))
            continue
        grouped.setdefault(decision.record.decision, []).append(name(unit) + _action_note(unit))
    items = [f"{kind} for {', '.join(grouped[kind])}" for kind in URGENCY if kind in grouped]
    if "deadline-infeasible" in grouped:
        items[0] += " (do not start; communicate the impact and an alternative)"
    line = (f"Next action (planner decisions): {_listing(items, len(URGENCY))}." if items
            else "Next action: no current planner decision is recorded.")
    if missing:
        line += f" No current decision for {_listing(missing, 3)}."
    return line


def _due(unit: UnitReport, as_of: datetime, name: Namer) -> list[tuple[datetime, str]]:
    due: list[tuple[datetime, str]] = []
    decision = unit.current_decision
    if decision is not None:
        kind = decision.record.decision
        start = decision.earliest_start
        if start is not None and start > as_of and not decision.record.not_started:
            text = f"{name(unit)} backoff ends, attempt {_next_number(unit)} may start"
            if decision.estimated_finish is not None:
                text += f" (estimated finish {wording.clock_time(decision.estimated_finish)}"
                if unit.deadline is not None:
                    text += f", deadline {wording.clock_time(unit.deadline.at)}"
                text += ")"
            due.append((start, text))
        elif kind == "reconcile-remote":
            due.append((as_of, f"reconcile {name(unit)} with the remote service"))
        elif kind == "validate-output":
            due.append((as_of, f"validate {name(unit)}'s output"))
    latest = unit.latest_observation
    if latest is None or latest.stale_at is None or unit.status.state not in OPEN_STATES:
        return due
    record = latest.record
    if latest.stale:
        due.append((as_of, f"refresh {name(unit)}: its {record.state} observation via "
                           f"{record.source} went stale at {wording.clock_time(latest.stale_at)}"))
    else:
        due.append((latest.stale_at, f"refresh {name(unit)} (observation goes stale)"))
    return due


def _next_evidence(evidence: Evidence, name: Namer) -> str:
    as_of = evidence.as_of
    due = [item for unit in evidence.units for item in _due(unit, as_of, name)]
    if not due:
        return "Next evidence: none scheduled by the recorded decisions."
    due.sort(key=lambda item: item[0])
    now = [text for at, text in due if at <= as_of]
    later = [f"{wording.clock_time(at)} {text}" for at, text in due if at > as_of]
    parts = []
    if now:
        parts.append(f"due now: {_listing(now)}")
    if later:
        parts.append(f"then {_listing(later)}")
    return "Next evidence: " + "; ".join(parts) + "."


def _next_number(unit: UnitReport) -> int:
    return (unit.attempts[-1].number if unit.attempts else 0) + 1


def _not_established(evidence: Evidence) -> str | None:
    if not evidence.assumptions:
        return None
    safe = sorted({a.subject for a in evidence.assumptions if "safeRepeat" in a.text})
    text = (f"Assumed, not verified: {len(evidence.assumptions)} caller assertions or "
            "estimates")
    if safe:
        text += f", including safeRepeat for {len(safe)} unit(s)"
    return text + "; see the handover."


def render_update(evidence: Evidence) -> str:
    """The update as a few lines of text (ends with a newline)."""
    name, scope = _namer(evidence)
    scope = scope or ("pipeline " + evidence.pipeline if evidence.pipeline else "all pipelines")
    left_out = f"; {evidence.left_out} later records left out" if evidence.left_out else ""
    header = (f"Status update, {scope}, as of {wording.instant(evidence.as_of)} "
              f"(ledger {evidence.ledger}; {len(evidence.units)} units of work{left_out}).")
    if not evidence.units:
        return header + "\nThe ledger records no units of work: nothing to report.\n"
    lines = (
        header,
        _confirmed(evidence, name),
        _unknown(evidence, name),
        _failed(evidence, name),
        _next_action(evidence, name),
        _next_evidence(evidence, name),
        _not_established(evidence),
    )
    return "\n".join(line for line in lines if line) + "\n"
