"""The RUN handover runbook (Markdown): what the next operator needs, from recorded evidence.

It opens with the scope's headline and what needs attention, in the one health vocabulary
(``twice.reports.health``), then the seed's list, in order: identifiers, job locations, state
sources, error classification, attempt limits, validation criteria and escalation owners; then
worked examples taken from this ledger (a duplicate after a lost response, DONE with an error,
deadline-infeasible) so another operator can explain each decision without the author; then
the unresolved assumptions, so the handover does not turn them into promises. A section the
evidence cannot fill says so.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from twice.core.inert import inert
from twice.core.outcomes import ERROR_CLASSIFICATIONS
from twice.core.resolution import NEXT_RUN_DOES, next_run_after
from twice.reports import wording
from twice.reports.gather import (
    RUNNING_STATES,
    Assumption,
    Evidence,
    Observation,
    UnitReport,
    detail_value,
    group_assumptions,
)
from twice.reports.health import (
    HEALTH_MEANING,
    IN_PROGRESS,
    NEEDS_ATTENTION,
    NEEDS_FRESH_EVIDENCE,
    is_job_failure,
    ordered,
    scope,
)

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline, Task

NONE = "_None recorded._"
LOCATION_KEYS = ("location", "job_location", "project", "region", "job_url", "url")
STANDING_CAVEATS = (
    "The planner's decisions model neither jitter, queues, pool capacity nor future failures; "
    "an eligible retry may still have to wait for capacity.",
    "A fingerprint shows what the partition holds (rows and checksum); business reconciliation "
    "and consumer acceptance remain necessary before closing the incident.",
    "A cancellation request does not prove a job was cancelled: inspect its state and effects "
    "before starting a replacement.",
)


def _cell(value: object) -> str:
    """A table cell of text that may come from outside twice (an error message, a note, an
    owner): one line, inert (``twice.core.inert``), HTML and the cell separator escaped, so it
    renders as the text it is and cannot add a row, a heading or markup."""
    text = "" if value is None else str(value)
    text = inert(text.replace("\r\n", " ").replace("\n", " ")).strip()
    return html.escape(text, quote=False).replace("|", "\\|") or "—"


def _code(value: object) -> str:
    """A code span (HTML is not interpreted inside one); inert, one line, no backtick."""
    text = inert(str(value).replace("`", "'"))
    return f"`{text}`" if text else "—"


def _table(headers: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    head = list(headers)
    body = [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows]
    if not body:
        return [NONE]
    return [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}", *body]


def _task(pipeline: Pipeline | None, name: str) -> Task | None:
    if pipeline is None or name not in pipeline.tasks:
        return None
    return pipeline.tasks[name]


def _health(evidence: Evidence) -> list[str]:
    """What needs a person first, then what is in progress; settled units are counted only."""
    summary = scope(evidence.units)
    units = ordered(evidence.units)
    attention = [(u.label, _code(u.uow_id), u.status.state, u.status.text)
                 for u in units if u.status.state in NEEDS_ATTENTION]
    progress = [(u.label, _code(u.uow_id), u.status.state, u.status.text)
                for u in units if u.status.state in IN_PROGRESS]
    lines = ["## Health: needs attention first", "", f"**{summary.headline}**", "",
             "The same health words as `twice status`, `twice update` and `twice report`."]
    meanings = [f"`{h}`: {HEALTH_MEANING[h]}" for h in (*NEEDS_ATTENTION, *IN_PROGRESS)
                if summary.counts.get(h)]
    if meanings:
        lines[-1] += " " + "; ".join(meanings) + "."
    lines.append("")
    if attention:
        lines += ["Needs attention:", "",
                  *_table(["Unit", "Unit of work", "Health", "Why"], attention), ""]
    else:
        lines += ["Nothing needs attention.", ""]
    if progress:
        lines += ["In progress:", "", *_table(["Unit", "Unit of work", "Health", "Why"],
                                              progress)]
    return lines


def _identifiers(evidence: Evidence) -> list[str]:
    rows = [
        (_code(u.uow_id), f"{u.unit.pipeline}.{u.unit.task}", _code(u.unit.interval.label),
         _code(u.unit.input_partition), _code(u.unit.input_version),
         _code(u.unit.transform_version), u.status.state, u.outcome_label)
        for u in evidence.units
    ]
    return ["## 1. Identifiers (units of work)", "",
            "A unit of work's identity is stable across attempts; a changed input version or "
            "transform version is a new unit, never an equivalent retry. Health is the unit's "
            "state; the latest attempt's outcome is the attempt vocabulary.", "",
            *_table(["Unit of work", "Task", "Interval", "Input partition", "Input version",
                     "Transform version", "Health", "Latest attempt"], rows)]


def _locations(unit: UnitReport) -> str:
    found = []
    for observation in unit.observations:
        value = detail_value(observation.record.detail, LOCATION_KEYS)
        if value is not None and str(value) not in found:
            found.append(str(value))
    return ", ".join(found)


def _job_locations(evidence: Evidence) -> list[str]:
    rows: list[tuple[object, ...]] = []
    for unit in evidence.units:
        where = _locations(unit)
        for g in unit.generations:
            attempts = [str(a.number) for a in unit.attempts if a.generation == g.generation]
            rows.append((unit.label, _code(unit.unit.destination), g.generation, _code(g.job_id),
                         g.state, ", ".join(attempts), where))
        taken = {g.job_id for g in unit.generations}
        for attempt in unit.attempts:
            if attempt.job_id and attempt.job_id not in taken:
                taken.add(attempt.job_id)
                rows.append((unit.label, _code(unit.unit.destination), attempt.generation or "",
                             _code(attempt.job_id), "no generation recorded",
                             str(attempt.number), where))
        if not unit.generations and not any(a.job_id for a in unit.attempts):
            rows.append((unit.label, _code(unit.unit.destination), "", "no remote job id",
                         "", "", where))
    return ["## 2. Job locations", "",
            "Destinations and remote job ids. Reusing a job id after a lost response must find "
            "the existing job; a new generation is taken only after the earlier ones are "
            "confirmed failed.", "",
            *_table(["Unit", "Destination", "Generation", "Remote job id", "Job state",
                     "Attempts", "Location (as recorded)"], rows)]


def _state_sources(evidence: Evidence) -> list[str]:
    by_source: dict[str, list[tuple[UnitReport, Observation]]] = {}
    for unit in evidence.units:
        for observation in unit.observations:
            by_source.setdefault(observation.record.source, []).append((unit, observation))
    rows = []
    for source in sorted(by_source):
        seen = by_source[source]
        unit, latest = max(seen, key=lambda pair: pair[1].record.observed_at)
        stale = {True: "stale", False: "fresh", None: "no age limit recorded"}[latest.stale]
        if unit.status.state not in NEEDS_FRESH_EVIDENCE:
            stale = f"freshness not needed: {unit.status.state}"
        rows.append((_code(source), len(seen), len({u.uow_id for u, _ in seen}),
                     f"{latest.record.state} ({unit.label})",
                     wording.instant(latest.record.observed_at),
                     f"{wording.span(latest.age)} ({stale})"))
    limits = sorted({wording.span(u.max_observation_age) for u in evidence.units
                     if u.max_observation_age is not None})
    limit = (f"Maximum observation age recorded with the decisions: {', '.join(limits)}."
             if limits else "No maximum observation age was recorded with the decisions.")
    return ["## 3. State sources", "",
            f"Where each status came from and how old it is at {wording.instant(evidence.as_of)}"
            f". {limit} An old value is not current evidence: refresh it.", "",
            *_table(["Source", "Observations", "Units", "Latest state", "Observed at",
                     "Age at as-of"], rows), "", *_operator_resolutions(evidence)]


def _operator_resolutions(evidence: Evidence) -> list[str]:
    """Outcomes an operator resolved by hand: a person's word, listed apart from observations."""
    rows = []
    for unit in evidence.units:
        for observation in unit.observations:
            asserted = observation.asserted
            if asserted is None:
                continue
            record = observation.record
            rows.append((unit.label, record.attempt or "", asserted.asserts,
                         wording.asserted_by(asserted.operator), asserted.note,
                         wording.instant(asserted.at),
                         NEXT_RUN_DOES[next_run_after(asserted.asserts)]))
    return ["Outcomes asserted by an operator (`twice resolve`): what a person said after "
            "checking, not something twice or a service observed:", "",
            *_table(["Unit", "Attempt", "Asserted (--as)", "Basis", "Note", "At",
                     "Next run"], rows)]


def _errors(evidence: Evidence) -> list[str]:
    counts = Counter(e.classification for u in evidence.units for e in u.errors)
    outcomes = Counter(a.outcome for u in evidence.units for a in u.attempts)
    asserted = Counter(a.outcome for u in evidence.units for a in u.attempts if a.asserted)
    summary = ", ".join(f"{name}: {counts[name]}" for name in ERROR_CLASSIFICATIONS)
    attempts = ", ".join(
        f"{name}: {n}" + (f" ({asserted[name]} {wording.ASSERTED_BY_OPERATOR})"
                          if asserted[name] else "")
        for name, n in sorted(outcomes.items())
    ) or "none"
    rows = [
        (unit.label, e.attempt or "", e.classification, _code(e.error_class), e.message)
        for unit in evidence.units for e in unit.errors
    ]
    return ["## 4. Error classification", "",
            f"Errors by classification: {summary}. Attempt outcomes: {attempts}.", "",
            "Only errors classified transient are retried; permanent errors need their cause "
            "repaired; unknown (timeout, lost acknowledgement) needs the remote job reconciled "
            "first.", "",
            *_table(["Unit", "Attempt", "Classification", "Error", "Message"], rows)]


def _policy_text(policy: Mapping[str, Any]) -> str:
    parts = []
    if "max_attempts" in policy:
        parts.append(f"max_attempts {policy['max_attempts']} (counts the first try)")
    for key in ("initial_delay", "multiplier", "max_delay", "jitter", "attempt_timeout"):
        if policy.get(key) is not None:
            parts.append(f"{key} {policy[key]}")
    transient = policy.get("transient")
    if transient:
        parts.append(f"transient: {', '.join(map(str, transient))}")
    return "; ".join(parts) or "recorded without fields"


def _attempt_limits(evidence: Evidence, pipeline: Pipeline | None) -> list[str]:
    rows = []
    for unit in evidence.units:
        task = _task(pipeline, unit.unit.task)
        if task is not None:
            policy, origin = task.retry.to_dict(), "pipeline file"
        elif unit.policy:
            policy, origin = dict(unit.policy), "decision detail"
        else:
            policy, origin = {}, ""
        limit = policy.get("max_attempts")
        used = f"{len(unit.attempts)} of {limit}" if limit else str(len(unit.attempts))
        rows.append((unit.label, used, _policy_text(policy) if origin else "not recorded",
                     origin or "—"))
    return ["## 5. Attempt limits", "",
            "maxAttempts includes the first try (Airflow `retries=3` would mean 4 executions). "
            "Delay before attempt n+1 = min(max_delay, initial_delay × multiplier^(n-1)).", "",
            *_table(["Unit", "Attempts used", "Policy", "From"], rows)]


def _criteria_text(acceptance: object) -> str:
    if is_dataclass(acceptance) and not isinstance(acceptance, type):
        return ", ".join(f"{f.name}={getattr(acceptance, f.name)!r}" for f in fields(acceptance))
    return repr(acceptance)


def _validation(evidence: Evidence, pipeline: Pipeline | None) -> list[str]:
    declared = []
    if pipeline is not None:
        declared = [(name, _criteria_text(task.acceptance)) for name, task in
                    pipeline.tasks.items() if task.acceptance is not None]
    checked = []
    for unit in evidence.units:
        for observation in unit.observations:
            if observation.kinds & {"validated", "validation-failed"}:
                record = observation.record
                acceptance = record.detail.get("acceptance")
                checks = acceptance.get("checks") if isinstance(acceptance, Mapping) else None
                verdict = "passed" if "validated" in observation.kinds else "FAILED"
                checked.append((unit.label, verdict, record.source,
                                wording.instant(record.observed_at),
                                "; ".join(map(str, checks)) if checks else record.state))
    lines = ["## 6. Validation criteria", "",
             "DONE or 'succeeded' means the job stopped without a fatal error, not that the "
             "output is acceptable: non-fatal errors and dropped rows are compared with the "
             "acceptance criteria.", "", "Declared (pipeline file):", ""]
    lines += _table(["Task", "Acceptance criteria"], declared) if declared else [
        NONE if pipeline is not None else "_Not known: give --pipeline-file to list them._"]
    lines += ["", "Checked (observations):", ""]
    lines += _table(["Unit", "Verdict", "Source", "Observed at", "Checks"], checked)
    return lines


def _owners(pipeline: Pipeline | None) -> list[str]:
    lines = ["## 7. Escalation owners", ""]
    if pipeline is None:
        return [*lines, "_Not known: give --pipeline-file to list the pipeline's owners._"]
    if not pipeline.owners:
        return [*lines, f"_Pipeline {pipeline.name} declares no owners._"]
    return [*lines, *_table(["Role", "Owner"], sorted(pipeline.owners.items()))]


def _describe_observation(observation: Observation) -> str:
    record = observation.record
    attempt = f" (attempt {record.attempt})" if record.attempt is not None else ""
    return (f"{wording.instant(record.observed_at)} observed {_code(record.state)} via "
            f"{_code(record.source)}{attempt}")


def _duplicate_example(unit: UnitReport) -> str | None:
    duplicates = [o for o in unit.observations if "duplicate" in o.kinds]
    unknown = [a for a in unit.attempts if a.unknown_since is not None]
    reconciles = [o for o in unit.observations if "reconcile" in o.kinds]
    if not duplicates and not (unknown and reconciles):
        return None
    if not duplicates:
        last_seen = max(reconciles, key=lambda o: o.record.observed_at)
        if last_seen.record.state.strip().lower() in RUNNING_STATES:
            return None  # a job still running: nothing was resent, nothing answered duplicate
    story = []
    for attempt in unknown:
        job = f", job {_code(attempt.job_id)}" if attempt.job_id else ""
        story.append(f"attempt {attempt.number}{job} outcome unknown since "
                     f"{wording.instant(attempt.unknown_since or attempt.started_at)}")
    shown = sorted({*reconciles, *duplicates}, key=lambda o: o.record.observed_at)
    story.extend(_describe_observation(o) + (" — the service already had this job id"
                                             if "duplicate" in o.kinds else " — reconcile")
                 for o in shown)
    if unit.attempts:
        latest = unit.attempts[-1]
        how = f" ({latest.asserted.label})" if latest.asserted is not None else ""
        story.append(f"latest attempt {latest.number}: {latest.outcome}{how}")
    generations = ", ".join(f"g{g.generation} {_code(g.job_id)} {g.state}"
                            for g in unit.generations)
    if generations:
        story.append(f"generations: {generations}")
    return (f"- **{unit.label}** ({_code(unit.uow_id)}): " + "; ".join(story) + ". Keep the "
            "client-selected job id and inspect the existing job; do not bypass a duplicate "
            "with a new random id. A new generation only after earlier ones are confirmed "
            "failed.")


def _done_error_example(unit: UnitReport) -> str | None:
    """A remote job that ended DONE with an error, from whatever the engine recorded on the way
    it was run: an observation of the failed job (a returned ``JobStatus``, reconcile, a
    service's own record), the error it recorded by class (``JobFailed`` from ``run_job`` or a
    returned status, ``RemoteJobFailed`` from reconcile) and the generation it marked
    ``confirmed-failed``."""
    found = [o for o in unit.observations if "done-with-error" in o.kinds]
    failures = [e for e in unit.errors if is_job_failure(e.error_class)]
    failed = [g for g in unit.generations if g.state == "confirmed-failed"]
    if not (found or failures or failed):
        return None
    items = []
    for observation in found:
        error = detail_value(observation.record.detail, ("errorResult", "error_result"))
        shown = f" with errorResult {_code(error)}" if error else ""
        items.append(_describe_observation(observation) + shown)
    for record in failures:
        attempt = f" (attempt {record.attempt})" if record.attempt is not None else ""
        job = detail_value(record.detail, ("job_id",))
        on = f" for job {_code(job)}" if job else ""
        result = detail_value(record.detail, ("errorResult", "error_result"))
        shown = f" with errorResult {_code(result)}" if result else ""
        items.append(f"{wording.instant(record.recorded_at)} recorded {record.classification} "
                     f"{_code(record.error_class)}{on}{attempt}: {_code(record.message)}{shown}")
    items.extend(f"generation {g.generation} {_code(g.job_id)} confirmed-failed (marked "
                 f"{wording.instant(g.state_at)})" for g in failed)
    latest = unit.attempts[-1] if unit.attempts else None
    outcome = ""
    if latest is not None:
        how = f" ({latest.asserted.label})" if latest.asserted is not None else ""
        outcome = f" Attempt outcome recorded: {latest.outcome}{how}."
    classes = ", ".join(sorted({f"{e.classification} {_code(e.error_class)}"
                                for e in unit.errors}))
    errors = f" Errors: {classes}." if classes else ""
    return (f"- **{unit.label}** ({_code(unit.uow_id)}): " + "; ".join(items) + "." + outcome
            + errors + " DONE only means the job is no longer running; the error result "
            "says it failed, so only a new generation (a new job id) may run it again.")


def _deadline_example(unit: UnitReport) -> str | None:
    found = [d for d in unit.decisions if d.record.decision == "deadline-infeasible"]
    if not found:
        return None
    items = []
    for decision in found:
        record = decision.record
        withheld = (f"attempt {record.attempt} not started" if record.not_started
                    else f"attempt {record.attempt}")
        times = ", ".join(f"{name} {wording.instant(value)}" for name, value in (
            ("earliest start", decision.earliest_start),
            ("estimated finish incl. validation", decision.estimated_finish),
            ("deadline", decision.deadline or (unit.deadline.at if unit.deadline else None)),
        ) if value is not None)
        if decision.duration is not None:  # what the estimated finish rests on
            times += f"{', ' if times else ''}{decision.duration.text()}"
        items.append(f"decided as of {wording.instant(record.as_of)}: {record.reason} "
                     f"({withheld}{'; ' + times if times else ''})")
    return (f"- **{unit.label}** ({_code(unit.uow_id)}): " + "; ".join(items) + ". Communicate "
            "the impact, the affected population and an operational alternative instead of "
            "hiding the forecast behind more retries.")


def _examples(evidence: Evidence) -> list[str]:
    lines = ["## 8. Examples from this ledger", "",
             "Ask another operator to explain each decision below from the evidence alone."]
    for title, builder in (
        ("Duplicate after a lost response", _duplicate_example),
        ("DONE with an error", _done_error_example),
        ("Deadline-infeasible", _deadline_example),
    ):
        found = [text for text in (builder(u) for u in evidence.units) if text]
        lines += ["", f"### {title}", "", *(found or ["_None recorded._"])]
    return lines


def _next_actions(evidence: Evidence) -> list[str]:
    rows = []
    for unit in ordered(evidence.units):
        decision = unit.latest_decision
        if decision is None:
            rows.append((unit.label, unit.status.state, unit.outcome_label,
                         "no decision recorded", "", ""))
            continue
        record = decision.record
        rows.append((unit.label, unit.status.state, unit.outcome_label, record.decision,
                     record.reason, "current" if decision.current else "evidence came after it"))
    return ["## 9. Current state and planner decisions", "",
            "Decisions are what the planner chose from the evidence at the time; they execute "
            "nothing.", "",
            *_table(["Unit", "Health", "Latest attempt", "Latest decision", "Reason",
                     "Still current?"], rows)]


def _pipeline_assumptions(pipeline: Pipeline | None) -> list[Assumption]:
    if pipeline is None:
        return []
    found = []
    for name, task in pipeline.tasks.items():
        subject = f"{pipeline.name}.{name}"
        if task.repeats_under_job_id:
            found.append(Assumption(subject, "safe_repeat='same-job-id' is the pipeline "
                                    "author's assertion (assumed by the caller) that the "
                                    "task's receiver deduplicates by its job id; not proven",
                                    "pipeline file"))
        elif task.safe_repeat:
            found.append(Assumption(subject, "safe_repeat=True is the pipeline author's "
                                    "assertion (assumed by the caller) that a repeat has no "
                                    "extra effect; not proven", "pipeline file"))
        if task.estimated_duration is not None:
            found.append(Assumption(
                subject, f"estimated duration {task.estimated_duration:g} s and validation "
                f"{task.validation_duration:g} s are estimates used for deadline decisions",
                "pipeline file"))
    return found


def _assumption_lines(items: Iterable[Assumption]) -> list[str]:
    return [f"- **{', '.join(subjects)}**: {text} ({origin})"
            for text, subjects, origin in group_assumptions(items)]


def _unresolved(evidence: Evidence, pipeline: Pipeline | None) -> list[str]:
    assumed = [*evidence.assumptions, *_pipeline_assumptions(pipeline)]
    return ["## 10. Unresolved assumptions", "",
            "Nothing below is a promise: each item is an assertion, an estimate or a gap in the "
            "evidence.", "", "Assumed by the caller (not verified):", "",
            *(_assumption_lines(assumed) or [NONE]), "", "Open questions in the evidence:", "",
            *(_assumption_lines(evidence.open_questions) or ["_None found._"]), "",
            "Standing caveats:", "", *(f"- {c}" for c in STANDING_CAVEATS)]


def render_handover(evidence: Evidence, pipeline: Pipeline | None = None,
                    *, generated_at: datetime | None = None) -> str:
    """The runbook as Markdown; ``pipeline`` (from ``--pipeline-file``) adds owners, policies and
    acceptance criteria the ledger does not hold."""
    where = f"pipeline {evidence.pipeline}" if evidence.pipeline else "all pipelines"
    lines = [
        f"# RUN handover: {where}", "",
        f"- Ledger: {_code(evidence.ledger)}",
        f"- Evidence as of: {wording.instant(evidence.as_of)}",
        f"- Units of work: {len(evidence.units)}; fingerprinted partitions: "
        f"{len(evidence.partitions)}",
        f"- Health: {scope(evidence.units).headline}",
    ]
    if evidence.left_out:
        lines.append(f"- Left out: {evidence.left_out} records made after the as-of time")
    if pipeline is not None and pipeline.source_file is not None:
        lines.append(f"- Pipeline file: {_code(pipeline.source_file)}")
    if generated_at is not None:
        lines.append(f"- Generated: {wording.instant(generated_at)}")
    lines += ["", "> Built from recorded evidence only. Each fact is decided (planner), executed "
              "(twice ran it), observed (a named source saw it, with its age), verified (output "
              "checked by acceptance and fingerprint), assumed by the caller (e.g. safe_repeat) "
              "or asserted by an operator (`twice resolve`: a person's word, with their name "
              "and note). This runbook executed nothing and approves nothing.",
              ""]
    for section in (
        _health(evidence), _identifiers(evidence), _job_locations(evidence),
        _state_sources(evidence),
        _errors(evidence), _attempt_limits(evidence, pipeline), _validation(evidence, pipeline),
        _owners(pipeline), _examples(evidence), _next_actions(evidence),
        _unresolved(evidence, pipeline),
    ):
        lines += [*section, ""]
    return inert("\n".join(lines).rstrip(), lines=True) + "\n"  # nothing drives a terminal
