"""Click options that several commands take: one spelling, one destination name, one help text
(given per command only where the commands really mean different things)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

LEDGER_HELP = "Ledger URL or SQLite path (default: $TWICE_LEDGER or twice-ledger.db)."


class FiniteRange(click.FloatRange):
    """A finite number in a range (seconds, prices): NaN and infinity are refused where the
    option is parsed, naming it (exit 2), like any value out of range. ``click.FloatRange``
    alone lets NaN through (it compares false with both bounds), and infinity when there is no
    maximum; the engine would refuse them later, with a traceback or without the option's
    name."""

    name = "finite number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def _all(*options: Callable[[Any], Any]) -> Callable[[F], F]:
    """Apply ``options`` so that they are listed in the order given."""

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def ledger_option(help: str = LEDGER_HELP) -> Callable[[F], F]:
    """``--ledger URL`` (``ledger_url``)."""
    return click.option("--ledger", "ledger_url", default=None, metavar="URL", help=help)


def json_option(help: str = "JSON output.") -> Callable[[F], F]:
    """``--json`` (``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def range_options(interval_help: str) -> Callable[[F], F]:
    """``--interval``, or ``--start`` and ``--end``, and ``--tasks``: what to run."""
    return _all(
        click.option("--interval", default=None, metavar="DATE|START/END", help=interval_help),
        click.option("--start", default=None, metavar="DATE",
                     help="First interval start (with --end)."),
        click.option("--end", default=None, metavar="DATE", help="End of the range, exclusive."),
        click.option("--tasks", default=None, metavar="A,B", help=TASKS_HELP),
    )


TASKS_HELP = ("Only these tasks and their dependents (a dependent runs when the output it reads "
              "changed, and is skipped when it came out identical); dependencies outside them "
              "must have succeeded already.")


def interval_help(verb: str) -> str:
    """The one help text of ``--interval`` (``verb``: run, work on, backfill)."""
    return (f"The interval to {verb}, e.g. 2026-11-30 (the schedule's interval starting then), "
            "or START/END for a range; or give --start and --end.")


def concurrency_option(help: str) -> Callable[[F], F]:
    """``--concurrency N`` (``concurrency``): units (run) or intervals (backfill) in flight."""
    return _all(
        click.option("--concurrency", "concurrency", default=None, metavar="N",
                     type=click.IntRange(1, 256), help=help),
        # the name `twice run` had before one vocabulary; kept so old scripts keep working
        click.option("--max-workers", "max_workers", default=None, hidden=True,
                     type=click.IntRange(1, 256)),
    )


LEASE_TTL = FiniteRange(min=0.1, max=86_400.0)


def lease_ttl_option(help: str, default: float = 300.0) -> Callable[[F], F]:
    """``--lease-ttl SECONDS``: how long a unit's lease lasts without renewal (the same range
    on every command; ``default``: 300 s, a worker's 60 s)."""
    return click.option("--lease-ttl", default=default, show_default=True, type=LEASE_TTL,
                        metavar="SECONDS", help=help)


def force_option(help: str) -> Callable[[F], F]:
    """``--force``: run verified units again (a new job generation each)."""
    return click.option("--force", is_flag=True, help=help)


def seed_option() -> Callable[[F], F]:
    """``--seed N``: reproducible retry jitter."""
    return click.option("--seed", default=None, type=int,
                        help="Seed the retry jitter (reproducible).")


def deadline_option(help: str) -> Callable[[F], F]:
    """``--deadline INSTANT|none``: override the pipeline's delivery deadline."""
    return click.option("--deadline", "deadline", default=None, metavar="INSTANT|none",
                        help=help)


def repeat_option(help: str) -> Callable[[F], F]:
    """``--repeat A,B``: execute these tasks again although they are not safe_repeat."""
    return click.option("--repeat", default=None, metavar="A,B", help=help)


ALLOW_OPEN = "--allow-open-intervals"
# A range of more units of work (intervals x tasks) than this needs --yes (or a terminal's yes).
LARGE_RANGE_UNITS = 10_000


def allow_open_option() -> Callable[[F], F]:
    """``--allow-open-intervals`` (``allow_open``): run intervals that have not ended yet."""
    return click.option(
        ALLOW_OPEN, "allow_open", is_flag=True,
        help="Run intervals that have not ended yet (their output covers a partial interval; "
             "the ledger records the run as made on an open interval). Without it they are "
             "refused.")


def refresh_snapshots_option() -> Callable[[F], F]:
    """``--refresh-snapshots``: read snapshotting tasks' sources again (twice.engine.snapshots)."""
    return click.option(
        "--refresh-snapshots", "refresh_snapshots", is_flag=True,
        help="Read the sources of tasks declared with snapshot= again; a source whose rows "
             "changed becomes a new input version (a new unit of work). Without it, retries "
             "and reruns read the stored snapshot.")


def yes_option() -> Callable[[F], F]:
    """``--yes`` (``yes``): confirm a range of more than ``LARGE_RANGE_UNITS`` units."""
    return click.option(
        "--yes", "-y", "yes", is_flag=True,
        help=f"Confirm a range of more than {LARGE_RANGE_UNITS:,} units of work (intervals x "
             "tasks); without it such a range is refused, or asked about on a terminal.")


def _pipeline_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and (value.endswith(".py") or "/" in value or "\\" in value):
        raise click.BadParameter(
            f"{value!r} looks like a file; --pipeline takes a pipeline's name (e.g. "
            "funds_positions) and --pipeline-file takes its .py file", param_hint="--pipeline")
    return value


def pipeline_name_option() -> Callable[[F], F]:
    """``--pipeline NAME`` (``pipeline``): only this pipeline's units. A name on every command;
    the .py file is ``--pipeline-file`` (or the positional PIPELINE_FILE of run and backfill)."""
    return click.option("--pipeline", "pipeline", default=None, metavar="NAME",
                        callback=_pipeline_name, help="Only this pipeline's units (its name).")


def pipeline_file_option(help: str) -> Callable[[F], F]:
    """``--pipeline-file FILE`` (``pipeline_file``): the pipeline's .py file."""
    return click.option("--pipeline-file", "pipeline_file", default=None, metavar="FILE",
                        help=help)


def operator_name(given: str | None, *, recorded_with: str) -> str:
    """``--operator NAME`` of a command that records a person's word (``twice resolve``,
    ``twice adopt``): the name given, else ``$USER``, else "operator"; a blank one is refused."""
    from twice.errors import InputError

    if given is not None:
        if not given.strip():
            raise InputError(
                f"--operator: give your name or login (it is recorded with {recorded_with})"
            )
        return given.strip()
    return (os.environ.get("USER") or "").strip() or "operator"


PARTITION_HELP = (
    "The slice: a value of the partition column (2026-11-30, a whole day of a date column), "
    "or an interval START/END, each a date or ISO datetime as --interval takes them (naive: "
    "UTC; 2026-11-30/2026-12-01, 2026-11-30T05:00/2026-11-30T06:00, or with offsets); prefix "
    "COLUMN= when the destination does not name its partition_column."
)


def partition_option(help: str = PARTITION_HELP) -> Callable[[F], F]:
    """``--partition [COLUMN=]VALUE`` (``partition_text``): read by :func:`parse_partition`."""
    return click.option("--partition", "partition_text", required=True,
                        metavar="[COLUMN=]VALUE", help=help)


def parse_partition(text: str, option: str = "--partition") -> tuple[str | None, Any]:
    """``[COLUMN=]VALUE`` -> (the column or None, the partition spec a destination takes).

    VALUE is one value of the partition column, passed on as text (the destination makes it
    the column's type: a date, a number, ...), or an interval ``START/END`` whose bounds are
    the dates and datetimes every command's ``--interval`` takes (the schedule's own point
    parser); a bound without an offset is UTC, as no schedule says otherwise here. Bad input is
    an :class:`~twice.errors.InputError` naming ``option``.
    """
    from datetime import UTC, date, datetime

    from twice.core.identifiers import IDENTIFIER_PATTERN, validate_identifier
    from twice.core.interval import Interval, IntervalError
    from twice.define.schedule import ScheduleError, parse_point
    from twice.errors import InputError

    column = None
    head, sep, rest = text.partition("=")
    if sep and IDENTIFIER_PATTERN.fullmatch(head):
        column, text = validate_identifier(head, "partition column"), rest
    text = text.strip()
    if not text:
        raise InputError(f"{option}: empty partition value; give e.g. 2026-11-30 or "
                         "2026-11-30/2026-12-01")
    if "/" not in text:
        return column, text

    def bound(point_text: str, name: str) -> datetime:
        try:
            point = parse_point(point_text, f"{option} {name}")
        except ScheduleError as exc:
            raise InputError(str(exc)) from None
        if not isinstance(point, datetime):
            assert isinstance(point, date)
            return datetime(point.year, point.month, point.day, tzinfo=UTC)
        return point if point.tzinfo is not None else point.replace(tzinfo=UTC)

    start_text, _, end_text = text.partition("/")
    start, end = bound(start_text, "start"), bound(end_text, "end")
    try:
        return column, Interval(start, end)
    except IntervalError as exc:
        raise InputError(f"{option}: {text}: {exc}") from None
