"""One error root for twice: every error twice raises on purpose is a ``TwiceError``.

Subclasses say what kind of trouble it is, so callers (and the CLI, which maps them to exit
codes in one place) branch on types, never on message text:

- ``InputError``: what was asked is invalid (also a ``ValueError``); nothing was done.
- ``ConflictError``: someone else holds or has changed what we wanted to write (or read:
  ``InputsChangedError``).
- ``UnavailableError``: a service (ledger, destination, remote API) could not be reached.
- ``DestinationError``: a destination cannot be opened, read or written as asked (also a
  ``ValueError``); ``twice.destinations.errors`` holds its kinds.
- ``OutcomeUnknownError``: an attempt's effect may or may not have happened; never retried
  blindly.
- ``Interrupted``: the operator interrupted a run; what was started is recorded.
- ``MissingExtraError``: an integration's optional package is not installed (``pip install
  'twice[EXTRA]'``); nothing was done.
"""

from __future__ import annotations


class TwiceError(Exception):
    """The root of every error twice raises on purpose."""


class InputError(TwiceError, ValueError):
    """Invalid input (a definition, an option, a file); the message names the field."""


class ConflictError(TwiceError):
    """A lease, fencing token or commit record says another writer owns this now."""


class UnavailableError(TwiceError):
    """A service could not be reached or written (after the retries it allows)."""


class Interrupted(TwiceError):
    """The run was interrupted (KeyboardInterrupt in task code or at the prompt); the attempt
    in flight is recorded ``unknown`` and is settled from its commit record next time."""


class DestinationError(TwiceError, ValueError):
    """A destination cannot be opened, read or written as asked; nothing was changed."""


class DestinationSpecError(DestinationError):
    """A destination spec is malformed (an unknown option, an unsafe or missing table name):
    bad input, found before anything was opened or written."""


class OutcomeUnknownError(TwiceError):
    """The work may or may not have happened: a lost acknowledgement, a connection cut after the
    request was sent, a timeout. Raise it from a task that cannot tell.

    The executor records the attempt ``unknown`` and never retries it blindly, whatever the
    policy lists as transient: it settles it first (the commit record, then the task's
    ``reconcile(job_id, ctx)`` for the same job id). ``twice.remote``'s lost-acknowledgement and
    response-timeout errors are kinds of it.
    """

    outcome = "unknown"  # read by twice.engine.attempt.is_unknown


class InputsChangedError(ConflictError):
    """An upstream's slice was rewritten after this attempt began: what the task read, or is
    about to land, is not the version its unit was identified on (``twice.engine.inputs``).
    Nothing landed; the unit is superseded by the one keyed by what the upstream holds now."""


class MissingExtraError(TwiceError):
    """An integration's optional package is not installed: the core install (``pip install
    twice``) carries only the embedded default, each integration is an extra. Raised by
    ``twice.core.extras.require`` before anything is done; the message names the extra and the
    command that installs it."""

    def __init__(self, message: str, *, module: str, extra: str | None) -> None:
        super().__init__(message)
        self.module = module
        self.extra = extra
