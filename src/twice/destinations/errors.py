"""One error family for everything a destination refuses, so callers (the CLI, the executor)
can tell "bad input or bad destination, nothing was written" from a bug with one ``except``.

Every subclass is also a ``ValueError``; every message names the field or column at fault.
"""

from __future__ import annotations

# the family root lives in twice.errors, beside its siblings
from twice.errors import DestinationError as DestinationError
from twice.errors import DestinationSpecError as DestinationSpecError
from twice.errors import UnavailableError


def driver_said(error: BaseException) -> str:
    """The driver's first message line, passwords masked (a driver may echo the connection
    string it was given): what a destination error quotes of the driver's own words."""
    from twice.core.secrets import redact

    return redact((str(error).strip().splitlines() or [type(error).__name__])[0])


class DestinationUnavailableError(DestinationError, UnavailableError):
    """The engine could not be reached or could not do its part (connection refused, file
    locked, disk full, missing table): a service that failed, not bad input (exit 1)."""


class DestinationCommitUnknownError(DestinationUnavailableError):
    """The write's transaction was sent to commit and no answer came (the connection was lost
    while committing, or the engine failed in its commit): it may or may not have landed. Its
    outcome is unknown (``outcome``, read by ``twice.engine.attempt.is_unknown``), never a
    failure: the commit record written in the same transaction settles it."""

    outcome = "unknown"

    @classmethod
    def of(cls, spec: str, what: str, error: BaseException) -> DestinationCommitUnknownError:
        """The error for ``error`` raised while committing a write to ``spec``; ``what``
        says what happened ("the connection was lost while committing the write"). The
        driver's first line is kept, its passwords masked."""
        return cls(f"{spec}: {what} ({driver_said(error)}): it may or may not have landed; its "
                   "commit record settles it")
