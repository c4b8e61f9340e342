"""Exit codes, decided in one place from the type of the error (never from its message).

- 0: done; 1: the work did not all succeed, or a service failed (ledger, destination);
- 2: bad input (an option, a file, a definition), or an integration whose extra is not installed
  (``MissingExtraError``: the message names ``pip install 'twice[EXTRA]'``); nothing was done;
- 3: a conflict (another holder owns it now, a newer writer committed);
- 130: interrupted (Ctrl-C), what was started is recorded.

Commands never name a code: they raise a typed error (``InputError`` naming the option or file,
``UnavailableError`` for a service that failed, ...) from a callback wrapped in
:func:`exit_on_error`, and end with :func:`finish` once the work is done. ``twice decide`` keeps
the lab program's own codes (``twice.interop.lab``), which these match.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

from twice.cli.console import echo
from twice.errors import (
    ConflictError,
    InputError,
    Interrupted,
    MissingExtraError,
    TwiceError,
    UnavailableError,
)

OK = 0
FAILED = 1
BAD_INPUT = 2
CONFLICT = 3
INTERRUPTED = 130

P = ParamSpec("P")
R = TypeVar("R")


def exit_code_for(error: BaseException) -> int:
    """The exit code for an error that ended a command."""
    if isinstance(error, Interrupted | KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(error, ConflictError):
        return CONFLICT
    if isinstance(error, MissingExtraError):
        return BAD_INPUT  # the install lacks an extra: nothing was done, the message says what
    if isinstance(error, UnavailableError):
        return FAILED
    if isinstance(error, InputError | ValueError) and isinstance(error, TwiceError):
        from twice.ledger.errors import LedgerStorageError, LedgerUnavailableError

        if isinstance(error, LedgerStorageError | LedgerUnavailableError):
            return FAILED  # the storage failed, the input was fine
        return BAD_INPUT
    return FAILED


def fail(error: TwiceError | KeyboardInterrupt, prefix: str) -> NoReturn:
    """End the command for ``error``: ``prefix: message`` on stderr (no traceback) and the exit
    code of the error's type."""
    text = str(error) or type(error).__name__
    # a message's own lines stay indented under its first: text from outside twice in it
    # (a pipeline file's import error, say) cannot pass for a line of its own
    echo(f"{prefix}: " + "\n  ".join(text.splitlines() or [text]), err=True)
    raise SystemExit(exit_code_for(error))


def finish(ok: bool) -> NoReturn:
    """End a command whose work ran: 0 if all of it succeeded, else 1."""
    raise SystemExit(OK if ok else FAILED)


def exit_on_error(prefix: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a command's callback: a ``TwiceError`` (or Ctrl-C) it raises ends the command
    through :func:`fail` with ``prefix`` (``twice run``, ``error``, ...)."""

    def decorate(callback: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(callback)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return callback(*args, **kwargs)
            except (TwiceError, KeyboardInterrupt) as exc:
                fail(exc, prefix)

        return wrapper

    return decorate


def output_lost(error: OSError, prefix: str) -> NoReturn:
    """Standard output could not be written (a full disk, a closed pipe such as ``| head``):
    say so on stderr, once, and exit 1; what the command recorded stands. Standard output is
    pointed at /dev/null so the interpreter's last flush cannot fail again."""
    import contextlib
    import errno
    import os
    import sys

    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if error.errno != errno.EPIPE:  # a reader that went away needs no message
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{prefix}: cannot write the output: {error.strerror}\n")
    raise SystemExit(FAILED)
