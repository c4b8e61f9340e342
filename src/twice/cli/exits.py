"""Exit codes, decided in one place from the type of the error (never from its message).

:data:`EXIT_CODES` lists them (every command's ``--help`` shows that list):

- 0: done (also when the reader of standard output went away, ``| head``: see
  :func:`output_lost`); 1: the work did not all succeed, or a service failed (a ledger or
  destination that is unreachable, locked past waiting, on a full disk or damaged);
- 2: bad input (an option, a file, a definition; a ``--ledger`` that names no usable ledger:
  another file, a directory, a malformed or in-memory URL), or an integration whose extra is
  not installed
  (``MissingExtraError``: the message names ``pip install 'twice[EXTRA]'``); nothing was done;
- 3: a conflict (another holder owns it now, a newer writer committed);
- 130: interrupted (Ctrl-C), what was started is recorded.

Every error line has one form, ``twice COMMAND: error: MESSAGE`` (:func:`error_line`), for
twice's own errors and Click's usage errors alike.

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

#: code -> what it means; the one list every command's ``--help`` shows (:func:`help_section`)
EXIT_CODES: dict[int, str] = {
    OK: "done (also when the reader of the output went away, e.g. | head)",
    FAILED: "the work did not all succeed, or a service (ledger, destination) failed",
    BAD_INPUT: "bad input (an option, a file, a definition) or a missing extra: nothing was done",
    CONFLICT: "a conflict: another holder owns it now, or a newer writer committed",
    INTERRUPTED: "interrupted (Ctrl-C); what was started is recorded",
}


def help_section() -> str:
    """The "Exit codes" paragraph of a command's ``--help`` (Click keeps its lines as they
    are after the ``\\b`` marker)."""
    lines = [f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items()]
    return "\b\nExit codes:\n" + "\n".join(lines)


def error_line(prefix: str, text: str) -> str:
    """``PREFIX: error: TEXT``, the one form of an error line; a message's own lines stay
    indented under its first, so text from outside twice in it (a pipeline file's import
    error, say) cannot pass for a line of its own."""
    return f"{prefix}: error: " + "\n  ".join(text.splitlines() or [text])


def command_prefix(given: str | None = None) -> str:
    """The name an error line starts with: ``given`` when it is a twice command's name
    (``twice run``), else the Click command path being run, its root spelled ``twice``."""
    if given and given.startswith("twice"):
        return given
    import click

    ctx = click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    names.reverse()
    return " ".join(["twice", *[name for name in names[1:] if name]])

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


def fail(error: TwiceError | KeyboardInterrupt, prefix: str | None = None) -> NoReturn:
    """End the command for ``error``: ``twice COMMAND: error: message`` on stderr (no
    traceback; :func:`command_prefix` of ``prefix``) and the exit code of the error's type."""
    text = str(error) or type(error).__name__
    echo(error_line(command_prefix(prefix), text), err=True)
    raise SystemExit(exit_code_for(error))


def click_failed(error: BaseException, prefix: str, usage: str | None = None) -> NoReturn:
    """End the command for an error Click raised (a usage error, an aborted prompt): ``usage``
    (Click's usage lines and hint) if given, then the error line; Click's exit code (2 for a
    usage error), 1 for an aborted prompt."""
    import click

    if usage:
        echo(usage, err=True)
    if isinstance(error, click.ClickException):
        echo(error_line(prefix, error.format_message()), err=True)
        raise SystemExit(error.exit_code)
    echo(error_line(prefix, "aborted"), err=True)
    raise SystemExit(FAILED)


def returned(value: object) -> NoReturn:
    """End a command that returned ``value`` without raising: its code if Click handed one
    back (``--help``, ``--version``: 0), else 0."""
    raise SystemExit(value if isinstance(value, int) and not isinstance(value, bool) else OK)


def finish(ok: bool) -> NoReturn:
    """End a command whose work ran: 0 if all of it succeeded, else 1."""
    raise SystemExit(OK if ok else FAILED)


def exit_on_error(prefix: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a command's callback: a ``TwiceError`` (or Ctrl-C) it raises ends the command
    through :func:`fail`; ``prefix``: the command's name (``twice run``; otherwise the Click
    command path is used)."""

    def decorate(callback: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(callback)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return callback(*args, **kwargs)
            except (TwiceError, KeyboardInterrupt) as exc:
                fail(exc, prefix)

        return wrapper

    return decorate


def output_lost(error: OSError, prefix: str | None = None, *, code: int = OK) -> NoReturn:
    """Standard output could not be written. A closed pipe (``twice status | head -1``): the
    reader chose to stop reading, which is not a failure of the command, so it ends quietly
    with ``code`` (0, or the code the work earned: see ``pipeline_run.show_and_finish``); 141
    (killed by SIGPIPE, as C tools end) would fail every ``set -o pipefail`` script that pipes
    a status into ``head``. A full disk or an I/O error is said on stderr, once, and exits 1.
    What the command recorded stands either way. Standard output is pointed at /dev/null so
    the interpreter's last flush cannot fail again ("Exception ignored ...")."""
    import contextlib
    import errno
    import os
    import sys

    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if error.errno == errno.EPIPE:  # a reader that went away needs no message
        raise SystemExit(code)
    with contextlib.suppress(OSError):
        sys.stderr.write(error_line(command_prefix(prefix),
                                    f"cannot write the output: {error.strerror}") + "\n")
    raise SystemExit(FAILED)
