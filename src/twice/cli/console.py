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

import os
import sys
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

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    isatty = getattr(stream, "isatty", None)
    piped = not (callable(isatty) and isatty())
    width = PIPED_WIDTH if piped and not os.environ.get("COLUMNS") else None
    return InertConsole(file=stream, width=width, soft_wrap=piped, highlight=highlight)


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
