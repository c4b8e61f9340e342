"""``twice decide --ledger URL``: the planner over every unit of work a ledger recorded.

Evidence is read as of ``--as-of`` (default: now); records made after it are ignored, so the
question "what would the planner have said at 05:40?" has an answer. Policies and deadlines come
from what each unit's latest run recorded (``twice.engine.evidence.PlanSettings``); the workflow
deadline of that run is not applied, since a new run gets a fresh one.

Also home to the helpers ``twice status`` shares: opening an *existing* ledger (a status command
must not create an empty database at a mistyped path) and building one row per unit.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from twice.cli import jsonkeys
from twice.cli.exits import OK, exit_code_for
from twice.errors import InputError

if TYPE_CHECKING:
    from twice.engine.evidence import PlanSettings
    from twice.ledger import AttemptRecord, Ledger, LedgerReader, ResolutionRecord, UnitRecord
    from twice.reports.gather import UnitsRead

SCHEMA = "twice.decide-ledger/v1"
#: The summary's count of units the planner could not decide (no policy recorded).
UNDECIDED = "undecided"
#: The summary's count of units that need nothing (verified, asserted, superseded).
SETTLED = "settled"
SettingsFor = Callable[["UnitRecord"], "PlanSettings | None"]


def parse_instant_arg(text: str | None, option: str) -> datetime | None:
    """An ISO-8601 instant with an offset given to ``option`` (e.g. ``--as-of``), as given;
    None when not given. Like an interval's bounds, it must lie in the years the rest of twice
    accepts (``twice.define.schedule``'s rule, judged in UTC, the zone instants are printed
    in), or ``InputError`` naming ``option``: an instant in year 1 would print as
    ``1-01-01T00:00:00Z``, not an ISO-8601 instant."""
    from twice.core.timescale import TimeValueError, parse_instant
    from twice.define.schedule import check_year

    if text is None:
        return None
    try:
        value = parse_instant(text.strip())
    except TimeValueError as exc:
        raise InputError(f"{option}: {exc}") from None
    check_year(value.astimezone(UTC), option)  # a ScheduleError: an InputError
    return value


def parse_as_of(text: str | None) -> datetime | None:
    """``--as-of`` (:func:`parse_instant_arg`) in UTC; None when not given."""
    value = parse_instant_arg(text, "--as-of")
    return None if value is None else value.astimezone(UTC)


def open_existing_ledger(url: str | None, *, writes: bool = False) -> Ledger:
    """Open a ledger that must already exist (SQLite: the file must be there). Without
    ``writes`` it is opened read-only: a command that only reads creates nothing (an empty
    file stays empty) and migrates nothing (an older ledger is read as it is). A server or
    storage that failed or refused the connection is not bad input: its error passes
    unchanged (exit 1)."""
    from twice.cli.ledger_open import check_ledger_url
    from twice.ledger import Ledger, LedgerError, LedgerStorageError, LedgerUnavailableError
    from twice.ledger.engine import mask_url

    resolved = check_ledger_url(url)  # a URL no ledger can have is refused naming --ledger
    if resolved.get_backend_name() == "sqlite":
        database = resolved.database or ""
        if database in ("", ":memory:"):
            raise InputError("an in-memory ledger holds nothing to report; give a file")
        from pathlib import Path

        if not Path(database).is_file():
            from twice.core.secrets import redact

            raise InputError(
                f"no ledger at {redact(database)}: run `twice run` first, or point --ledger "
                "(or $TWICE_LEDGER) at an existing ledger"
            )
    try:
        return Ledger.open(url, read_only=None if writes else True)
    except (LedgerUnavailableError, LedgerStorageError):
        raise  # a service that failed (exit 1), not bad input
    except LedgerError as exc:
        raise InputError(f"cannot use ledger {mask_url(resolved)}: {exc}") from None


def unit_rows(
    ledger: LedgerReader, as_of: datetime | None, settings_for: SettingsFor | None = None,
    *, pipeline: str | None = None, read: UnitsRead | None = None,
) -> tuple[datetime, list[dict[str, Any]]]:
    """One row per unit (of ``pipeline`` only, if named): its latest attempt, freshest evidence
    and the planner's decision. Without ``as_of`` the rows are of the present (``live``:
    ``twice.engine.evidence.gather_evidence``), the instant ``read`` was read at when given
    (``twice.reports.gather.read_units``: shared with ``add_health``)."""
    from twice.core.timescale import format_duration, micros_to_instant
    from twice.engine.evidence import age_text, evidence_from_timeline, iso, plan_unit
    from twice.ledger import ObservationRecord
    from twice.ledger.records import resolution_outcome

    if read is None:
        from twice.reports.gather import read_units

        read = read_units(ledger, ledger.now() if as_of is None else as_of, pipeline)
    at = read.at
    rows = []
    units, timelines = read.units, read.timelines  # later units were not known then
    for unit in units:
        settings = settings_for(unit) if settings_for is not None else None
        timeline = timelines[unit.uow_id]
        evidence = evidence_from_timeline(unit, timeline, at, settings=settings,
                                          live=as_of is None)
        result = plan_unit(evidence)
        latest = evidence.latest
        asserted = _assertion(ledger, unit.uow_id, latest, at) if any(
            isinstance(event.record, ObservationRecord)
            and resolution_outcome(event.record.state, event.record.source) is not None
            for event in timeline
        ) else None  # no resolution in the journal: nothing to read
        observed = evidence.observed_at
        deadline = evidence.deadline
        row: dict[str, Any] = {
            "id": unit.uow_id,
            "pipeline": unit.pipeline,
            "task": unit.task,
            "interval": unit.interval.label,
            "intervalStart": iso(unit.interval_start),
            "attempt": None if latest is None else latest.number,
            "outcome": None if latest is None else latest.outcome,
            "attemptsInRun": evidence.attempts_in_run,
            "state": None if evidence.state is None else evidence.state.value,
            "jobId": None if latest is None else latest.job_id,
            "generation": None if latest is None else latest.generation,
            "observedAt": iso(observed),
            "source": evidence.source,
            "age": None if observed is None else (at - observed).total_seconds(),
            "ageText": "-" if observed is None else age_text((at - observed).total_seconds()),
            "deadline": iso(deadline),
            "deadlinePassed": deadline is not None and at > deadline,
            "policySource": evidence.settings_source,
            # "asserted": the latest attempt's outcome is an operator's resolution (twice
            # resolve), not something twice observed; None otherwise.
            "basis": None if asserted is None else "asserted",
            "assertedBy": None if asserted is None else asserted.operator,
            "assertion": None if asserted is None else asserted.note,
            # what the operator asserted (--as): succeeded, failed or failed-after-acting
            "asserted": None if asserted is None else asserted.outcome,
            "note": None,
            "decision": None,
            "reason": ("no policy recorded for this unit (it never ran): `twice status "
                       "--pipeline-file FILE` plans it with the pipeline's policy"),
            "backoff": None,
            "earliestStart": None,
            "estimatedFinish": None,
            # what a timed decision (one with a finish) assumed an attempt takes, and why
            "assumed_duration": None,
            "duration_basis": None,
        }
        if evidence.observation is not None and evidence.observation.state == "blocked":
            # when: a later run may have blocked a unit whose earlier attempt succeeded
            row["note"] = (f"blocked at {iso(evidence.observation.observed_at)}: "
                           f"{evidence.observation.detail.get('reason', '')}")
        if evidence.not_started is not None:
            row["note"] = (
                f"attempt {evidence.not_started.attempt} not started: "
                f"{evidence.not_started.decision}"
            )
        if result is not None:
            row.update(
                decision=result.decision.value,
                reason=result.reason,
                backoff=None if result.backoff is None else format_duration(result.backoff),
                earliestStart=None if result.earliest_start is None
                else iso(micros_to_instant(result.earliest_start)),
                estimatedFinish=None if result.estimated_finish is None
                else iso(micros_to_instant(result.estimated_finish)),
            )
            if result.estimated_finish is not None:
                row.update(evidence.assumed_duration().to_dict())
        rows.append(row)
    return at, rows


def _assertion(
    ledger: LedgerReader, uow_id: str, latest: AttemptRecord | None, at: datetime
) -> ResolutionRecord | None:
    """The operator's resolution the latest attempt's outcome comes from, as known at ``at``."""
    if latest is None or latest.outcome in ("running", "unknown"):
        return None
    found = [
        record for record in ledger.resolutions(uow_id)
        if record.attempt.number == latest.number and record.resolved_at <= at
        and record.attempt.outcome == latest.outcome
    ]
    return found[-1] if found else None


def add_health(ledger: Any, at: Any, rows: list[dict[str, Any]], pipeline: str | None, *,
                live: bool, read: UnitsRead | None = None) -> Any:
    """Give each row its health (the reports' model as of the same instant, from ``read`` when
    the rows were built from it), put what needs attention first, and return the scope (its
    headline)."""
    from twice.reports import gather
    from twice.reports.health import AWAITING_ACTION, HEALTH_ORDER, NEEDS_ATTENTION, scope

    evidence = gather(ledger, as_of=at, pipeline=pipeline, live=live, read=read)
    known = {unit.uow_id: unit for unit in evidence.units}
    rank = {str(state): i for i, state in enumerate(HEALTH_ORDER)}
    for row in rows:
        unit = known.get(row["id"])
        if unit is None:  # recorded after --as-of: it had no state then
            row.update(health=None, healthBasis=None, needsAttention=False,
                       healthReason="recorded after the as-of time", nextAction=None)
            continue
        state = unit.status.state
        row["health"] = str(state)
        row["healthBasis"] = unit.status.basis
        row["healthReason"] = unit.status.text
        row["needsAttention"] = state in NEEDS_ATTENTION
        row["nextAction"] = row["decision"] if state in AWAITING_ACTION else None
        if _settled(row):  # the raw decision's reason ("validate the output") would
            row["reason"] = unit.status.text  # contradict the health: why nothing is to do
    rows.sort(key=lambda row: rank.get(row["health"], len(rank)))
    return scope(evidence.units)


def rows_with_health(
    ledger: LedgerReader, as_of: datetime | None, settings_for: SettingsFor | None = None, *,
    pipeline: str | None = None, live: bool,
) -> tuple[datetime, list[dict[str, Any]], Any]:
    """:func:`unit_rows`, then :func:`add_health`, from one read of the units and their
    timelines (``twice.reports.gather.read_units``); the instant, the rows and the scope."""
    from twice.reports.gather import read_units

    read = read_units(ledger, ledger.now() if as_of is None else as_of, pipeline)
    at, rows = unit_rows(ledger, as_of, settings_for, pipeline=pipeline, read=read)
    return at, rows, add_health(ledger, at, rows, pipeline, live=live, read=read)


def _settled(row: dict[str, Any]) -> bool:
    """A row whose unit needs nothing (verified, asserted, superseded: its health awaits no
    action) though the planner's raw decision names one."""
    return (row.get("health") is not None and row.get("nextAction") is None
            and row["decision"] is not None)


def _report(ledger: LedgerReader, at: datetime, rows: list[dict[str, Any]]) -> dict[str, Any]:
    from twice.engine.evidence import iso

    return {
        "schema": SCHEMA,
        "ledger": ledger.url,
        "asOf": iso(at),
        "tasks": rows,
        # a unit without a recorded policy has no decision (its reason says so): "undecided";
        # a unit that needs nothing (nextAction null) is "settled", whatever its raw decision
        "summary": dict(sorted(Counter(
            SETTLED if _settled(r) else (r["decision"] or UNDECIDED) for r in rows).items())),
        "jobsExecuted": False,
        "idempotencyProven": False,
        "completionGuaranteed": False,
        "productionApproval": False,
    }


def _table(report: dict[str, Any], stream: TextIO) -> None:
    from rich.table import Table

    from twice.cli.console import make_console, shown
    from twice.engine.evidence import AssumedDuration

    console = make_console(file=stream)
    table = Table(title=f"Decisions over {shown(report['ledger'])} as of {report['asOf']}")
    for column in ("unit of work", "state", "health", "attempts", "evidence", "decision",
                   "reason"):
        table.add_column(column, overflow="fold")
    for row in report["tasks"]:
        evidence = "-" if row["source"] is None else f"{row['source']}, {row['ageText']} old"
        attempts = "-" if row["attempt"] is None else f"{row['attemptsInRun']} ({row['attempt']})"
        settled = row["health"] is not None and row["nextAction"] is None and row["decision"]
        decision, reason = (("-", row["healthReason"]) if settled
                            else (row["decision"] or "-", row["reason"]))
        reason = shown(reason)
        assumed = None if settled else AssumedDuration.from_dict(row)
        if assumed is not None:  # what the finish in the reason rests on
            reason += f"\n{shown(assumed.text())}"
        table.add_row(row["id"], row["state"] or "-", row["health"] or "-", attempts,
                      shown(evidence), decision, reason)
    console.print(table)
    console.print(
        "attempts: this run's (all recorded). Decided only: no job was executed, idempotency is "
        "not proven (safeRepeat is the caller's assertion), completion is not guaranteed."
    )


def decide_over_ledger(ledger_url: str, as_of: str | None, output_format: str) -> int:
    """Print the planner's decision for every unit in the ledger; the exit code (0, or that of
    bad input)."""
    try:
        at = parse_as_of(as_of)
        ledger = open_existing_ledger(ledger_url)
    except InputError as exc:
        from twice.cli.exits import error_line

        print(error_line("twice decide", str(exc)), file=sys.stderr)
        return exit_code_for(exc)
    with ledger:
        # with the health: a verified unit needs nothing
        at, rows, _ = rows_with_health(ledger, at, live=as_of is None)
        report = _report(ledger, at, rows)
    if output_format == "table":
        _table(report, sys.stdout)
    else:
        print(jsonkeys.dumps(report, sort_keys=True))
    return OK


def unit_id(ledger: LedgerReader, given: str, option: str = "UOW_ID") -> str:
    """The unit of work ``given`` names: its id, or a unique prefix of one (as ``twice status``
    shows them, e.g. ``funds_positions.load.20261125``). Otherwise ``InputError`` naming
    ``option``: the units it is the start of, or the closest ids."""
    import difflib

    if ledger.unit(given) is not None:
        return given
    known = [record.uow_id for record in ledger.units()]
    starting = [name for name in known if name.startswith(given)]
    if len(starting) == 1:
        return starting[0]
    if starting:
        shown = ", ".join(starting[:10]) + (", ..." if len(starting) > 10 else "")
        raise InputError(f"{option}: {given!r} is the start of {len(starting)} units of work "
                         f"({shown}); give more of the id")
    close = difflib.get_close_matches(given, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(f"{option}: unknown unit of work {given!r}{hint}")
