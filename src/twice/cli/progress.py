"""Live progress of ``twice run`` and ``twice worker`` while units of work run.

On a terminal: a Rich progress bar (units ended of units asked for, attempts running, units
not succeeded, elapsed time) with a line above it for each unit that ended without success, as
``twice backfill`` shows intervals. Not on a terminal (a log file, CI, a pipe): one plain line
per unit as it ends, ``INTERVAL TASK OUTCOME attempts N uow UOW_ID[: last error]``, so a tail of
the output shows where the run is. ``--json`` shows neither: standard output is the one JSON
object. The progress listens to the engine's events (``twice.engine.events``) on the engine's
threads; units the engine never drove (blocked by a dependency) are shown when the run hands
its result back (:meth:`UnitProgress.rest`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from twice.core.interval import Interval
    from twice.engine.events import Event


def unit_line(interval: Interval, task: str, outcome: str, result: Any,
              uow_id: str | None) -> str:
    """The plain line of a unit that ended (``result``: its ``UnitResult``, or None)."""
    from twice.core.inert import inert

    attempts = "?" if result is None or result.ledger_failed else str(result.attempts)
    line = f"{interval.short} {task} {outcome} attempts {attempts} uow {uow_id or '-'}"
    error = None if result is None or outcome == "succeeded" else result.error
    return inert(line + (f": {error}" if error else ""))


class UnitProgress:
    """A listener for the engine's events that shows units ending (see the module docstring);
    with ``console`` None it shows nothing."""

    def __init__(self, console: Console | None, progress: Progress | None = None,
                 bar: TaskID | None = None) -> None:
        self.console = console
        self.progress = progress
        self.bar = bar
        self._lock = threading.Lock()
        self._seen: set[tuple[str, Interval]] = set()
        self._running = 0
        self._failed = 0

    def __call__(self, event: Event) -> None:
        if self.console is None:
            return
        from twice.engine.events import AttemptFinished, AttemptStarted, UnitSettled

        with self._lock:
            if isinstance(event, AttemptStarted):
                self._running += 1
            elif isinstance(event, AttemptFinished):
                self._running = max(0, self._running - 1)
            elif isinstance(event, UnitSettled):
                self._seen.add((event.task, event.interval))
                self._ended(event.interval, event.task, event.outcome, event.result,
                            event.uow_id)
            self._update()

    def rest(self, units: Iterable[Any]) -> None:
        """Show the units of a finished run that no event announced (``UnitResult`` each)."""
        if self.console is None:
            return
        with self._lock:
            for unit in units:
                if (unit.task, unit.interval) not in self._seen:
                    self._seen.add((unit.task, unit.interval))
                    self._ended(unit.interval, unit.task, unit.outcome, unit, unit.uow_id)
            self._update()

    def elsewhere(self, count: int) -> None:
        """Count ``count`` units another process settled (a worker's) as ended, silently."""
        if self.progress is not None and self.bar is not None and count:
            self.progress.advance(self.bar, count)

    def _ended(self, interval: Interval, task: str, outcome: str, result: Any,
               uow_id: str | None) -> None:
        assert self.console is not None
        line = unit_line(interval, task, outcome, result, uow_id)
        if outcome != "succeeded":
            self._failed += 1
        if self.progress is None:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
            self.console.file.flush()
            return
        if outcome != "succeeded":
            self.progress.console.print(line, markup=False, highlight=False)
        assert self.bar is not None
        self.progress.advance(self.bar)

    def _update(self) -> None:
        if self.progress is not None and self.bar is not None:
            self.progress.update(self.bar, running=self._running, failed=self._failed)


@contextmanager
def unit_progress(total: int, *, verb: str = "run", enabled: bool = True,
                  console: Console | None = None,
                  file: IO[str] | None = None) -> Iterator[UnitProgress]:
    """The progress of ``total`` units (``enabled`` False: shows nothing). ``console``: the
    Rich console to draw on (default: standard output's, or ``file``'s); whether it is a
    terminal decides bar or lines."""
    if not enabled:
        yield UnitProgress(None)
        return
    from twice.cli.console import make_console

    console = console or make_console(file=file)
    if not console.is_terminal:
        yield UnitProgress(console)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn(f"twice {verb}: units"), BarColumn(bar_width=30),
                  MofNCompleteColumn(),
                  TextColumn("running {task.fields[running]}  not succeeded "
                             "{task.fields[failed]}"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        bar = progress.add_task(verb, total=total or None, running=0, failed=0)
        yield UnitProgress(console, progress, bar)
