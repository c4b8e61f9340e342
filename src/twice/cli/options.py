"""Click options that several commands take: one spelling, one destination name, one help text
(given per command only where the commands really mean different things)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

LEDGER_HELP = "Ledger URL or SQLite path (default: $TWICE_LEDGER or twice-ledger.db)."


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
        click.option("--tasks", default=None, metavar="A,B",
                     help="Only these tasks; dependencies outside them must have succeeded "
                          "already."),
    )


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
