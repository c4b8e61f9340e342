"""The one place the CLI makes its Rich consoles, so every command prints alike.

On a terminal, Rich fits the terminal's width. Piped or redirected (a log file, ``grep``, a CI
job), nothing is wrapped: Rich's default of 80 columns would cut a message, a path or a unit of
work id mid-word, which breaks copy-paste and line-oriented tools. ``$COLUMNS`` still wins.
"""

from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 1_000  # wide enough that no line of ours is wrapped; tables still fit content


def make_console(*, stderr: bool = False, file: IO[str] | None = None,
                 highlight: bool = False) -> Console:
    """A console on stdout (or stderr, or ``file``) that does not wrap when not a terminal."""
    from rich.console import Console

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    isatty = getattr(stream, "isatty", None)
    piped = not (callable(isatty) and isatty())
    width = PIPED_WIDTH if piped and not os.environ.get("COLUMNS") else None
    return Console(file=stream, width=width, soft_wrap=piped, highlight=highlight)
