"""One error family for everything a destination refuses, so callers (the CLI, the executor)
can tell "bad input or bad destination, nothing was written" from a bug with one ``except``.

Every subclass is also a ``ValueError``; every message names the field or column at fault.
"""

from __future__ import annotations

# the family root lives in twice.errors, beside its siblings
from twice.errors import DestinationError as DestinationError
from twice.errors import DestinationSpecError as DestinationSpecError


class DestinationUnavailableError(DestinationError):
    """The engine could not be reached (connection refused, file locked, missing table)."""
