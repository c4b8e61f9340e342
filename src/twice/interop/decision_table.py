"""Human-readable decisions: one row per task with the reason, for an operator at a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from twice.core.decision import Decision, DecisionReport
from twice.core.timescale import Clock

_STYLE = {
    Decision.RETRY_ELIGIBLE: "green",
    Decision.WAIT_BACKOFF: "cyan",
    Decision.VALIDATE_OUTPUT: "blue",
    Decision.DEADLINE_INFEASIBLE: "bold red",
    Decision.ATTEMPTS_EXHAUSTED: "red",
    Decision.REPAIR_CAUSE: "red",
    Decision.RECONCILE_REMOTE: "yellow",
    Decision.RECONCILE_EFFECTS: "yellow",
    Decision.REFRESH_OBSERVATION: "magenta",
    Decision.OBSERVE_RUNNING: "white",
}


def print_table(report: DecisionReport, clock: Clock, stream: TextIO | None = None) -> None:
    """Rich table of decisions, then the truthfulness line (nothing was executed or proven)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream or sys.stdout, width=160)
    table = Table(title="Retry decisions", show_lines=False)
    for column in ("task", "decision", "backoff", "earliest start", "estimated finish", "reason"):
        table.add_column(column, overflow="fold")

    def show(value: int | float | None, render: Callable[[int | float], str]) -> str:
        return "-" if value is None else render(value)

    for result in report.tasks:
        table.add_row(
            result.id,
            f"[{_STYLE[result.decision]}]{result.decision.value}[/]",
            show(result.backoff, clock.span),
            show(result.earliest_start, clock.when),
            show(result.estimated_finish, clock.when),
            result.reason,
        )
    console.print(table)
    passed = "the deadline has passed; " if report.deadline_passed else ""
    console.print(  # one line, never wrapped mid-sentence
        f"{passed}decided only: no job was executed, idempotency is not proven (safeRepeat is the "
        "caller's assertion), completion is not guaranteed, this is not a production approval.",
        soft_wrap=True,
    )


def lab_table(stdin: TextIO | None = None, stdout: TextIO | None = None,
              stderr: TextIO | None = None) -> int:
    """``twice decide --format table`` on a lab fixture: same validation, a table instead."""
    from twice.core.decision import decide
    from twice.interop.lab import FixtureError, parse_fixture, parse_json, read_input

    clock = Clock("teaching")
    try:
        window, tasks = parse_fixture(parse_json(read_input(stdin or sys.stdin)))
    except (FixtureError, TypeError) as exc:
        print(f"Invalid retry fixture: {exc}", file=stderr or sys.stderr)
        return 2
    print_table(decide(window, tasks, when=clock.when, span=clock.span), clock, stdout)
    return 0
