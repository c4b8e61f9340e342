"""One error family for everything a destination refuses, so callers (the CLI, the executor)
can tell "bad input or bad destination, nothing was written" from a bug with one ``except``.

Every subclass is also a ``ValueError``; every message names the field or column at fault.
"""

from __future__ import annotations

from twice.errors import TwiceError


class DestinationError(TwiceError, ValueError):
    """A destination cannot be opened, read or written as asked; nothing was changed."""


class DestinationUnavailableError(DestinationError):
    """The engine could not be reached (connection refused, file locked, missing table)."""
