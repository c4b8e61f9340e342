"""A short English status update for an international incident meeting.

It opens with the scope's headline in the one health vocabulary (``twice.reports.health``):
``done: 28/28 verified`` when every unit is verified, and then nothing more than the caller's
assumptions; otherwise what needs attention first (unknown, held, refused, failed, stale
evidence, unverified, blocked), what is confirmed, what is in progress, the planner's next
action and when the next piece of evidence is due. Plain sentences, UTC times, short unit names
(the shared pipeline and interval are said once, in the header), and nothing the ledger has no
evidence for.

The next action is the current recorded planner decision; a unit that needs one but has none
(evidence came after it) gets the planner's decision over the ledger as of the update, marked
"decided as of this update". While an attempt is running or its outcome unknown, the next
evidence is never "none scheduled": reconcile (look the job up by its id) now, refresh evidence
older than the unit's maximum observation age (the run's plan settings; default 600 s), or
observe again before it goes stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from twice.engine.evidence import AssumedDuration
from twice.reports import wording
from twice.reports.gather import Evidence, UnitReport
from twice.reports.health import (
    AWAITING_ACTION,
    IN_PROGRESS,
    NEEDS_ATTENTION,
    NEEDS_FRESH_EVIDENCE,
    PROCESS_EXITED,
    Health,
    is_refusal,
    ordered,
    scope,
)

MAX_ITEMS = 5
MAX_CAUSE = 90  # characters of an error message in the update; the handover has them whole
#: The order decisions are read out in a meeting: what needs a human first.
URGENCY = (
    "deadline-infeasible", "reconcile-remote", "repair-cause", "attempts-exhausted",
    "reconcile-effects", "refresh-observation", "observe-running", "validate-output",
    "retry-eligible", "wait-backoff",
)

Namer = Callable[[UnitReport], str]


def _listing(items: list[str], limit: int = MAX_ITEMS, sep: str = "; ") -> str:
    """The first ``limit`` items and how many more: a line stays short whatever the number
    of units."""
    shown = items[:limit]
    if len(items) > limit:
        shown.append(f"and {len(items) - limit} more")
    return sep.join(shown)


def _namer(evidence: Evidence) -> tuple[Namer, str]:
    """Short names, and the scope they leave out ("pipeline p, interval d")."""
    pipelines = {u.unit.pipeline for u in evidence.units}
    intervals = sorted({u.unit.interval for u in evidence.units}, key=lambda i: i.start)
    scope_parts = []
    if len(pipelines) == 1:
        scope_parts.append(f"pipeline {next(iter(pipelines))}")
    if len(intervals) == 1:
        scope_parts.append(f"interval {wording.interval(intervals[0])}")
    elif intervals:
        scope_parts.append(f"intervals {wording.interval(intervals[0])} .. "
                           f"{wording.interval(intervals[-1])} ({len(intervals)})")

    def name(unit: UnitReport) -> str:
        text = unit.unit.task if len(pipelines) == 1 else f"{unit.unit.pipeline}.{unit.unit.task}"
        return text if len(intervals) == 1 else f"{text} {wording.interval(unit.unit.interval)}"

    return name, ", ".join(scope_parts)


def _age(unit: UnitReport, as_of: datetime) -> str:
    """Who supplied the evidence the unit's state rests on, and how old it is."""
    asserted = unit.asserted
    if asserted is not None:
        return f"{asserted.label}, {wording.span(as_of - asserted.at)} ago"
    status = unit.status
    evidence = status.evidence
    if evidence is not None:
        record = evidence.record
        return (f"{record.state} via {record.source}, evidence "
                f"{wording.span(as_of - record.observed_at)} old")
    if status.source is not None and status.at is not None:
        return f"{status.source}, {wording.span(as_of - status.at)} ago"
    return "no observation recorded"


def _evidence_age(unit: UnitReport, as_of: datetime) -> str:
    """``, last evidence 15 min old via reconcile, over the 10 min limit`` for an attempt whose
    next decision rests on fresh evidence; empty when nothing dates it."""
    status = unit.status
    if status.at is None:
        return ""
    via = f" via {status.source}" if status.source else ""
    text = f", last evidence {wording.span(as_of - status.at)} old{via}"
    limit = unit.max_observation_age
    if status.stale_at is not None and status.stale_at < as_of and limit is not None:
        text += f", over the {wording.span(limit)} limit"
    return text


def _job(unit: UnitReport) -> str:
    latest = unit.attempts[-1] if unit.attempts else None
    return f"job {latest.job_id}" if latest is not None and latest.job_id else ""


def _short(text: str, limit: int = MAX_CAUSE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _cause(unit: UnitReport) -> str:
    """The recorded reason a unit failed, was refused or was not run, in a few words."""
    decision = unit.current_decision
    if decision is not None and decision.record.not_started:
        return decision.record.decision
    latest = unit.attempts[-1] if unit.attempts else None
    if unit.asserted is not None:
        return unit.asserted.label
    errors = [e for e in unit.errors if latest is not None and e.attempt == latest.number]
    cause = ""
    if errors:
        error = errors[-1]
        cause = (error.message if is_refusal(error.error_class)
                 else f"{error.error_class.rsplit('.', 1)[-1]}: {error.message}")
    if decision is not None and latest is not None and latest.outcome == "failed-transient":
        cause = f"{decision.record.decision}; {cause}" if cause else decision.record.decision
    if cause:
        return _short(cause)
    if decision is not None:
        return decision.record.decision
    evidence = unit.status.evidence
    if evidence is not None and evidence.record.detail.get("reason"):
        return _short(str(evidence.record.detail["reason"]))
    return _short(unit.status.text)


def _item(unit: UnitReport, as_of: datetime, name: Namer) -> str:
    """One unit in the update, in the words its health calls for; an outcome an operator
    asserted (``twice resolve``) says so, whatever the health."""
    text = _item_text(unit, as_of, name)
    asserted = unit.asserted
    if asserted is not None and "asserted" not in text:
        text += f" [{asserted.label}]"
    return text


def _item_text(unit: UnitReport, as_of: datetime, name: Namer) -> str:
    state = unit.status.state
    latest = unit.attempts[-1] if unit.attempts else None
    number = 0 if latest is None else latest.number
    if state == Health.UNKNOWN and latest is not None:
        since = latest.unknown_since or latest.started_at
        job = f" ({_job(unit)})" if _job(unit) else ""
        if latest.changes and latest.changes[0].cause == PROCESS_EXITED:
            # when the process died is not known: only that this report found it gone
            return (f"{name(unit)} attempt {number}{job} running since "
                    f"{wording.clock_time(latest.started_at)}, its process has exited (seen "
                    "by this report, not yet recorded), do not retry before settling it")
        return (f"{name(unit)} attempt {number}{job} unknown since "
                f"{wording.clock_time(since)}{_evidence_age(unit, as_of)}, do not retry before "
                "settling it")
    if state in (Health.RUNNING, Health.STALE_EVIDENCE) and latest is not None:
        at = unit.status.at
        last = "never observed" if at is None else f"last evidence {wording.span(as_of - at)} old"
        if state == Health.STALE_EVIDENCE and unit.max_observation_age is not None:
            last += f", over the {wording.span(unit.max_observation_age)} limit"
        return (f"{name(unit)} attempt {number} running since "
                f"{wording.clock_time(latest.started_at)} ({last})")
    if state == Health.HELD:
        why = ("not safe_repeat and already succeeded" if unit.asserted is None
               else "not safe_repeat, and resolved as failed after acting")
        return (f"{name(unit)} ({why}: name it with --repeat {unit.unit.task} to execute it "
                "again)")
    if state == Health.UNVERIFIED:
        return f"{name(unit)} ({_age(unit, as_of)}; validate its output)"
    if state == Health.WAITING:
        decision = unit.current_decision
        if decision is not None and decision.earliest_start is not None:
            return (f"{name(unit)} (attempt {number + 1} may start at "
                    f"{wording.clock_time(decision.earliest_start)})")
        return f"{name(unit)} (attempt {number} failed transiently; a retry is allowed)"
    if state == Health.NEVER_RUN:
        return name(unit)
    return f"{name(unit)} ({_cause(unit)})"


def _grouped(units: list[UnitReport], states: tuple[Health, ...], as_of: datetime,
             name: Namer) -> list[str]:
    parts = []
    for state in states:
        found = [u for u in units if u.status.state == state]
        if found:
            parts.append(f"{state}: {_listing([_item(u, as_of, name) for u in found], 3)}")
    return parts


def _confirmed(evidence: Evidence, name: Namer) -> str:
    verified = evidence.in_state(Health.VERIFIED)
    asserted = evidence.in_state(Health.ASSERTED)
    total = scope(evidence.units).total
    if verified:
        names = [f"{name(u)} ({_age(u, evidence.as_of)})" for u in verified]
        line = (f"Confirmed: {len(verified)} of {total} verified succeeded (the engine checked "
                f"their output): {_listing(names)}.")
    else:
        line = f"Confirmed: none of the {total} units is verified."
    if asserted:
        names = [f"{name(u)} ({_age(u, evidence.as_of)})" for u in asserted]
        line += (f" Succeeded as {wording.ASSERTED_BY_OPERATOR}, not observed by twice: "
                 f"{_listing(names)}.")
    return line


#: The planner's words for "look at the job by its id" (the job id goes with them).
BY_JOB_ID = frozenset({"reconcile-remote", "observe-running", "refresh-observation"})


@dataclass(frozen=True)
class _Next:
    """The decision the update reads out for a unit: the current recorded one, else the
    planner's as of the update (``planned``: decided now, recorded nowhere)."""

    kind: str
    earliest_start: datetime | None
    estimated_finish: datetime | None
    not_started: bool
    planned: bool
    duration: AssumedDuration | None = None  # what a timed decision assumed an attempt takes


def _next_of(unit: UnitReport) -> _Next | None:
    decision = unit.current_decision
    if decision is not None:
        return _Next(decision.record.decision, decision.earliest_start,
                     decision.estimated_finish, decision.record.not_started, planned=False,
                     duration=decision.duration)
    planned = unit.planned
    if planned is not None:
        return _Next(planned.decision, planned.earliest_start, planned.estimated_finish,
                     not_started=False, planned=True, duration=planned.duration)
    return None


def _action_note(unit: UnitReport, chosen: _Next) -> str:
    notes = []
    if chosen.kind == "wait-backoff" and chosen.earliest_start is not None:
        notes.append(f"until {wording.clock_time(chosen.earliest_start)}")
    if chosen.kind in BY_JOB_ID and _job(unit):
        notes.append(_job(unit))
    if chosen.planned:
        notes.append("decided as of this update")
    if chosen.estimated_finish is not None and chosen.duration is not None:
        notes.append(chosen.duration.text())  # what its finish time rests on
    if not notes:
        return ""
    if notes[0].startswith("until "):
        head, rest = f" {notes[0]}", notes[1:]
        return head + (f" ({'; '.join(rest)})" if rest else "")
    return f" ({'; '.join(notes)})"


def _needs_action(unit: UnitReport) -> bool:
    return unit.status.state in AWAITING_ACTION


def _next_action(evidence: Evidence, name: Namer) -> str:
    grouped: dict[str, list[str]] = {}
    missing = []
    late: list[UnitReport] = []  # deadline-infeasible: their impact is said after the line
    for unit in evidence.units:
        if not _needs_action(unit):
            continue  # settled or superseded: nothing for the planner to do
        chosen = _next_of(unit)
        if chosen is None:
            missing.append(name(unit))
            continue
        grouped.setdefault(chosen.kind, []).append(name(unit) + _action_note(unit, chosen))
        if chosen.kind == "deadline-infeasible":
            late.append(unit)
    items = [f"{kind} for {_listing(grouped[kind], sep=', ')}" for kind in URGENCY
             if kind in grouped]
    if "deadline-infeasible" in grouped:
        items[0] += " (do not start; communicate the impact and an alternative)"
    line = (f"Next action (planner decisions): {_listing(items, len(URGENCY))}." if items
            else "Next action: no current planner decision is recorded.")
    if missing:
        line += f" No current decision for {_listing(missing, 3)}."
    return f"{line} {_impact(late, name)}" if late else line


def _impact(late: list[UnitReport], name: Namer) -> str:
    """When a deadline no longer fits (``late``: the units decided deadline-infeasible):
    which intervals miss it and who waits on them (the source documents: communicate the
    impact, and an alternative, before anyone starts)."""
    missed = []
    for unit in late:
        decision = unit.current_decision
        at = (decision.deadline if decision is not None else None) or (
            unit.deadline.at if unit.deadline else None)
        missed.append(name(unit) + (f" (deadline {wording.instant(at)})" if at else ""))
    waiting = sorted({task for unit in late for task in unit.downstream})
    them = "them" if len(late) > 1 else "it"
    consumers = (f"; downstream, {_listing(waiting, sep=', ')} wait on {them} and miss the "
                 "deadline too" if waiting else f"; no downstream task waits on {them}")
    return (f"Impact: {_listing(missed, sep=', ')} cannot be delivered by the deadline"
            f"{consumers}. Alternatives: agree a later deadline (then run with --deadline), "
            "deliver a partial or earlier version and say so, or skip the interval and "
            "backfill it later.")


def _due(unit: UnitReport, as_of: datetime, name: Namer) -> list[tuple[datetime, str]]:
    due: list[tuple[datetime, str]] = []
    if not _needs_action(unit):
        return due  # a verified, settled unit needs no fresh evidence
    chosen = _next_of(unit)
    state = unit.status.state
    job = _job(unit)
    look = f" (look {job} up by its id)" if job else ""
    stale_at = unit.status.stale_at
    if chosen is not None:
        start = chosen.earliest_start
        if start is not None and start > as_of and not chosen.not_started:
            text = f"{name(unit)} backoff ends, attempt {_next_number(unit)} may start"
            if chosen.estimated_finish is not None:
                text += f" (estimated finish {wording.clock_time(chosen.estimated_finish)}"
                if unit.deadline is not None:
                    text += f", deadline {wording.clock_time(unit.deadline.at)}"
                text += ")"
            due.append((start, text))
        elif chosen.kind == "reconcile-remote":
            due.append((as_of, f"reconcile {name(unit)}{look or ' with the remote service'}"))
    elif state == Health.UNKNOWN:  # no decision at all: an unknown outcome is settled first
        due.append((as_of, f"reconcile {name(unit)}{look}"))
    if state == Health.UNVERIFIED:
        due.append((as_of, f"validate {name(unit)}'s output"))
    if state not in NEEDS_FRESH_EVIDENCE:
        return due
    source = unit.status.source or "the attempt record"
    if stale_at is None:  # nothing dates the evidence: it is wanted now
        if not due:
            due.append((as_of, f"observe {name(unit)}{look}"))
    elif stale_at <= as_of:
        due.append((as_of, f"refresh {name(unit)}{look}: its evidence via {source} went stale "
                           f"at {wording.clock_time(stale_at)}"))
    elif not due:  # running with fresh evidence: observe again before it goes stale
        due.append((stale_at, f"observe {name(unit)}{look}, before its evidence goes stale"))
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


def _assumed(evidence: Evidence) -> str | None:
    if not evidence.assumptions:
        return None
    safe = sorted({a.subject for a in evidence.assumptions if "safe_repeat" in a.text})
    pipelines = {u.unit.pipeline for u in evidence.units}
    if len(pipelines) == 1:  # the header names the pipeline once
        prefix = f"{next(iter(pipelines))}."
        safe = [s.removeprefix(prefix) for s in safe]
    text = (f"Assumed by the caller, not verified: {len(evidence.assumptions)} assertions or "
            "estimates")
    if safe:
        text += f", including safe_repeat for {', '.join(safe)}"
    return text + "; see the handover."


def render_update(evidence: Evidence) -> str:
    """The update as a few lines of text (ends with a newline)."""
    name, scope_text = _namer(evidence)
    scope_text = scope_text or ("pipeline " + evidence.pipeline if evidence.pipeline
                                else "all pipelines")
    left_out = f"; {evidence.left_out} later records left out" if evidence.left_out else ""
    header = (f"Status update, {scope_text}, as of {wording.instant(evidence.as_of)} "
              f"(ledger {evidence.ledger}; {len(evidence.units)} units of work{left_out}).")
    if not evidence.units:
        return header + "\nThe ledger records no units of work: nothing to report.\n"
    summary = scope(evidence.units)
    if summary.done:
        lines: tuple[str | None, ...] = (header, summary.headline, _assumed(evidence))
        return "\n".join(line for line in lines if line) + "\n"
    units = ordered(evidence.units)
    attention = _grouped(units, NEEDS_ATTENTION, evidence.as_of, name)
    progress = _grouped(units, IN_PROGRESS, evidence.as_of, name)
    lines = (
        header,
        summary.headline,
        f"Needs attention: {'; '.join(attention)}." if attention else None,
        _confirmed(evidence, name),
        f"In progress: {'; '.join(progress)}." if progress else None,
        _next_action(evidence, name),
        _next_evidence(evidence, name),
        _assumed(evidence),
    )
    return "\n".join(line for line in lines if line) + "\n"
