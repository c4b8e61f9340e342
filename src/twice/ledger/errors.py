"""Exceptions raised by the ledger.

They subclass ``ValueError`` because almost every failure is bad input (a malformed URL, an
unknown unit of work, a future observation time); callers catch ``LedgerError`` for all of them.
"""

from __future__ import annotations


class LedgerError(ValueError):
    """The ledger refused an operation; the message says which record and why."""


class SchemaVersionError(LedgerError):
    """The database was written by a newer twice: reading it with older code could corrupt it."""


class UnknownUnitError(LedgerError):
    """A record refers to a unit of work that was never recorded with ``record_unit``."""
