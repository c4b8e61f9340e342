"""Exit codes, decided in one place from the type of the error (never from its message).

- 0: done; 1: the work did not all succeed, or a service failed (ledger, destination);
- 2: bad input (an option, a file, a definition), nothing was done;
- 3: a conflict (another holder owns it now, a newer writer committed);
- 130: interrupted (Ctrl-C), what was started is recorded.
"""

from __future__ import annotations

from twice.errors import ConflictError, InputError, Interrupted, TwiceError, UnavailableError

OK = 0
FAILED = 1
BAD_INPUT = 2
CONFLICT = 3
INTERRUPTED = 130


def exit_code_for(error: BaseException) -> int:
    """The exit code for an error that ended a command."""
    if isinstance(error, Interrupted | KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(error, ConflictError):
        return CONFLICT
    if isinstance(error, UnavailableError):
        return FAILED
    if isinstance(error, InputError | ValueError) and isinstance(error, TwiceError):
        from twice.ledger.errors import LedgerStorageError, LedgerUnavailableError

        if isinstance(error, LedgerStorageError | LedgerUnavailableError):
            return FAILED  # the storage failed, the input was fine
        return BAD_INPUT
    return FAILED
