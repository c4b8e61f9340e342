"""The operator's report: one self-contained HTML page (inline CSS and SVG, nothing fetched).

It is read during an incident, maybe offline, maybe forwarded by mail, so it needs no network,
no fonts and no scripts. It opens with what needs attention (``#needs-attention``: the scope's
headline, e.g. ``done: 28/28 verified``, and the units that need a person, in the health
vocabulary's order) and a per-interval grid (``#interval-grid``: interval x task, each cell
coloured by the unit's health and linking to its card), and only then the units table and the
unit cards with their timelines. Each fact shows its basis (decided / executed / observed /
verified / assumed by the caller / asserted by an operator) as a badge, and every recorded time
is shown with the age it had at the report's as_of.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from twice.core.inert import html_text as escape
from twice.ledger.records import FingerprintDiff, FingerprintRecord
from twice.reports import wording
from twice.reports.gather import (
    BACKOFF_KEYS,
    DEADLINE_KEYS,
    EARLIEST_START_KEYS,
    ESTIMATED_FINISH_KEYS,
    Assumption,
    Evidence,
    PartitionHistory,
    UnitReport,
    group_assumptions,
)
from twice.reports.health import (
    AWAITING_ACTION,
    BASES,
    BASIS_LABEL,
    BASIS_MEANING,
    HEALTH_MEANING,
    HEALTH_ORDER,
    NEEDS_FRESH_EVIDENCE,
    Basis,
    Health,
    ordered,
    scope,
)
from twice.reports.timeline_svg import slug, timeline_svg

#: One colour per health state: the grid, the summary cards and the state words share them.
HEALTH_COLOURS: dict[Health, tuple[str, str]] = {  # background, text on it
    Health.UNKNOWN: ("#6a1b9a", "#fff"),
    Health.HELD: ("#8d4e00", "#fff"),
    Health.REFUSED: ("#b71c1c", "#fff"),
    Health.FAILED: ("#e53935", "#fff"),
    Health.STALE_EVIDENCE: ("#5d4037", "#fff"),
    Health.UNVERIFIED: ("#f9a825", "#202124"),
    Health.BLOCKED: ("#546e7a", "#fff"),
    Health.WAITING: ("#ef8f00", "#202124"),
    Health.RUNNING: ("#1565c0", "#fff"),
    Health.NEVER_RUN: ("#cfd8dc", "#202124"),
    Health.ASSERTED: ("#ad1457", "#fff"),
    Health.VERIFIED: ("#2e7d32", "#fff"),
    Health.SUPERSEDED: ("#eceff1", "#5f6368"),
}
SHOWN_DECISION_KEYS = (*DEADLINE_KEYS, *EARLIEST_START_KEYS, *ESTIMATED_FINISH_KEYS,
                       *BACKOFF_KEYS)
DISCLAIMER = (
    "This page states only what the ledger recorded. Generating it executed no job, proved no "
    "idempotency, guarantees no completion and approves nothing for production."
)

CSS = """
:root { --ok:#2e7d32; --transient:#ef8f00; --permanent:#c62828; --unknown:#6a1b9a;
  --running:#1565c0; --muted:#5f6368; --line:#dadce0; --bg:#fafafa; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
  margin: 0 auto; max-width: 1240px; padding: 20px 28px 48px; color: #202124; background: #fff;
  font-size: 14px; line-height: 1.45; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 32px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; } h3 { font-size: 16px; margin: 0; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace;
  font-size: 12px; }
.meta { color: var(--muted); margin: 0 0 8px; }
.disclaimer { background: #fff8e1; border-left: 4px solid var(--transient); padding: 8px 12px;
  margin: 12px 0; }
.legend { display: flex; flex-wrap: wrap; gap: 8px 20px; margin: 8px 0; padding: 0;
  list-style: none; color: var(--muted); }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 120px;
  background: var(--bg); }
.card b { display: block; font-size: 22px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px;
  border-bottom: 1px solid var(--line); }
th { background: var(--bg); font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.interval { white-space: nowrap; } td.outcome { min-width: 240px; }
td code { overflow-wrap: anywhere; } td.jobs { max-width: 280px; }
time, td.holder { white-space: nowrap; } details.detail summary { font-weight: normal;
  color: var(--muted); }
.basis { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 11px;
  font-weight: 600; border: 1px solid; white-space: nowrap; }
.basis-decided { color: #5e35b1; border-color: #b39ddb; background: #f3effc; }
.basis-executed { color: #1565c0; border-color: #90caf9; background: #eef5fd; }
.basis-verified { color: var(--ok); border-color: #a5d6a7; background: #eef7ee; }
.basis-assumed { color: #8d6e00; border-color: #ffe082; background: #fffbea; }
.basis-asserted { color: #ad1457; border-color: #f48fb1; background: #fdeef4; }
.basis-observed { color: #00695c; border-color: #80cbc4; background: #eef8f6; }
.asserted-by { color: #ad1457; }
.state { font-weight: 600; white-space: nowrap; }
.state-succeeded { color: var(--ok); }
.state-failed-transient { color: var(--transient); }
.state-failed-permanent { color: var(--permanent); }
.state-unknown { color: var(--unknown); } .state-running { color: var(--running); }
.health { display: inline-block; border-radius: 4px; padding: 0 6px; font-weight: 600;
  white-space: nowrap; }
#headline { font-size: 20px; font-weight: 700; margin: 8px 0; padding: 8px 12px;
  border-left: 6px solid var(--line); background: var(--bg); }
#headline.done { border-color: var(--ok); color: var(--ok); }
#headline.attention { border-color: var(--permanent); }
ul.attention-list { margin: 6px 0 12px; padding-left: 20px; }
ul.attention-list li { margin: 3px 0; }
table.grid { width: auto; border-collapse: separate; border-spacing: 3px; }
table.grid th { background: none; text-align: center; }
table.grid th.interval { text-align: right; }
table.grid td.cell { padding: 0; border: none; min-width: 96px; text-align: center; }
table.grid td.cell a { display: block; padding: 4px 8px; border-radius: 4px;
  text-decoration: none; font-weight: 600; font-size: 12px; color: inherit; }
table.grid td.empty { color: var(--muted); }
article.unit { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px;
  margin: 14px 0; }
article.unit > p { margin: 4px 0 8px; color: var(--muted); }
details { margin: 4px 0; } summary { cursor: pointer; font-weight: 600; }
.note { color: var(--muted); }
.stale { color: var(--permanent); font-weight: 600; }
svg.timeline { display: block; margin: 8px 0; background: #fff; }
svg .lane-label { font-size: 12px; fill: var(--muted); }
svg .axis-line { stroke: #9aa0a6; } svg .tick { stroke: #eceff1; }
svg .tick-label { font-size: 11px; fill: var(--muted); text-anchor: middle; }
svg .attempt-bar { stroke: rgba(0,0,0,.25); }
svg .outcome-succeeded { fill: var(--ok); }
svg .outcome-failed-transient { fill: var(--transient); }
svg .outcome-failed-permanent { fill: var(--permanent); }
svg .outcome-unknown { fill: var(--unknown); }
svg .outcome-running { fill: var(--running); }
svg .open-ended { stroke-dasharray: 4 3; stroke: #000; }
svg .hatch-bg { fill: #efe6f5; } svg .hatch-line { stroke: var(--unknown); stroke-width: 2; }
svg .unknown-span { stroke: var(--unknown); stroke-width: .8; }
svg .backoff-gap line { stroke: var(--muted); stroke-dasharray: 3 3; stroke-width: 1.5; }
svg .backoff-gap text { font-size: 11px; fill: var(--muted); text-anchor: middle; }
svg .not-started-bar { fill: none; stroke: var(--permanent); stroke-dasharray: 5 3;
  stroke-width: 1.5; }
svg .observation-marker { fill: #1e88e5; stroke: #fff; stroke-width: 1.5; }
svg .kind-duplicate { fill: #f9a825; } svg .kind-done-with-error { fill: var(--permanent); }
svg .kind-validation-failed { fill: var(--permanent); }
svg .kind-reconcile { fill: var(--unknown); }
svg .kind-validated { fill: var(--ok); } svg .kind-lease-takeover { fill: #757575; }
svg .kind-commit-record { fill: #00897b; }
svg .kind-operator-resolution { fill: #ad1457; }
svg .observation-marker.stale { stroke: var(--permanent); stroke-dasharray: 2 2; }
svg .decision-marker { fill: #7e57c2; stroke: #fff; }
svg .decision-marker.superseded { fill: #c5b8e3; }
svg .deadline-line { stroke: var(--permanent); stroke-width: 2; stroke-dasharray: 6 3; }
svg .deadline-line-label { font-size: 12px; fill: var(--permanent); font-weight: 600; }
svg .as-of-line { stroke: #202124; stroke-width: 1; stroke-dasharray: 2 2; }
svg .as-of-line-label { font-size: 12px; fill: #202124; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: -1px; margin-right: 4px; }
.checksum-changed { color: var(--permanent); font-weight: 600; }
.checksum-same { color: var(--ok); }
footer { margin-top: 36px; color: var(--muted); border-top: 1px solid var(--line);
  padding-top: 8px; }
"""

_SWATCHES = (
    ("succeeded", "var(--ok)"), ("failed-transient", "var(--transient)"),
    ("failed-permanent", "var(--permanent)"), ("unknown", "var(--unknown)"),
    ("running", "var(--running)"),
)
_MARKERS = (
    ("observation", "#1e88e5"), ("duplicate", "#f9a825"), ("DONE with error", "var(--permanent)"),
    ("reconcile", "var(--unknown)"), ("validated", "var(--ok)"),
    ("commit record (destination)", "#00897b"), ("decision", "#7e57c2"),
    ("asserted by an operator", "#ad1457"),
)


def _health_css() -> str:
    rules = []
    for state, (background, text) in HEALTH_COLOURS.items():
        rules.append(f".health-{state} {{ background: {background}; color: {text}; }}")
        rules.append(f".state-{state} {{ color: {background}; }}" if state not in (
            Health.NEVER_RUN, Health.SUPERSEDED, Health.UNVERIFIED, Health.WAITING)
            else f".state-{state} {{ color: #5f6368; }}")
    return "\n".join(rules)


def badge(basis: Basis) -> str:
    return (f'<span class="basis basis-{basis}" title="{escape(BASIS_MEANING[basis])}">'
            f"{escape(BASIS_LABEL[basis])}</span>")


def _time(value: datetime | None) -> str:
    if value is None:
        return '<span class="note">—</span>'
    return f'<time datetime="{value.isoformat()}">{escape(wording.instant(value))}</time>'


def _detail(detail: Mapping[str, Any], shown: Iterable[str] = ()) -> str:
    """The recorded detail verbatim, minus keys already shown; long ones folded away."""
    rest = {k: v for k, v in detail.items() if k not in set(shown)}
    if not rest:
        return ""
    text = json.dumps(rest, sort_keys=True, default=str)
    if len(text) <= 120:
        return f"<code>{escape(text, quote=False)}</code>"
    keys = ", ".join(sorted(rest))
    # Text content: quotes need no escape, and they are most of a JSON detail's bytes.
    return (f'<details class="detail"><summary>{escape(keys)}</summary>'
            f"<code>{escape(text[:2000], quote=False)}</code></details>")


def _table(css: str, headers: Iterable[str], rows: Iterable[str], table_id: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(rows)
    ident = f' id="{table_id}"' if table_id else ""
    return (f'<table class="{css}"{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table>")


def _state(unit: UnitReport) -> str:
    state = unit.status.state
    return (f'<span class="state state-{state}" data-health="{state}" '
            f'title="{escape(HEALTH_MEANING[state])}">{escape(state)}</span>')


def _jobs(unit: UnitReport) -> str:
    if unit.generations:
        return "<br>".join(
            f"g{g.generation} <code>{escape(g.job_id)}</code> {escape(g.state)}"
            for g in unit.generations
        )
    ids = sorted({a.job_id for a in unit.attempts if a.job_id})
    return "<br>".join(f"<code>{escape(i)}</code>" for i in ids) or '<span class="note">none</span>'


def _latest_evidence(unit: UnitReport) -> str:
    latest = unit.latest_observation
    if latest is None:
        return '<span class="note">no observation</span>'
    record = latest.record
    asserted = latest.asserted
    if asserted is not None:
        return (f'{escape(record.state)}, <span class="asserted-by">{escape(asserted.label)}'
                f"</span>, {escape(wording.span(latest.age))} ago {badge(latest.basis)}")
    stale = (' <span class="stale">stale</span>'
             if latest.stale and unit.status.state in NEEDS_FRESH_EVIDENCE else "")
    return (f"{escape(record.state)} via <code>{escape(record.source)}</code>, "
            f"{escape(wording.span(latest.age))} old{stale} {badge(latest.basis)}")


def _next(unit: UnitReport) -> str:
    decision = unit.latest_decision
    if decision is None:
        return '<span class="note">no decision recorded</span>'
    record = decision.record
    note = "" if decision.current else ' <span class="note">(evidence came after it)</span>'
    return f"<b>{escape(record.decision)}</b>{note} {badge('decided')}"


def _units_table(evidence: Evidence) -> str:
    rows = []
    for unit in ordered(evidence.units):
        u = unit.unit
        rows.append(
            f'<tr class="unit-row unit-state-{unit.status.state}" '
            f'data-uow="{escape(unit.uow_id)}">'
            f'<td><a href="#unit-{slug(unit.uow_id)}">{escape(u.pipeline)}.{escape(u.task)}</a>'
            f'</td><td class="interval">{escape(wording.interval(u.interval))}</td>'
            f'<td class="outcome">{_state(unit)} {badge(unit.status.basis)}<br>'
            f'<span class="note">{escape(unit.status.text)}</span></td>'
            f'<td class="num">{_attempt_count(unit)}'
            + f'</td><td class="jobs">{_jobs(unit)}</td><td>{_latest_evidence(unit)}</td>'
            f"<td>{_next(unit)}</td></tr>"
        )
    if not rows:
        return '<p class="note" id="units-table">The ledger records no units of work.</p>'
    return _table("units", ["Task", "Interval", "Outcome", "Attempts", "Job ids / generations",
                            "Latest evidence", "Latest decision"], rows, "units-table")


def _attempt_count(unit: UnitReport) -> str:
    """The attempts against ``max_attempts``, which limits one run's attempts: "1 of 1 in the
    latest run, 2 in all" when earlier runs made some too."""
    total = len(unit.attempts)
    if not unit.max_attempts:
        return str(total)
    in_run = unit.attempts_in_latest_run
    if in_run == total:
        return f"{total} of {unit.max_attempts}"
    return f"{in_run} of {unit.max_attempts} in the latest run, {total} in all"


def _attempts(unit: UnitReport) -> str:
    rows = []
    for a in unit.attempts:
        ended = a.ended_at
        duration = "" if ended is None else wording.span(ended - a.started_at)
        gap = "" if a.gap_before is None else wording.span(a.gap_before)
        history = ", ".join(f"{c.outcome} at {wording.clock_time(c.at)} ({c.cause})"
                            for c in a.changes)
        generation = "" if a.generation is None else f"g{a.generation} "
        job = "" if a.job_id is None else f"{generation}<code>{escape(a.job_id)}</code>"
        rows.append(
            f'<tr class="attempt-row outcome-{a.outcome}"><td class="num">{a.number}</td>'
            f'<td class="holder">{escape(a.holder)}</td><td>{job}</td>'
            f"<td>{_time(a.started_at)}</td>"
            f"<td>{_time(ended)}</td><td>{escape(duration)}</td><td>{escape(gap)}</td>"
            f'<td><span class="state state-{a.outcome}">{escape(a.outcome)}</span><br>'
            f'<span class="note">{escape(history)}</span></td><td>{badge(a.basis)}</td></tr>'
        )
    if not rows:
        return '<p class="note">No attempt recorded.</p>'
    return _table("attempts", ["#", "Holder", "Job", "Started", "Ended", "Ran", "Gap before",
                               "Outcome", "Basis"], rows)


def _observations(unit: UnitReport) -> str:
    rows = []
    for o in unit.observations:
        r = o.record
        stale = ""
        asserted = o.asserted
        if asserted is not None:
            stale = ' <span class="note">(an assertion: it does not go stale)</span>'
        elif o.stale and unit.status.state in NEEDS_FRESH_EVIDENCE:
            stale = ' <span class="stale">stale</span>'
        elif o.stale:
            stale = (' <span class="note">(over the age limit; not needed: the unit is '
                     f'{escape(unit.status.state)})</span>')
        elif o.stale is None:
            stale = ' <span class="note">(no age limit recorded)</span>'
        if asserted is not None:
            kinds = f'<span class="asserted-by">{escape(asserted.label)}</span>'
        else:
            kinds = escape(", ".join(sorted(o.kinds)))
        rows.append(
            f'<tr class="observation-row" data-seq="{r.seq}"><td>{_time(r.observed_at)}</td>'
            f"<td>{escape(r.state)}</td><td><code>{escape(r.source)}</code></td>"
            f"<td>{escape(wording.span(o.age))}{stale}</td>"
            f"<td>{'' if r.attempt is None else r.attempt}</td><td>{kinds}</td>"
            f"<td>{_detail(r.detail)}</td><td>{badge(o.basis)}</td></tr>"
        )
    if not rows:
        return '<p class="note">No observation recorded: no source has reported a status.</p>'
    return _table("observations", ["Observed", "State", "Source", "Age", "Attempt", "Shows",
                                   "Detail", "Basis"], rows)


def _assumed(what: tuple[str, ...]) -> str:
    if not what:
        return ""
    return (f'<br>{badge("assumed")} <span class="note assumed-items">{escape(", ".join(what))}'
            "</span>")


def _decisions(unit: UnitReport) -> str:
    rows = []
    for d in unit.decisions:
        r = d.record
        attempt = "" if r.attempt is None else str(r.attempt)
        if r.not_started:
            attempt += " (not started)"
        current = "current" if d.current else "evidence came after it"
        timing = " · ".join(
            f"{name} {wording.instant(value)}"
            for name, value in (("earliest start", d.earliest_start),
                                ("estimated finish", d.estimated_finish),
                                ("deadline", d.deadline))
            if value is not None
        )
        if d.backoff is not None:
            timing = f"backoff {wording.span(d.backoff)}" + (f" · {timing}" if timing else "")
        rows.append(
            f'<tr class="decision-row decision-{r.decision}" data-seq="{r.seq}">'
            f"<td>{_time(r.as_of)}</td><td><b>{escape(r.decision)}</b><br>"
            f'<span class="note">{escape(current)}</span></td><td>{escape(r.reason)}</td>'
            f"<td>{escape(attempt)}</td><td>{escape(timing)}</td>"
            f"<td>{_detail(r.detail, SHOWN_DECISION_KEYS)}</td>"
            f"<td>{badge(d.basis)}{_assumed(d.assumed)}</td></tr>"
        )
    if not rows:
        return '<p class="note">No decision recorded.</p>'
    return _table("decisions", ["As of", "Decision", "Reason", "Attempt", "Timing", "Detail",
                                "Basis"], rows)


def _problems(unit: UnitReport) -> str:
    rows = [
        f'<tr class="error-row classification-{e.classification}"><td>{_time(e.recorded_at)}</td>'
        f"<td>{'' if e.attempt is None else e.attempt}</td><td><code>{escape(e.error_class)}"
        f"</code></td><td><b>{escape(e.classification)}</b></td><td>{escape(e.message)}</td>"
        f"<td>{_detail(e.detail)}</td></tr>"
        for e in unit.errors
    ]
    rows.extend(
        f'<tr class="nonfatal-row"><td>{_time(n.recorded_at)}</td>'
        f"<td>{'' if n.attempt is None else n.attempt}</td><td>non-fatal</td>"
        f"<td>× {n.count}</td><td>{escape(n.message)}</td><td>{_detail(n.detail)}</td></tr>"
        for n in unit.nonfatal_errors
    )
    if not rows:
        return ""
    table = _table("errors", ["Recorded", "Attempt", "Error", "Classification", "Message",
                              "Detail"], rows)
    return f"<details open><summary>Errors ({len(rows)})</summary>{table}</details>"


def _generations(unit: UnitReport) -> str:
    if not unit.generations:
        return ""
    rows = [
        f'<tr class="generation-row generation-{g.state}"><td class="num">{g.generation}</td>'
        f"<td><code>{escape(g.job_id)}</code></td><td>{escape(g.state)}</td>"
        f"<td>{_time(g.taken_at)}</td><td>{_time(g.state_at)}</td></tr>"
        for g in unit.generations
    ]
    table = _table("generations", ["Generation", "Job id", "State", "Taken", "State since"],
                   rows)
    return f"<details open><summary>Job generations</summary>{table}</details>"


def _counted(unit: UnitReport) -> str:
    return ", ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in (
        (len(unit.attempts), "attempt"), (len(unit.observations), "observation"),
        (len(unit.decisions), "decision")))


def _unit_article(unit: UnitReport, as_of: datetime) -> str:
    """A unit's card. Its timeline and evidence fold away when the unit needs nothing from a
    person (verified, asserted, superseded): a scope of many settled units reads as a list of
    headings, with every card's evidence one click away (no script: the page stays inert)."""
    u = unit.unit
    deadline = ""
    if unit.deadline is not None:
        deadline = (f" · deadline {_time(unit.deadline.at)} ({escape(unit.deadline.origin)}) "
                    f"{badge(unit.deadline.basis)}")
    identity = (
        f"<code>{escape(u.uow_id)}</code> · destination <code>{escape(u.destination)}</code> · "
        f"input <code>{escape(u.input_partition or '—')}</code> version "
        f"<code>{escape(u.input_version or '—')}</code> · transform "
        f"<code>{escape(u.transform_version)}</code>{deadline}"
    )
    return (
        f'<article class="unit unit-state-{unit.status.state}" id="unit-{slug(unit.uow_id)}" '
        f'data-uow="{escape(unit.uow_id)}">'
        f"<h3>{escape(unit.label)} — {_state(unit)} {badge(unit.status.basis)}</h3>"
        f"<p>{identity}</p>"
        f'<p class="status-text">{escape(unit.status.text)}</p>'
        f'<details class="card-body"{" open" if unit.status.state in AWAITING_ACTION else ""}>'
        f"<summary>Timeline and evidence: {_counted(unit)}</summary>"
        f"{timeline_svg(unit, as_of)}"
        f"<details open><summary>Attempts ({len(unit.attempts)})</summary>"
        f"{_attempts(unit)}</details>"
        f"<details open><summary>Observations ({len(unit.observations)})</summary>"
        f"{_observations(unit)}</details>"
        f"<details open><summary>Decisions ({len(unit.decisions)})</summary>"
        f"{_decisions(unit)}</details>"
        f"{_problems(unit)}{_generations(unit)}</details></article>"
    )


def _fingerprint_row(record: FingerprintRecord) -> str:
    columns = ", ".join(record.columns) if record.columns else "—"
    made_by = ""
    if record.uow_id:
        made_by = f"<code>{escape(record.uow_id)}</code>"
        if record.attempt:
            made_by += f" attempt {record.attempt}"
    return (
        f'<tr class="fingerprint-version" data-version="{record.version}">'
        f'<td class="num">v{record.version}</td><td class="num">{record.row_count}</td>'
        f"<td><code>{escape(record.checksum)}</code></td><td>{escape(columns)}</td>"
        f"<td>{escape(record.algorithm or '—')}</td><td>{_time(record.recorded_at)}</td>"
        f"<td>{made_by}</td><td>{badge('verified')}</td></tr>"
    )


def _diff_row(diff: FingerprintDiff) -> str:
    before = diff.before
    if before is None:
        return ""
    after = diff.after
    delta = diff.row_delta or 0
    changed = bool(diff.checksum_changed)
    css = "checksum-changed" if changed else "checksum-same"
    if not diff.comparable:
        verdict = "not comparable"
    elif diff.identical:
        verdict = "identical"
    else:
        verdict = "changed" if changed or delta else "same rows, schema changed"
    notes = []
    if not diff.comparable:
        notes.append("checksums not comparable (different key columns or algorithm)")
    if diff.schema_changed:
        notes.append("schema changed")
    return (
        f'<tr class="fingerprint-diff diff-{"changed" if changed else "same"}" '
        f'data-from="{before.version}" '
        f'data-to="{after.version}"><td>v{before.version} → v{after.version}</td>'
        f'<td class="num">{before.row_count}</td><td class="num">{after.row_count}</td>'
        f'<td class="num">{delta:+d}</td><td class="{css}">{"yes" if changed else "no"}</td>'
        f"<td>{escape(verdict)}</td><td>{escape('; '.join(notes))}</td></tr>"
    )


def _fingerprints(partitions: tuple[PartitionHistory, ...]) -> str:
    if not partitions:
        return '<p class="note">No fingerprint recorded.</p>'
    parts = []
    for history in partitions:
        versions = _table(
            "fingerprint-versions",
            ["Version", "Rows", "Checksum", "Key columns", "Algorithm", "Recorded", "By",
             "Basis"],
            (_fingerprint_row(v) for v in history.versions),
        )
        diffs = [row for row in (_diff_row(d) for d in history.diffs) if row]
        diff_table = (
            _table("fingerprint-diffs", ["Versions", "Rows before", "Rows after", "Δ rows",
                                         "Checksum changed", "Verdict", "Notes"], diffs)
            if diffs else '<p class="note">Only one version: nothing to compare yet.</p>'
        )
        parts.append(
            f'<div class="partition" data-destination="{escape(history.destination)}" '
            f'data-partition="{escape(history.partition)}"><h3><code>'
            f"{escape(history.destination)}</code> / <code>{escape(history.partition)}</code> "
            f"({len(history.versions)} version{'s' if len(history.versions) != 1 else ''})</h3>"
            f"{versions}{diff_table}</div>"
        )
    return "".join(parts)


def _assumption_list(items: tuple[Assumption, ...], css: str, empty: str) -> str:
    if not items:
        return f'<p class="note">{escape(empty)}</p>'
    rows = "".join(
        f'<li class="{css}"><b>{escape(", ".join(subjects))}</b>: {escape(text)} '
        f'<span class="note">({escape(origin)})</span></li>'
        for text, subjects, origin in group_assumptions(items)
    )
    return f"<ul>{rows}</ul>"


def _summary(evidence: Evidence) -> str:
    counts = Counter(unit.status.state for unit in evidence.units)
    cards = "".join(
        f'<div class="card state-{state}" data-state="{state}" '
        f'title="{escape(HEALTH_MEANING[state])}"><b>{counts[state]}</b>{escape(state)}</div>'
        for state in HEALTH_ORDER if counts[state]
    )
    return f'<div class="cards" id="summary">{cards}</div>'


def _headline(evidence: Evidence) -> str:
    summary = scope(evidence.units)
    css = "done" if summary.done else ("attention" if summary.attention() else "progress")
    return (f'<p id="headline" class="headline {css}" data-done="{str(summary.done).lower()}">'
            f"{escape(summary.headline)}</p>")


def _attention(evidence: Evidence) -> str:
    """The units that need a person, in the vocabulary's order, each linking to its card."""
    items = [
        f'<li class="attention-item" data-uow="{escape(unit.uow_id)}" '
        f'data-health="{unit.status.state}"><span class="health health-{unit.status.state}">'
        f'{escape(unit.status.state)}</span> <a href="#unit-{slug(unit.uow_id)}">'
        f"{escape(unit.label)}</a>: {escape(unit.status.text)} {badge(unit.status.basis)}</li>"
        for unit in ordered(evidence.units) if unit.status.needs_attention
    ]
    if not items:
        return '<p class="note" id="attention-none">Nothing needs attention.</p>'
    return f'<ul class="attention-list" id="attention-list">{"".join(items)}</ul>'


def _grid(evidence: Evidence) -> str:
    """Interval x task, each cell the current unit's health, linking to its card."""
    current = [u for u in evidence.units if u.status.state != Health.SUPERSEDED]
    if not current:
        return '<p class="note" id="interval-grid">No units of work to place on a grid.</p>'
    pipelines = {u.unit.pipeline for u in current}
    # Columns in the order the engine first recorded each task's units (dependency order).
    first: dict[tuple[str, str], tuple[datetime, int, int]] = {}
    for index, unit in enumerate(current):
        key = (unit.unit.pipeline, unit.unit.task)
        here = (unit.unit.created_at, unit.recorded_seq, index)
        first[key] = min(first.get(key, here), here)
    columns = sorted(first, key=lambda key: first[key])
    intervals = sorted({u.unit.interval for u in current}, key=lambda i: (i.start, i.end))
    cells = {(u.unit.interval, u.unit.pipeline, u.unit.task): u for u in current}
    head = "".join(
        f'<th scope="col" data-task="{escape(task)}">'
        f"{escape(task if len(pipelines) == 1 else f'{pipeline}.{task}')}</th>"
        for pipeline, task in columns
    )
    rows = []
    for interval in intervals:
        row = []
        for pipeline, task in columns:
            cell = cells.get((interval, pipeline, task))
            if cell is None:
                row.append('<td class="cell empty">—</td>')
                continue
            state = cell.status.state
            row.append(
                f'<td class="cell health-{state}" data-health="{state}" '
                f'data-uow="{escape(cell.uow_id)}"><a href="#unit-{slug(cell.uow_id)}" '
                f'title="{escape(cell.label)}: {escape(cell.status.text)}">{escape(state)}</a>'
                "</td>"
            )
        rows.append(f'<tr class="grid-row" data-interval="{escape(interval.label)}">'
                    f'<th scope="row" class="interval">{escape(wording.interval(interval))}</th>'
                    f'{"".join(row)}</tr>')
    return (f'<table class="grid" id="interval-grid"><thead><tr><th class="interval">Interval'
            f"</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _health_legend() -> str:
    items = "".join(
        f'<li><span class="health health-{state}">{escape(state)}</span> '
        f"{escape(HEALTH_MEANING[state])}</li>"
        for state in HEALTH_ORDER
    )
    return f'<ul class="legend" id="health-legend">{items}</ul>'


def _legend() -> str:
    bases = "".join(f"<li>{badge(b)} {escape(BASIS_MEANING[b])}</li>" for b in BASES)
    swatches = "".join(
        f'<li><span class="swatch" style="background:{color}"></span>attempt {escape(name)}</li>'
        for name, color in _SWATCHES
    )
    markers = "".join(
        f'<li><span class="swatch" style="background:{color};border-radius:6px"></span>'
        f"{escape(name)}</li>"
        for name, color in _MARKERS
    )
    return (f'<ul class="legend" id="basis-legend">{bases}</ul>'
            f'<ul class="legend" id="timeline-legend">{swatches}{markers}'
            '<li>hatched: outcome unknown</li><li>dashed outline: attempt not started</li>'
            '<li>red dashed line: deadline</li></ul>')


def _left_out(evidence: Evidence) -> str:
    if not evidence.left_out:
        return ""
    return (f' · <span class="left-out">{evidence.left_out} later records left out (after '
            "the as-of time)</span>")


def render_html(evidence: Evidence) -> str:
    """The whole report page as one string (UTF-8, no external resources)."""
    where = f"pipeline {evidence.pipeline}" if evidence.pipeline else "all pipelines"
    title = f"twice report — {where}, as of {wording.instant(evidence.as_of)}"
    units = "".join(_unit_article(unit, evidence.as_of) for unit in ordered(evidence.units))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}{_health_css()}</style></head><body>"
        f"<header><h1>twice report</h1><p class=\"meta\">Ledger <code>{escape(evidence.ledger)}"
        f"</code> · {escape(where)} · as of {_time(evidence.as_of)} · "
        f"{len(evidence.units)} units of work · {len(evidence.partitions)} fingerprinted "
        f"partitions{_left_out(evidence)}</p></header>"
        f'<section id="needs-attention"><h2>Needs attention</h2>{_headline(evidence)}'
        f"{_summary(evidence)}{_attention(evidence)}</section>"
        f'<section id="grid"><h2>Intervals × tasks</h2><p class="note">Each cell is the unit of '
        "work's health; it links to the unit's timeline below.</p>"
        f"{_grid(evidence)}{_health_legend()}</section>"
        f'<section id="units"><h2>Units of work</h2>'
        f'<p class="disclaimer">{escape(DISCLAIMER)}</p>{_legend()}'
        f"{_units_table(evidence)}</section>"
        f'<section id="timelines"><h2>Timelines and evidence</h2>{units or ""}</section>'
        f'<section id="fingerprints"><h2>Fingerprints</h2><p class="note">Row count and '
        "order-independent checksum of each partition, computed inside the database "
        f"(verified); each version is compared with the one before it.</p>"
        f"{_fingerprints(evidence.partitions)}</section>"
        '<section id="assumptions"><h2>Assumed by the caller, not verified</h2>'
        + _assumption_list(evidence.assumptions, "assumption",
                           "No caller assertion or estimate was recorded.")
        + '</section><section id="open-questions"><h2>Open questions</h2>'
        + _assumption_list(evidence.open_questions, "open-question",
                           "The evidence leaves no open question listed here.")
        + f"</section><footer>{escape(DISCLAIMER)} jobsExecuted: false · idempotencyProven: "
        "false · completionGuaranteed: false · productionApproval: false (for this report)."
        "</footer></body></html>\n"
    )
