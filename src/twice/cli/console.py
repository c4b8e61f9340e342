"""The one place the CLI makes its Rich consoles and echoes text, so every command prints
alike, and nothing printed can drive the operator's terminal.

Whatever a command prints goes through :func:`twice.core.inert.inert` (a console's strings and
table cells, and :func:`echo`): an escape sequence or bidirectional override in an error
message, a note or a job id is shown as its escape, never executed by the terminal. Fields that
must stay on one line (an error in a timeline) are made inert, newlines included, where they
are formatted.

On a terminal, Rich fits the terminal's width. Piped or redirected (a log file, ``grep``, a CI
job), nothing is wrapped: Rich's default of 80 columns would cut a message, a path or a unit of
work id mid-word, which breaks copy-paste and line-oriented tools. ``$COLUMNS`` still wins.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

from twice.core.inert import inert

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

PIPED_WIDTH = 1_000  # wide enough that no line of ours is wrapped; tables still fit content


def make_console(*, stderr: bool = False, file: IO[str] | None = None,
                 highlight: bool = False) -> Console:
    """A console on stdout (or stderr, or ``file``) that does not wrap when not a terminal."""
    from rich.console import Console
    from rich.errors import MarkupError

    class InertConsole(Console):
        def render_str(self, text: str, **options: Any) -> Text:
            text = inert(text, lines=True)
            try:
                return super().render_str(text, **options)
            except MarkupError:  # a bracket in text from outside twice: print it as it is
                return super().render_str(text, **{**options, "markup": False})

        def on_broken_pipe(self) -> None:
            # Rich exits 1 here; the command decides (twice.cli.exits.output_lost: 0, or the
            # code the work earned), so the error goes on, and this console writes no more
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    isatty = getattr(stream, "isatty", None)
    piped = not (callable(isatty) and isatty())
    unwrapped = piped and not os.environ.get("COLUMNS")
    return InertConsole(file=stream, width=PIPED_WIDTH if unwrapped else None,
                        soft_wrap=unwrapped, highlight=highlight)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of ``text`` made inert (tabs and newlines kept)."""
    import click

    click.echo(inert(text, lines=True), err=err, nl=nl)


def shown(text: object) -> str:
    """Text from outside twice (an error, a job id, a name, a URL) placed in Rich markup: inert
    and on one line, its brackets escaped, so it is printed as written and cannot style, link
    or break the line around it."""
    from rich.markup import escape

    return escape(inert(str(text)))


#: A table's job id column (ids of 60 characters and more, never broken) is shown from this
#: width up; narrower, the table says where the job ids are instead.
WIDE = 140


def unit_prefixes(ids: list[str]) -> dict[str, str]:
    """The shortest prefix of each unit of work id that no other id in ``ids`` starts with,
    and at least ``PIPELINE.TASK.YYYYMMDD`` (readable; every command taking a UOW_ID accepts a
    unique prefix, ``twice.cli.ledger_decide.unit_id``)."""
    known = sorted(set(ids))

    def common(a: str, b: str) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    prefixes: dict[str, str] = {}
    for n, uow_id in enumerate(known):
        parts = uow_id.split(".")
        least = (len(".".join(parts[:2])) + 1 + min(8, len(parts[2])) if len(parts) >= 3
                 else len(uow_id))
        shared = max([common(uow_id, known[m]) for m in (n - 1, n + 1) if 0 <= m < len(known)]
                     or [0])
        prefixes[uow_id] = uow_id[:max(least, shared + 1)]
    return prefixes


def last_width(prefixes: Iterable[str], width: int, *, others: int, least: int = 20) -> int:
    """The most a table's last (wrapping) column may take so that its unit column keeps its
    longest prefix on one line: ``width`` less that prefix and what the other columns need at
    least (``others``, their padding included), and never under ``least``. (Rich widens a
    table past the console for a column's ``min_width``, and cuts it; a bounded last column
    leaves the unit column its width instead, or Rich folds both proportionally.)"""
    longest = max((len(prefix) for prefix in prefixes), default=12)
    return max(least, width - others - longest)


def unit_cell(prefix: str, fits: bool) -> str:
    """A table's unit cell (markup-safe): the prefix on one line when the column ``fits`` it,
    else one line per dot-separated part (``pipeline.``, ``task.``, ``day``), so a narrow
    column breaks the id where it has parts, never inside a task's name (Rich folds a part
    only when the part alone is wider than the column)."""
    if fits:
        return shown(prefix)
    parts = prefix.split(".")
    return "\n".join(shown(part + ("." if n < len(parts) - 1 else ""))
                      for n, part in enumerate(parts))


def unit_column(table: Any, prefixes: Iterable[str], width: int, *, others: int,
                least: int = 20) -> bool:
    """Add a table's unit column, never wrapped when every prefix fits it on one line
    (:func:`unit_fits`, returned: what :func:`unit_cell` takes), else folded."""
    fits = unit_fits(prefixes, width, others=others, least=least)
    table.add_column("unit", overflow="fold", no_wrap=fits)
    return fits


def unit_fits(prefixes: Iterable[str], width: int, *, others: int, least: int = 20) -> bool:
    """Whether a table's unit column can keep every prefix on one line (then it is never
    folded: Rich would otherwise shrink it with the other wrapping columns)."""
    longest = max((len(prefix) for prefix in prefixes), default=12)
    return width - others - longest >= least
