"""What ``twice run`` and ``twice worker`` share around the work they hand to the engine.

Before it: the pipeline file, the intervals and tasks asked for, a deadline override and the
(durable) ledger; every refusal is an ``InputError`` naming the option or file at fault, raised
before anything is recorded. During it: a failing ledger is a failed service, a definition
problem found late is bad input. After it: the result as JSON or a table, and the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

import click

from twice.cli.exits import finish
from twice.errors import InputError, UnavailableError

if TYPE_CHECKING:
    from twice.core.interval import Interval
    from twice.define.pipeline import Pipeline
    from twice.engine.executor import UnitResult
    from twice.ledger import Ledger


@dataclass(frozen=True)
class RunInputs:
    """The loaded pipeline, its intervals, the tasks (None: all) and the tasks to repeat."""

    pipeline: Pipeline
    spans: list[Interval]
    tasks: list[str] | None
    repeat: list[str]


def load_run_inputs(pipeline_file: str, *, interval: str | None, start: str | None,
                    end: str | None, tasks: str | None, deadline: str | None,
                    repeat: str | None) -> RunInputs:
    """Load the pipeline file, apply ``--deadline`` and parse what to run."""
    from twice.define.load import PipelineFileError, load_pipeline

    try:
        pipeline = load_pipeline(pipeline_file)
    except PipelineFileError as exc:
        raise InputError(str(exc)) from exc
    if deadline is not None:
        pipeline.deadline = deadline_override(deadline)
    return RunInputs(
        pipeline=pipeline,
        spans=parse_intervals(pipeline, interval, start, end),
        tasks=parse_task_names(pipeline, tasks),
        repeat=parse_task_names(pipeline, repeat, option="--repeat") or [],
    )


def open_durable_ledger(ledger_url: str | None) -> Ledger:
    """The ledger a run records in; one that cannot be opened is bad input."""
    from twice.ledger import Ledger, LedgerError

    try:
        return Ledger.open(ledger_url, durable=True)
    except LedgerError as exc:
        raise InputError(str(exc)) from exc


def parse_intervals(pipeline: Pipeline, interval: str | None, start: str | None,
                    end: str | None) -> list[Interval]:
    """``--interval``, or ``--start`` and ``--end``, on the pipeline's schedule."""
    from twice.define.schedule import ScheduleError

    if interval is not None and (start is not None or end is not None):
        raise InputError("give either --interval or --start/--end, not both")
    if interval is None:
        if start is None or end is None:
            raise InputError("give --interval DATE, or both --start and --end")
        interval = f"{start}/{end}"
    try:
        return pipeline.schedule.parse_intervals_arg(interval)
    except ScheduleError as exc:
        raise InputError(str(exc)) from exc


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


def show_and_finish(outcome: OutcomeT, label: str, as_json: bool,
                    summary: Callable[[OutcomeT, str], None]) -> NoReturn:
    """Print the outcome (``--json``: one object with the ledger's label; else ``summary``)
    and end with the exit code of its ``ok``."""
    if as_json:
        click.echo(json.dumps({**outcome.to_dict(), "ledger": label}, sort_keys=True))
    else:
        summary(outcome, label)
    finish(outcome.ok)


def why(reason: str, result: UnitResult | None) -> str:
    """A summary table's "why" cell: the reason, then the last error (unless it succeeded)
    and the notes of the unit's result."""
    if result is not None:
        if result.error and result.outcome != "succeeded":
            reason += f"\nlast error: {result.error}"
        for note in result.notes:
            reason += f"\nnote: {note}"
    return reason
