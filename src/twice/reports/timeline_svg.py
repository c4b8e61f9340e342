"""One unit of work's timeline as inline SVG: attempts, backoff gaps, evidence, deadline.

Drawn by hand with the stdlib so the report stays one offline file. Every element has a stable
class (``attempt-bar outcome-failed-transient``, ``backoff-gap``, ``observation-marker``,
``decision-marker``, ``not-started-bar``, ``deadline-line``, ``as-of-line``) so tests and
stylesheets can find it, and a ``<title>`` so hovering says what the mark is evidence of.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from twice.core.inert import html_text as escape
from twice.reports import wording
from twice.reports.gather import Attempt, Observation, RecordedDecision, UnitReport
from twice.reports.health import NEEDS_FRESH_EVIDENCE

WIDTH = 1000
LABEL_WIDTH = 118
RIGHT_MARGIN = 24
TOP = 44
LANE = 26
BAR = 16
AXIS = 30

_TICK_STEPS = [
    timedelta(seconds=s)
    for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
              43200, 86400, 172800, 604800)
]
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
#: Observation kinds in the order their marker colour is chosen (the first match wins).
MARKER_KINDS = ("operator-resolution", "done-with-error", "validation-failed", "duplicate",
                "commit-record", "reconcile", "validated", "lease-takeover")


def slug(text: str) -> str:
    """An id-safe form of a unit of work id (ids become CSS selectors and URL fragments)."""
    return _UNSAFE_ID.sub("-", text)


@dataclass(frozen=True)
class _Scale:
    start: datetime
    end: datetime

    def x(self, at: datetime) -> float:
        span = (self.end - self.start).total_seconds()
        fraction = (at - self.start).total_seconds() / span
        return LABEL_WIDTH + fraction * (WIDTH - LABEL_WIDTH - RIGHT_MARGIN)

    def clamp(self, at: datetime) -> datetime:
        return min(max(at, self.start), self.end)


def _instants(unit: UnitReport) -> list[datetime]:
    found: list[datetime] = []
    for attempt in unit.attempts:
        found.append(attempt.started_at)
        found.extend(change.at for change in attempt.changes)
    found.extend(o.record.observed_at for o in unit.observations)
    for decision in unit.decisions:
        found.append(decision.record.as_of)
        found.extend(t for t in (decision.earliest_start, decision.estimated_finish) if t)
    if unit.deadline is not None:
        found.append(unit.deadline.at)
    return found


def _open(attempt: Attempt) -> bool:
    return attempt.outcome in ("running", "unknown")


def _scale(unit: UnitReport, as_of: datetime) -> tuple[_Scale, bool] | None:
    """The plotted span, and whether as_of is inside it (a far-away as_of would flatten it)."""
    instants = _instants(unit)
    if not instants:
        return None
    first, last = min(instants), max(instants)
    width = last - first
    show_as_of = any(_open(a) for a in unit.attempts) or as_of - last <= max(
        width, timedelta(minutes=1)
    )
    if show_as_of:
        first, last = min(first, as_of), max(last, as_of)
    width = max(last - first, timedelta(seconds=10))
    pad = width * 0.04
    return _Scale(first - pad, last + pad), show_as_of


def _step(scale: _Scale) -> timedelta:
    span = scale.end - scale.start
    return next((s for s in _TICK_STEPS if span / s <= 8), _TICK_STEPS[-1])


def _tick_label(at: datetime, step: timedelta) -> str:
    if step >= timedelta(days=1):
        return at.strftime("%Y-%m-%d")
    if step >= timedelta(minutes=1):
        return at.strftime("%H:%MZ")
    return wording.clock_time(at)


def _axis(scale: _Scale, bottom: float) -> list[str]:
    step = _step(scale)
    seconds = step.total_seconds()
    epoch = scale.start.timestamp()
    first = datetime.fromtimestamp((epoch // seconds + 1) * seconds, tz=scale.start.tzinfo)
    parts = [f'<g class="axis"><line class="axis-line" x1="{LABEL_WIDTH}" y1="{bottom}" '
             f'x2="{WIDTH - RIGHT_MARGIN}" y2="{bottom}"/>']
    tick = first
    while tick <= scale.end:
        x = scale.x(tick)
        parts.append(
            f'<line class="tick" x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{bottom + 4}"/>'
            f'<text class="tick-label" x="{x:.1f}" y="{bottom + 17}">'
            f"{escape(_tick_label(tick, step))}</text>"
        )
        tick += step
    parts.append("</g>")
    return parts


def _lane_label(y: float, text: str) -> str:
    return f'<text class="lane-label" x="8" y="{y + BAR - 4:.1f}">{escape(text)}</text>'


def _attempt_marks(attempt: Attempt, scale: _Scale, as_of: datetime, y: float,
                   unit_slug: str) -> list[str]:
    start = attempt.started_at
    end = attempt.ended_at
    open_ended = end is None
    bar_end = scale.clamp(as_of if end is None else end)
    x0, x1 = scale.x(start), scale.x(bar_end)
    classes = f"attempt-bar outcome-{attempt.outcome}" + (" open-ended" if open_ended else "")
    shown_end = "not ended" if end is None else wording.instant(end)
    duration = "" if end is None else f" ({wording.span(end - start)})"
    job = f", job {attempt.job_id}" if attempt.job_id else ""
    asserted = attempt.asserted
    how = attempt.basis if asserted is None else asserted.label
    title = (f"Attempt {attempt.number}: {attempt.outcome} ({how}) from "
             f"{wording.instant(start)} to {shown_end}{duration}{job}")
    parts = [
        f'<rect class="{classes}" id="attempt-{unit_slug}-{attempt.number}" '
        f'data-attempt="{attempt.number}" data-outcome="{attempt.outcome}" '
        f'x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 2):.1f}" height="{BAR}" rx="2">'
        f"<title>{escape(title)}</title></rect>"
    ]
    since = attempt.unknown_since
    if since is not None:
        until = attempt.resolved_at or as_of
        u0, u1 = scale.x(scale.clamp(since)), scale.x(scale.clamp(until))
        if attempt.resolved_at is None:
            settled = "still unknown"
        elif asserted is not None:
            settled = f"{attempt.outcome} {asserted.label}, at {wording.instant(until)}"
        else:
            settled = f"resolved {attempt.outcome} at {wording.instant(until)}"
        parts.append(
            f'<rect class="unknown-span" x="{u0:.1f}" y="{y + 3:.1f}" '
            f'width="{max(u1 - u0, 2):.1f}" height="{BAR - 6}" fill="url(#hatch-{unit_slug})">'
            f"<title>{escape(f'Outcome unknown from {wording.instant(since)}, {settled}')}"
            "</title></rect>"
        )
    return parts


def _gap(previous: Attempt, attempt: Attempt, scale: _Scale, y: float) -> list[str]:
    if attempt.gap_before is None or previous.ended_at is None:
        return []
    x0, x1 = scale.x(previous.ended_at), scale.x(attempt.started_at)
    mid = y + BAR / 2
    # Only a wait after a transient failure is a backoff; after an unknown outcome the gap is
    # the time spent reconciling, and calling it a backoff would misstate what happened.
    word = "backoff" if previous.outcome == "failed-transient" else "gap"
    label = f"{word} {wording.span(attempt.gap_before)}"
    title = (f"{label} between attempt {previous.number} ending ({previous.outcome}) and "
             f"attempt {attempt.number} starting")
    return [
        f'<g class="backoff-gap" data-before-attempt="{attempt.number}">'
        f'<line x1="{x0:.1f}" y1="{mid:.1f}" x2="{x1:.1f}" y2="{mid:.1f}"/>'
        f'<line x1="{x0:.1f}" y1="{mid - 5:.1f}" x2="{x0:.1f}" y2="{mid + 5:.1f}"/>'
        f'<text x="{(x0 + x1) / 2:.1f}" y="{y - 2:.1f}">{escape(label)}</text>'
        f"<title>{escape(title)}</title>"
        "</g>"
    ]


def _observation_marker(observation: Observation, scale: _Scale, y: float,
                        needs_fresh: bool = True) -> str:
    """``needs_fresh``: the unit's health rests on fresh evidence (running, unknown); only then
    is an observation over the age limit marked stale."""
    record = observation.record
    kind = next((k for k in MARKER_KINDS if k in observation.kinds), "plain")
    classes = " ".join(["observation-marker", f"kind-{kind}",
                        *(f"has-{k}" for k in sorted(observation.kinds))])
    stale = bool(observation.stale) and needs_fresh
    if stale:
        classes += " stale"
    x = scale.x(record.observed_at)
    asserted = observation.asserted
    if asserted is not None:
        title = (f"{record.state}: {asserted.label}, at {wording.instant(record.observed_at)} "
                 f"({observation.basis}, not observed; {wording.span(observation.age)} ago)")
    else:
        title = (f"Observed {record.state} via {record.source} at "
                 f"{wording.instant(record.observed_at)} ({observation.basis}, "
                 f"{wording.span(observation.age)} old{', stale' if stale else ''})")
    return (f'<circle class="{classes}" data-seq="{record.seq}" cx="{x:.1f}" '
            f'cy="{y + BAR / 2:.1f}" r="6"><title>{escape(title)}</title></circle>')


def _decision_marker(decision: RecordedDecision, scale: _Scale, y: float) -> str:
    record = decision.record
    x, mid = scale.x(record.as_of), y + BAR / 2
    points = " ".join(f"{px:.1f},{py:.1f}" for px, py in
                      ((x, mid - 7), (x + 7, mid), (x, mid + 7), (x - 7, mid)))
    classes = f"decision-marker decision-{record.decision}"
    if not decision.current:
        classes += " superseded"
    title = f"Decided {record.decision} as of {wording.instant(record.as_of)}: {record.reason}"
    return (f'<polygon class="{classes}" data-seq="{record.seq}" points="{points}">'
            f"<title>{escape(title)}</title></polygon>")


def _not_started(decision: RecordedDecision, scale: _Scale, y: float) -> list[str]:
    start, finish = decision.earliest_start, decision.estimated_finish
    if start is None or finish is None:
        return []
    x0, x1 = scale.x(scale.clamp(start)), scale.x(scale.clamp(finish))
    record = decision.record
    title = (f"Attempt {record.attempt} NOT started ({record.decision}): it could start at "
             f"{wording.instant(start)} and finish, validation included, at "
             f"{wording.instant(finish)} (decided; durations are estimates)")
    return [
        _lane_label(y, f"attempt {record.attempt}?"),
        f'<rect class="not-started-bar decision-{record.decision}" '
        f'data-attempt="{record.attempt}" x="{x0:.1f}" y="{y:.1f}" '
        f'width="{max(x1 - x0, 2):.1f}" height="{BAR}" rx="2"><title>{escape(title)}</title>'
        "</rect>",
    ]


def _vertical(scale: _Scale, at: datetime, bottom: float, css: str, label: str,
              title: str, *, row: int) -> str:
    """A vertical line across all lanes, labelled in its own ``row`` above them (so the
    deadline and as-of labels never overlap), on the side away from the right edge."""
    x = scale.x(at)
    near_edge = x > LABEL_WIDTH + 0.75 * (WIDTH - LABEL_WIDTH - RIGHT_MARGIN)
    anchor, text_x = ("end", x - 4) if near_edge else ("start", x + 4)
    y = 14 + 15 * row
    return (f'<g class="{css}-group"><line class="{css}" x1="{x:.1f}" y1="{y - 10}" '
            f'x2="{x:.1f}" y2="{bottom:.1f}"/>'
            f'<text class="{css}-label" text-anchor="{anchor}" x="{text_x:.1f}" '
            f'y="{y}">{escape(label)}</text><title>{escape(title)}</title></g>')


def timeline_svg(unit: UnitReport, as_of: datetime) -> str:
    """The unit's timeline; a short note instead when nothing with a time was recorded."""
    unit_slug = slug(unit.uow_id)
    found = _scale(unit, as_of)
    if found is None:
        return (f'<svg class="timeline empty" id="timeline-{unit_slug}" role="img" '
                f'viewBox="0 0 {WIDTH} 40" width="100%"><text class="lane-label" x="8" y="24">'
                "no attempts, observations or decisions recorded</text></svg>")
    scale, show_as_of = found
    not_started = [d for d in unit.decisions
                   if d.record.not_started and d.earliest_start and d.estimated_finish]
    lanes = len(unit.attempts) + len(not_started) + 2
    bottom = TOP + lanes * LANE
    height = bottom + AXIS
    body: list[str] = [
        f'<svg class="timeline" id="timeline-{unit_slug}" data-uow="{escape(unit.uow_id)}" '
        f'role="img" aria-label="{escape("Timeline of " + unit.label)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" preserveAspectRatio="xMinYMin meet">',
        f'<defs><pattern id="hatch-{unit_slug}" width="6" height="6" '
        'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" class="hatch-bg"/>'
        '<line x1="0" y1="0" x2="0" y2="6" class="hatch-line"/></pattern></defs>',
    ]
    body.extend(_axis(scale, bottom))
    y = float(TOP)
    previous: Attempt | None = None
    for attempt in unit.attempts:
        body.append(_lane_label(y, f"attempt {attempt.number}"))
        if previous is not None:
            body.extend(_gap(previous, attempt, scale, y))
        body.extend(_attempt_marks(attempt, scale, as_of, y, unit_slug))
        previous = attempt
        y += LANE
    for decision in not_started:
        body.extend(_not_started(decision, scale, y))
        y += LANE
    body.append(_lane_label(y, "evidence"))
    needs_fresh = unit.status.state in NEEDS_FRESH_EVIDENCE
    body.extend(_observation_marker(o, scale, y, needs_fresh) for o in unit.observations)
    y += LANE
    body.append(_lane_label(y, "decisions"))
    body.extend(_decision_marker(d, scale, y) for d in unit.decisions)
    if unit.deadline is not None:
        deadline = unit.deadline
        body.append(_vertical(
            scale, deadline.at, bottom, "deadline-line",
            f"deadline {wording.clock_time(deadline.at)}",
            f"Deadline {wording.instant(deadline.at)}: {deadline.origin} ({deadline.basis})",
            row=0,
        ))
    if show_as_of:
        body.append(_vertical(scale, as_of, bottom, "as-of-line",
                              f"as of {wording.clock_time(as_of)}",
                              f"Report as of {wording.instant(as_of)}", row=1))
    body.append("</svg>")
    return "".join(body)
