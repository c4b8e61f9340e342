"""What ``twice run`` and ``twice worker`` share around the work they hand to the engine.

Before it: the pipeline file, the intervals and tasks asked for, a deadline override and the
(durable) ledger; every refusal is an ``InputError`` naming the option or file at fault, raised
before anything is recorded. During it: a failing ledger is a failed service, a definition
problem found late is bad input. After it: the result as JSON or a table, and the exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import FAILED, OK, finish, output_lost
from twice.errors import InputError, UnavailableError

if TYPE_CHECKING:
    from twice.core.interval import Interval
    from twice.define.pipeline import Pipeline
    from twice.engine.executor import UnitResult
    from twice.ledger import Ledger


@dataclass(frozen=True)
class RunInputs:
    """The loaded pipeline, its intervals, the tasks to run (None: all; ``--tasks`` names and
    their dependents, which follow their inputs), the tasks named, and the tasks to repeat."""

    pipeline: Pipeline
    spans: list[Interval]
    tasks: list[str] | None
    repeat: list[str]
    named: list[str] | None = None


def load_run_inputs(pipeline_file: str, *, interval: str | None, start: str | None,
                    end: str | None, tasks: str | None, deadline: str | None,
                    repeat: str | None, yes: bool = False) -> RunInputs:
    """Load the pipeline file, apply ``--deadline`` and parse what to run; a range of more
    than ``LARGE_RANGE_UNITS`` units needs ``yes`` (see :func:`confirm_units`), asked before
    its intervals are listed."""
    from twice.define.load import PipelineFileError, load_pipeline

    try:
        pipeline = load_pipeline(pipeline_file)
    except PipelineFileError as exc:
        raise InputError(str(exc)) from exc
    if deadline is not None:
        pipeline.deadline = deadline_override(deadline)
    names = parse_task_names(pipeline, tasks)
    # the named tasks and their dependents: a dependent runs when the output it reads changed
    # (a new input version) and is skipped when it came out identical, so --tasks never leaves
    # dependents on old data (the same meaning as on twice backfill)
    selected = None if names is None else list(pipeline.subset(names).tasks)
    repeat_names = parse_task_names(pipeline, repeat, option="--repeat") or []
    check_destinations(pipeline, selected)
    span = parse_span(pipeline, interval, start, end)
    count = _schedule_call(lambda: pipeline.schedule.count_intervals(span.start, span.end))
    confirm_units(count, len(pipeline.tasks) if selected is None else len(selected), yes=yes)
    return RunInputs(
        pipeline=pipeline,
        spans=_schedule_call(lambda: pipeline.schedule.intervals(span.start, span.end)),
        tasks=selected,
        repeat=repeat_names,
        named=names,
    )


def check_destinations(pipeline: Pipeline, tasks: list[str] | None) -> None:
    """A malformed destination spec of a task to run is bad input, found before the ledger
    opens: not a permanent failure recorded for every interval (``twice backfill`` finds it
    while planning)."""
    from twice.destinations import check_spec
    from twice.destinations.errors import DestinationSpecError

    for task in pipeline:
        if not task.owns_output or (tasks is not None and task.name not in tasks):
            continue
        try:
            check_spec(task.destination)
        except DestinationSpecError as exc:
            raise InputError(f"task {task.name!r}: destination: {exc}") from exc


def confirm_units(intervals: int, tasks: int, *, yes: bool) -> None:
    """A range of more than ``LARGE_RANGE_UNITS`` units of work (intervals x tasks) runs only
    with ``--yes``, or when the operator says yes on a terminal; otherwise ``InputError``
    stating the count and how to confirm, before anything is planned or recorded."""
    from twice.cli.options import LARGE_RANGE_UNITS

    units = intervals * tasks
    if yes or units <= LARGE_RANGE_UNITS:
        return
    text = (f"the range holds {units:,} units of work ({intervals:,} interval(s) x {tasks} "
            f"task(s)), more than {LARGE_RANGE_UNITS:,}")
    if _interactive():
        if click.confirm(f"{text}. Run them all?", default=False, err=True):
            return
        raise InputError(f"--yes: {text}; not confirmed, nothing was done")
    raise InputError(f"--yes: {text}; confirm with --yes (or narrow the range or --tasks)")


def _interactive() -> bool:
    import sys

    stdin = sys.stdin
    return stdin is not None and stdin.isatty()


def refuse_open_spans(spans: list[Interval], as_of: datetime, allow_open: bool) -> None:
    """``--allow-open-intervals``: intervals that have not ended at ``as_of`` are refused
    (``InputError`` naming the first and the option) unless allowed."""
    from twice.cli.options import ALLOW_OPEN
    from twice.define.schedule import refuse_open_intervals

    refuse_open_intervals(spans, as_of, allow_open=allow_open, allow=ALLOW_OPEN)


def _schedule_call(call: Callable[[], T]) -> T:
    from twice.define.schedule import ScheduleError

    try:
        return call()
    except ScheduleError as exc:
        raise InputError(str(exc)) from exc


def open_durable_ledger(ledger_url: str | None) -> Ledger:
    """The ledger a run records in (``run``, ``worker``, ``backfill``, ``dbt backfill``); one
    that cannot be opened, or a URL that cannot name one, is bad input
    (``twice.cli.ledger_open``)."""
    from twice.cli.ledger_open import open_ledger

    return open_ledger(ledger_url, durable=True)


def parse_intervals(pipeline: Pipeline, interval: str | None, start: str | None,
                    end: str | None) -> list[Interval]:
    """``--interval``, or ``--start`` and ``--end``, on the pipeline's schedule."""
    span = parse_span(pipeline, interval, start, end)
    return _schedule_call(lambda: pipeline.schedule.intervals(span.start, span.end))


def parse_span(pipeline: Pipeline, interval: str | None, start: str | None,
               end: str | None) -> Interval:
    """``--interval``, or ``--start`` and ``--end``, as one span on the pipeline's grid (its
    intervals not listed yet)."""
    if interval is not None and (start is not None or end is not None):
        raise InputError("give either --interval or --start/--end, not both")
    if interval is None:
        if start is None or end is None:
            raise InputError("give --interval DATE, or both --start and --end")
        interval = f"{start}/{end}"
    text = interval
    return _schedule_call(lambda: pipeline.schedule.parse_interval_arg(text))


def parse_task_names(pipeline: Pipeline, tasks: str | None, option: str = "--tasks"
                     ) -> list[str] | None:
    """``--tasks A,B`` (or ``--repeat``): names of the pipeline's tasks; None if not given."""
    from twice.define.pipeline import PipelineError

    if tasks is None:
        return None
    names = [name.strip() for name in tasks.split(",") if name.strip()]
    if not names:
        raise InputError(f"{option}: no task names given")
    for name in names:
        try:
            pipeline.get_task(name)
        except PipelineError as exc:
            raise InputError(f"{option}: {exc}") from exc
    return names


def deadline_override(text: str) -> Callable[[Interval], datetime] | None:
    """``--deadline``: None for 'none', else a function giving that instant for every interval."""
    if text.strip().lower() == "none":
        return None
    from twice.core.timescale import TimeValueError, parse_instant

    try:
        due = parse_instant(text)
    except TimeValueError as exc:
        raise InputError(f"--deadline: {exc}") from exc
    return lambda _interval: due


@contextmanager
def run_failures() -> Iterator[None]:
    """Around the run: the ledger failing is a failed service (the input was fine); a
    definition problem found only now is still bad input."""
    from twice.define.pipeline import PipelineError
    from twice.define.schedule import ScheduleError
    from twice.ledger import LedgerError

    try:
        yield
    except LedgerError as exc:
        raise UnavailableError(f"the ledger failed during the run: {exc}") from exc
    except (PipelineError, ScheduleError) as exc:
        raise InputError(str(exc)) from exc


class Outcome(Protocol):
    """What a run hands back: ``ok`` and a JSON document."""

    @property
    def ok(self) -> bool: ...

    def to_dict(self) -> dict[str, Any]: ...


OutcomeT = TypeVar("OutcomeT", bound=Outcome)
T = TypeVar("T")


def show_and_finish(outcome: OutcomeT, label: str, as_json: bool,
                    summary: Callable[[OutcomeT, str], None]) -> NoReturn:
    """Print the outcome (``--json``: one object with the ledger's label; else ``summary``)
    and end with the exit code of its ``ok``, also when the reader of the output went away."""
    import errno

    try:
        if as_json:
            echo(jsonkeys.dumps({**outcome.to_dict(), "ledger": label}, sort_keys=True))
        else:
            summary(outcome, label)
        sys.stdout.flush()
    except OSError as exc:  # the reader went away (| head): the work's code, not 0
        if exc.errno != errno.EPIPE:
            raise
        output_lost(exc, code=OK if outcome.ok else FAILED)
    finish(outcome.ok)


def why(reason: str, result: UnitResult | None) -> str:
    """A summary table's "why" cell: the reason, then the last error (unless it succeeded),
    the notes of the unit's result and the duration its latest timed decision assumed."""
    from twice.core.inert import inert  # each part one line: an error cannot forge a row

    reason = inert(reason)
    if result is not None:
        if result.error and result.outcome != "succeeded":
            reason += f"\nlast error: {inert(result.error)}"
        for note in result.notes:
            reason += f"\nnote: {inert(note)}"
        if result.assumed is not None:  # what the finish time the planner checked rests on
            reason += f"\n{result.assumed.text()}"
    return reason
