"""``twice backfill``: reprocess a range of intervals, verified partition by partition.

Heavy modules (the ledger, destinations, Rich) are imported inside the command. Bad input (a
missing pipeline file, an unparsable --start, an unknown task) is one line on stderr and exit 2;
a failed or refused unit, or one another process holds, exits 1; exit 0 means every unit
succeeded or was verified.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections import Counter
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo, shown
from twice.cli.exits import exit_on_error, finish
from twice.cli.options import (
    ALLOW_OPEN,
    TASKS_HELP,
    allow_open_option,
    concurrency_option,
    force_option,
    interval_help,
    json_option,
    lease_ttl_option,
    ledger_option,
    refresh_snapshots_option,
    seed_option,
    yes_option,
)
from twice.errors import InputError, UnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from twice.drivers.backfill import BackfillPlan, BackfillResult, PlanItem


EPILOG = """\b
Examples:
  twice backfill examples/funds_positions/pipeline.py --start 2026-11-23 --end 2026-11-30 --dry-run
  twice backfill examples/funds_positions/pipeline.py --interval 2026-11-25 --force
  twice backfill pipeline.py --start 2026-10-01 --end 2026-11-01 --tasks transform --concurrency 2
"""


def parse_point(text: str, option: str) -> date | datetime:
    """A date (2026-10-01) or an aware ISO-8601 instant, for --start/--end."""
    value = text.strip()
    try:
        return date.fromisoformat(value) if len(value) == 10 else datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a date (YYYY-MM-DD) or an ISO-8601 instant", param_hint=option
        ) from None


@click.command("backfill", epilog=EPILOG)
@click.argument("pipeline_file")
@click.option("--interval", "interval_text", default=None, metavar="DATE|START/END",
              help=interval_help("backfill"))
@click.option("--start", "start_text", default=None, metavar="DATE",
              help="First interval's start (inclusive), e.g. 2026-10-01 (with --end).")
@click.option("--end", "end_text", default=None, metavar="DATE",
              help="Range end (exclusive), e.g. 2026-11-01.")
@click.option("--tasks", "tasks_text", default=None, metavar="A,B", help=TASKS_HELP)
@concurrency_option("Intervals in flight at once (they start in order; default 1).")
@ledger_option()
@force_option("Rerun intervals even when already verified with the same input and transform "
              "versions (a new job generation each).")
@click.option("--accept-schema-change", is_flag=True,
              help="Allow a destination schema to change inside the range. Implies --force: "
              "every interval of the range is rewritten with the new schema, so the range never "
              "mixes old and new schemas. New nullable columns in a task's output are added to "
              "its SQLite, DuckDB or PostgreSQL table (ALTER TABLE ... ADD COLUMN, in the "
              "write's transaction; rows already there hold NULL); other changes (a type, a "
              "dropped or renamed column) are refused with the statement to run. Without it "
              "a schema change stops the backfill.")
@click.option("--deadline", "deadline_text", default="none", show_default=True,
              metavar="INSTANT|none",
              help="The backfill's own deadline (ISO-8601 instant with offset): no attempt "
              "starts that cannot finish before it. The intervals' delivery deadlines are past "
              "and are not used.")
@click.option("--verify-untouched", is_flag=True,
              help="Also measure the partition of every unit skipped as verified against its "
              "recorded fingerprint (one read of the destination a partition, as twice verify "
              "does) and rerun the ones changed behind twice's back (drift). Without it a "
              "verified unit is decided from the ledger alone, so a restart or rerun of a long "
              "range starts new work at once; only the partitions the backfill rewrites are "
              "measured.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (intervals x tasks, what would be skipped and why); change "
              "nothing.")
@seed_option()
@lease_ttl_option("How long a unit's lease lasts without renewal: a killed backfill's units "
                  "are taken over (and settled from their commit records) after it.")
@click.option("--repeat", "repeat_text", default=None, metavar="A,B",
              help="Execute these tasks again although they are not safe_repeat and already "
              "succeeded (otherwise their units are held, with the reason).")
@allow_open_option()
@refresh_snapshots_option()
@yes_option()
@json_option("Print one JSON object (no progress bar).")
@exit_on_error("twice backfill")
def backfill(pipeline_file: str, interval_text: str | None, start_text: str | None,
             end_text: str | None, tasks_text: str | None, concurrency: int | None,
             max_workers: int | None, ledger_url: str | None, force: bool,
             accept_schema_change: bool, deadline_text: str, verify_untouched: bool,
             dry_run: bool, seed: int | None,
             lease_ttl: float, repeat_text: str | None, allow_open: bool,
             refresh_snapshots: bool, yes: bool, as_json: bool) -> None:
    """Backfill PIPELINE_FILE for the intervals in [--start, --end) (or --interval).

    Intervals run in order with bounded concurrency. After each one, every partition written
    is fingerprinted in its engine and compared with the ledger's previous version (rows
    before/after, checksum changed or not); the difference is recorded and printed. A
    partition that had been changed behind twice's back (it no longer matches its last
    recorded version when the backfill is about to rewrite it) is reported as drift, printed
    and recorded in the ledger, besides the change the rerun makes. A unit already verified
    (same input and transform version, latest attempt succeeded, its fingerprint the
    partition's latest) is skipped on the ledger's word; --verify-untouched measures those
    partitions too and repairs the ones that drifted (twice verify checks them all). Dependents
    of the backfilled tasks follow for the same intervals: they execute when the output they
    read changed. A task not asserted safe_repeat that already succeeded is held unless named
    with --repeat. Units run through the executor:
    a unit another process holds is left to it (exit 1, run again later), and an unknown
    outcome from an earlier run is reconciled by its job id before anything else.

    Intervals that have not ended yet are refused unless --allow-open-intervals; a range of
    more than 10,000 units (intervals x tasks) needs --yes (a terminal asks). The plan streams:
    each interval is planned when it is about to run (or, with --dry-run, to print).
    """
    from twice.cli.pipeline_run import (
        confirm_units,
        open_durable_ledger,
        parse_span,
    )
    from twice.core.interval import IntervalError
    from twice.define.load import PipelineFileError, load_pipeline
    from twice.define.pipeline import PipelineError
    from twice.define.schedule import OpenIntervalError, ScheduleError
    from twice.destinations import DestinationError
    from twice.destinations.errors import DestinationSpecError
    from twice.drivers.backfill import BackfillError, iter_plan, run_backfill, selected_tasks
    from twice.engine.lineage import lineage_listeners, lineage_run
    from twice.ledger import LedgerError, LedgerStorageError, LedgerUnavailableError

    if interval_text is not None and (start_text is not None or end_text is not None):
        raise InputError("give either --interval or --start/--end, not both")
    if interval_text is None and (start_text is None or end_text is None):
        raise InputError("give --interval DATE, or both --start and --end")
    start: date | datetime | None = None if start_text is None else parse_point(start_text,
                                                                                "--start")
    end: date | datetime | None = None if end_text is None else parse_point(end_text, "--end")
    deadline = parse_deadline(deadline_text)
    tasks = None
    if tasks_text is not None:
        tasks = [t.strip() for t in tasks_text.split(",") if t.strip()]
        if not tasks:  # "--tasks ," must not quietly mean every task
            raise click.BadParameter("no task names given", param_hint="--tasks")
    repeat = [t.strip() for t in (repeat_text or "").split(",") if t.strip()]
    if repeat_text is not None and not repeat:
        raise click.BadParameter("no task names given", param_hint="--repeat")
    try:
        pipeline = load_pipeline(pipeline_file)
        if interval_text is not None:
            span = parse_span(pipeline, interval_text, None, None)
            start, end = span.start, span.end
            start_text, end_text = span.start.isoformat(), span.end.isoformat()
        assert start is not None and end is not None
        for name in repeat:
            pipeline.get_task(name)  # an unknown name is bad input, with a suggestion
        names, dependents = selected_tasks(pipeline, tasks)
        count = pipeline.schedule.count_intervals(start, end)  # not listing them
        if not count:
            raise BackfillError(f"[{start_text}, {end_text}) holds no interval")
        confirm_units(count, len(names), yes=yes)
        if deadline is not None:
            first = next(iter(pipeline.schedule.iter_intervals(start, end)))
            if deadline < first.end:  # no interval of the range can be delivered by it
                raise click.BadParameter(
                    f"{deadline.isoformat()} is before the range's first interval ends "
                    f"({first.end.isoformat()}): nothing can be delivered by it",
                    param_hint="--deadline")
        listeners = lineage_listeners(pipeline)  # before the ledger opens: bad input first
        ledger = open_durable_ledger(ledger_url)
    except (LedgerStorageError, LedgerUnavailableError):
        raise  # a service that failed (exit 1): twice.cli.exits decides, not this wrapper
    except (PipelineFileError, PipelineError, ScheduleError, IntervalError, BackfillError,
            LedgerError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    try:
        try:
            pipeline.schedule.refuse_open(start, end, ledger.now(), allow_open=allow_open,
                                          allow=ALLOW_OPEN)
        except OpenIntervalError as exc:
            raise InputError(str(exc)) from exc
        intervals = pipeline.schedule.iter_intervals(start, end)
        if dry_run:
            items = iter_plan(pipeline, ledger, intervals, tasks=tasks,
                              force=force or accept_schema_change, repeat=repeat,
                              verify_untouched=verify_untouched)
            header = {"pipeline": pipeline.name, "tasks": names, "dependents": dependents,
                      "force": force or accept_schema_change}
            if as_json:
                labels = [i.label for i in pipeline.schedule.iter_intervals(start, end)]
                _print_plan_json(header, labels, items)
            else:
                _print_plan_stream(header, count, items)
            return
        options: dict[str, Any] = {
            "tasks": tasks, "concurrency": concurrency or max_workers or 1, "force": force,
            "accept_schema_change": accept_schema_change, "deadline": deadline,
            "repeat": repeat, "lease_ttl": lease_ttl, "allow_open": allow_open,
            "refresh_snapshots": refresh_snapshots,
            "rng": None if seed is None else random.Random(seed),
            "listeners": listeners, "verify_untouched": verify_untouched,
        }
        with lineage_run(listeners):
            if as_json:
                result = run_backfill(pipeline, ledger, intervals, **options)
            else:
                result = run_with_progress(pipeline, ledger, intervals, total=count, **options)
        if as_json:
            echo(jsonkeys.dumps(result.to_dict(), sort_keys=True))
        else:
            print_summary(result)
    except (PipelineError, BackfillError, DestinationSpecError) as exc:
        raise InputError(str(exc)) from exc  # a malformed spec too: nothing was opened
    except DestinationError as exc:  # the destination failed while writing: not bad input
        raise UnavailableError(str(exc)) from exc
    finally:
        ledger.close()
    finish(result.ok)


def parse_deadline(text: str) -> datetime | None:
    """``--deadline``: None for 'none', else an aware ISO-8601 instant."""
    if text.strip().lower() == "none":
        return None
    from twice.core.timescale import TimeValueError, parse_instant

    try:
        return parse_instant(text)
    except TimeValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--deadline") from None


def _print_plan(plan: BackfillPlan, as_json: bool) -> None:
    """The whole ``plan`` as ``--dry-run`` prints it (the streamed output, at once)."""
    header = {"pipeline": plan.pipeline, "tasks": list(plan.tasks),
              "dependents": list(plan.dependents), "force": plan.force}
    if as_json:
        _print_plan_json(header, [i.label for i in plan.intervals], iter(plan.items))
    else:
        _print_plan_stream(header, len(plan.intervals), iter(plan.items))


def _print_plan_json(header: dict[str, Any], labels: list[str], items: Iterable[PlanItem]
                     ) -> None:
    """``{"dry_run": true, **plan.to_dict()}`` with sorted keys, byte for byte, written as the
    items are planned."""
    dumps = json.dumps
    echo("{" + f'"dependents": {dumps(header["dependents"])}, "dry_run": true, '
         f'"force": {dumps(header["force"])}, "intervals": {dumps(labels)}, "items": [',
         nl=False)
    for n, item in enumerate(items):
        echo((", " if n else "") + dumps(item.to_dict(), sort_keys=True), nl=False)
    echo(f'], "pipeline": {dumps(header["pipeline"])}, "tasks": {dumps(header["tasks"])}'
         "}")


STREAM_ROWS = 500  # a plan longer than this prints in tables of this many rows, as planned


def _print_plan_stream(header: dict[str, Any], intervals: int, items: Iterable[PlanItem]
                       ) -> None:
    """The plan table. A plan of up to ``STREAM_ROWS`` units is one table; a longer one is
    printed as it is planned: its first interval at once, then ``STREAM_ROWS`` rows at a time
    (the header once), then the totals."""
    from rich.table import Table

    from twice.cli.console import make_console

    console = make_console()
    tasks = len(header["tasks"])
    streaming = intervals * tasks > STREAM_ROWS
    rows: list[PlanItem] = []
    first_interval = None
    printed = 0
    runs = total = 0
    stopped: Counter[str] = Counter()

    def flush() -> None:
        nonlocal printed
        if not rows:
            return
        title = None if printed else (
            f"backfill plan for {header['pipeline']} (dry run: nothing changed)")
        cells = [(item.interval.start.isoformat(), item.task, item.expected or item.action,
                  item.reason) for item in rows]
        plain = _plain_table(console, PLAN_COLUMNS, cells, title, show_header=not printed)
        if plain is not None:  # Rich's own output, without its per-cell cost (see there)
            console.file.write(plain)
            console.file.flush()
        else:
            table = Table(title=title, show_header=not printed)
            for column in PLAN_COLUMNS:
                table.add_column(column)
            for cell in cells:
                table.add_row(*cell)
            console.print(table)
        printed += len(rows)
        rows.clear()

    for item in items:
        if streaming and rows and (
            len(rows) >= STREAM_ROWS or (not printed and item.interval != first_interval)
        ):
            flush()
        first_interval = first_interval or item.interval
        rows.append(item)
        total += 1
        if item.action == "run":
            if item.expected is None:
                runs += 1
            else:
                stopped[item.expected] += 1  # the engine will hold or block it
    flush()
    dependents = header["dependents"]
    deps = (f"; dependents follow (they run when the output they read changed): "
            f"{', '.join(dependents)}" if dependents else "")
    held = "".join(f", {stopped[word]} would be {word}" for word in ("held", "blocked")
                   if stopped[word])
    console.print(f"{intervals} intervals x {tasks} tasks: {runs} would run{held}, "
                  f"{total - runs - sum(stopped.values())} would be skipped{deps}")


PLAN_COLUMNS = ("interval", "task", "action", "reason")
_PLAIN_TEXT = re.compile(r"[ -Z\\-~\n]*")  # printable ASCII without "[" (Rich markup), lines


def _plain_table(console: Any, columns: Sequence[str], cells: Sequence[Sequence[str]],
                 title: str | None, *, show_header: bool) -> str | None:
    """The text Rich prints for ``Table(title=title, show_header=show_header)`` of these
    ``columns`` and ``cells`` (default box, padding 1), built directly: rendering through Rich
    costs ~1.5 ms a row, which made a 100,000-row plan take minutes to print. Only where the
    result is certainly Rich's byte for byte: no colour or styles (not a terminal), soft wrap
    (the title is not centred), every cell plain ASCII with no markup or emoji code, and the
    table narrower than the console. Otherwise None: the caller prints with Rich."""
    from rich.emoji import Emoji

    if console.color_system is not None or not console.soft_wrap:
        return None
    texts = [*columns, *(text for row in cells for text in row), title or ""]
    # checked as one text: no cell may hold a newline (so the count is exact), and neither
    # the plain-character class nor an emoji code (":smile:", no whitespace inside) spans one
    joined = "\n".join(texts)
    if (joined.count("\n") != len(texts) - 1 or _PLAIN_TEXT.fullmatch(joined) is None
            or Emoji.replace(joined) != joined):
        return None
    widths = [max([len(column)] if show_header else [0], default=0) for column in columns]
    for texts_ in cells:
        widths = [max(width, len(text)) for width, text in zip(widths, texts_, strict=True)]
    if sum(widths) + 3 * len(widths) + 1 > console.width:
        return None

    def line(left: str, fill: str, middle: str, right: str) -> str:
        return left + middle.join(fill * (width + 2) for width in widths) + right + "\n"

    def row(edge: str, texts: Sequence[str]) -> str:
        return edge + edge.join(f" {text.ljust(width)} " for text, width
                                in zip(texts, widths, strict=True)) + edge + "\n"

    out = [f"{title}\n"] if title else []
    if show_header:
        out += [line("┏", "━", "┳", "┓"), row("┃", columns), line("┡", "━", "╇", "┩")]
    else:
        out.append(line("┌", "─", "┬", "┐"))
    out += [row("│", texts) for texts in cells]
    out.append(line("└", "─", "┴", "┘"))
    return "".join(out)


def run_with_progress(pipeline: Any, ledger: Any, intervals: Any, total: int | None = None,
                      **options: Any) -> BackfillResult:
    """``run_backfill`` under a Rich progress bar; diffs are printed as intervals finish.
    ``total``: how many intervals (default ``len(intervals)``; give it for a lazy range)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from twice.cli.console import make_console
    from twice.drivers.backfill import run_backfill

    console = make_console()
    state = {"running": 0, "failed": 0, "held": 0}
    skipped = SkippedRun()
    with Progress(TextColumn("intervals"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("running {task.fields[running]}  failed {task.fields[failed]}"
                             "  held {task.fields[held]}"),
                  TextColumn("eta"), TimeRemainingColumn(), console=console,
                  transient=False) as progress:
        bar = progress.add_task("backfill", total=len(intervals) if total is None else total,
                                running=0, failed=0, held=0)

        def emit(kind: str, data: Any) -> None:
            if kind == "task-finished" and data["status"] == "skipped":
                skipped.add(data)
                return
            if kind in ("task-finished", "attempt-failed", "reconciled"):
                skipped.flush(progress.console)  # in order, before the next line
            if kind == "interval-started":
                state["running"] += 1
            elif kind == "interval-finished":
                state["running"] -= 1
                state["failed"] += bool(data["failed"])
                state["held"] += bool(data["held"]) and not data["failed"]
                progress.advance(bar)
            elif kind == "attempt-failed":
                progress.console.print(
                    f"  {_short(data['interval'])} {data['task']}: attempt {data['attempt']} "
                    f"failed ({shown(data['error'])})"
                    + ("; transient" if data["transient"] else "")
                    + (", retried" if data.get("retried") else "")
                )
            elif kind == "reconciled":
                progress.console.print(
                    f"  {_short(data['interval'])} {data['task']}: outcome unknown, reconciled job "
                    f"{shown(data['job_id'])} -> {data['state']} (same job id, not resubmitted)"
                )
            elif kind == "task-finished":
                print_line(progress.console, "  " + shown(describe_run(data)))
                return  # the counts change only as intervals start and finish
            progress.update(bar, running=state["running"], failed=state["failed"],
                            held=state["held"])

        try:
            return run_backfill(pipeline, ledger, intervals, emit=emit, **options)
        finally:
            skipped.flush(progress.console)


class SkippedRun:
    """Consecutive skipped units, each printed as it comes in a short run, and as one line in
    a long one: a restart over a year of verified hourly units would otherwise print 26,280
    lines (and spend seconds printing them) before its first new unit. ``--json`` and the
    ledger keep every unit's reason."""

    #: A run of at most this many skipped units is printed unit by unit.
    SHOWN = 10

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []  # the first SHOWN of the run
        self.count = 0
        self.last: str | None = None  # the run's last interval

    def _reset(self) -> None:
        self.lines, self.count, self.last = [], 0, None

    def add(self, run: dict[str, Any]) -> None:
        if self.count < self.SHOWN:
            self.lines.append(run)
        self.last = run["interval"]
        self.count += 1

    def flush(self, console: Any) -> None:
        if self.count == 0:
            return
        if self.count <= self.SHOWN:
            for run in self.lines:
                print_line(console, "  " + shown(describe_run(run)))
        else:
            first = self.lines[0]["interval"]
            assert self.last is not None
            span = (_short(first) if first == self.last
                    else f"{_short(first)} .. {_short(self.last)}")
            print_line(console, f"  {span}  {self.count:,} units skipped, already done "
                       "(verified, or succeeded with the same inputs; --json gives each reason)")
        self._reset()


def print_line(console: Any, text: str) -> None:
    """``console.print(text)`` for one line of Rich markup, written directly where the result
    is certainly Rich's byte for byte (as :func:`_plain_table`): not a terminal (no live
    display to keep below it), no colour, soft wrap, and the line plain ASCII with no markup,
    escape or emoji code. Rich costs ~0.3 ms a line, which was most of the time a rerun of a
    year of hourly units (26,280 skipped lines) spent before reaching new work."""
    from rich.emoji import Emoji

    if (console.is_terminal or console.color_system is not None or not console.soft_wrap
            or "\n" in text or _PLAIN_TEXT.fullmatch(text) is None
            or Emoji.replace(text) != text):
        console.print(text)
        return
    console.file.write(text + "\n")


@functools.lru_cache(maxsize=64)
def _short(label: str) -> str:
    """An interval's label (``START/END``) as a line names it (``Interval.short``; kept for
    the few intervals in flight: each of an interval's tasks prints a line)."""
    from twice.core.interval import Interval

    return Interval.parse(label).short


def describe_run(run: dict[str, Any]) -> str:
    """One line per unit: status, and for a written partition its fingerprint difference:
    against the previous recorded version, then (when the partition had been changed behind
    twice's back) the drift (recorded -> as found) and the change (as found -> written); last,
    the duration its latest timed decision assumed and why."""
    from twice.engine.evidence import AssumedDuration

    head = f"{_short(run['interval']):<10} {run['task']:<10} {run['status']:<9}"
    diff = run.get("diff")
    drift = run.get("drift")
    drifted = drift_text(drift, diff) if drift and drift.get("drifted") else ""
    assumed = AssumedDuration.from_dict(run)  # what its timed decision assumed
    planned = "" if assumed is None else f"; {assumed.text()}"
    if run["status"] == "skipped":
        return f"{head} {run['reason']}"
    if diff is None:
        return (f"{head} {run['reason']}".rstrip() + (f"; {drifted}" if drifted else "")
                + planned)
    if diff["rows_before"] is None:
        change = f"v{diff['version']} new: {diff['rows_after']} rows"
    else:
        if diff.get("definition_changed"):
            checksum = "not comparable (the previous version covers other columns)"
        else:
            checksum = "CHANGED" if diff["checksum_changed"] else "unchanged"
        change = (f"v{diff['version']}: rows {diff['rows_before']} -> {diff['rows_after']}, "
                  f"checksum {checksum}")
    keys = diff.get("keys")
    if keys:
        change += (f"; keys +{keys['added']} -{keys['removed']} ~{keys['changed']}")
    if drifted:
        change += f"; {drifted}"
    extra = "; new input version" if run.get("new_input_version") else ""
    return f"{head} {change}{extra}{planned}"


def drift_text(drift: dict[str, Any], diff: dict[str, Any] | None) -> str:
    """``drift: 10 -> 8 rows behind twice's back (checksum changed); change: 8 -> 10 rows``."""
    checksum = "changed" if drift["checksum_now"] != drift["checksum_recorded"] else "unchanged"
    text = (f"drift: {drift['rows_recorded']} -> {drift['rows_now']} rows behind twice's back "
            f"(checksum {checksum}, v{drift['version']})")
    if diff is not None and diff.get("version") == drift["version"] + 1:
        text += f"; change: {drift['rows_now']} -> {diff['rows_after']} rows"
        if list(diff.get("columns") or []) == list(drift["columns"]):
            same = drift["checksum_now"] == diff["checksum_after"]
            text += f" (checksum {'unchanged' if same else 'changed'})"
    return text


def print_summary(result: BackfillResult) -> None:
    from twice.cli.console import make_console

    console = make_console()
    counts = result.counts()
    diffs = result.diffs
    changed = [d for d in diffs if d.verdict == "changed"]
    console.print(
        f"backfill {result.plan.pipeline}: {len(result.plan.intervals)} intervals, "
        + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        + f" in {result.elapsed:.1f} s"
    )
    redefined = sum(d.verdict == "new definition" for d in diffs)
    reshaped = sum(d.verdict == "schema changed" for d in diffs)
    console.print(
        f"partitions verified: {len(diffs)} "
        f"({sum(d.verdict == 'unchanged' for d in diffs)} unchanged, {len(changed)} changed, "
        f"{sum(d.verdict == 'new' for d in diffs)} new"
        + (f", {reshaped} with a new schema" if reshaped else "")
        + (f", {redefined} re-fingerprinted over other columns" if redefined else "") + ")"
    )
    drifted = [run for run in result.runs if run.drift is not None and run.drift.drifted]
    if drifted:
        console.print(
            f"[yellow]drift[/yellow]: {len(drifted)} partition(s) had been changed behind "
            "twice's back since their last recorded version (recorded in the ledger as 'drift' "
            "observations):"
        )
    for run in drifted:
        assert run.drift is not None
        diff = None if run.diff is None else run.diff.to_dict()
        console.print(f"  {run.task} {run.interval.short} {run.drift.destination}: "
                      + drift_text(run.drift.to_dict(), diff), markup=False)
    if result.plan.dependents:
        dependents = ", ".join(result.plan.dependents)
        console.print(f"dependents follow for the same intervals (they run when the output "
                      f"they read changed, and are skipped when it came out identical): "
                      f"{dependents}")
    new_inputs = [r for r in result.runs if r.new_input_version  # those that executed
                  and r.status not in ("skipped", "held", "blocked", "leased-elsewhere")]
    for run in new_inputs:
        console.print(f"source changed: {run.task} {run.interval.short} ran as a new unit "
                      f"of work (input version {shown(run.input_version)})")
    for run in result.runs:
        if run.status in ("failed", "refused", "blocked"):
            console.print(f"[red]{run.status}[/red]: {run.task} {run.interval.short}: "
                          f"{shown(run.reason)}")
    held = [run for run in result.runs if run.status == "leased-elsewhere"]
    for run in held:
        console.print(f"[yellow]held by another run[/yellow]: {run.task} "
                      f"{run.interval.short}: {shown(run.reason)}")
    if held:
        console.print(f"{len(held)} unit(s) were left to the process holding them: run the "
                      "same backfill again once it has finished (verified units are skipped)")
    if result.refusal:
        console.print(f"[red]refused[/red]: {shown(result.refusal)}")
