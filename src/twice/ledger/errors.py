"""Exceptions raised by the ledger.

They subclass ``ValueError`` because almost every failure is bad input (a malformed URL, an
unknown unit of work, a future observation time); callers catch ``LedgerError`` for all of them.
Two are about the storage rather than the input, and say what to do about it:
``LedgerUnavailableError`` (the database could not be reached or locked, even after retrying)
and ``LedgerStorageError`` (the disk is full, or the ledger is read-only).
"""

from __future__ import annotations

from twice.errors import TwiceError


class LedgerError(TwiceError, ValueError):
    """The ledger refused an operation; the message says which record and why. ``field``
    names the argument that was refused, when one was (e.g. ``operator``), so a caller can
    name its own option for it without reading the message."""

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class SchemaVersionError(LedgerError):
    """The database was written by a newer twice: reading it with older code could corrupt it."""


class UnknownUnitError(LedgerError):
    """A record refers to a unit of work that was never recorded with ``record_unit``."""


class LedgerUnavailableError(LedgerError):
    """The ledger could not be reached or locked, even after retrying for the retry window.

    ``LedgerCommitUnknownError`` is the one after which the write may have been recorded.
    ``original`` is the driver error.
    """

    def __init__(self, message: str, *, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.original = original


class LedgerCommitUnknownError(LedgerUnavailableError):
    """The connection was lost while a transaction was committing (PostgreSQL): what it wrote
    may or may not be recorded, unlike any other ``LedgerError``, after which nothing was."""


class LedgerStorageError(LedgerError):
    """The ledger's storage refused the write: disk full, read-only file system or file, or an
    I/O error. Retrying does not help; the message names the ledger and what to fix."""

    def __init__(self, message: str, *, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.original = original


class LedgerDamagedError(LedgerStorageError):
    """The ledger lacks a table its schema version has (dropped, a partial restore): refused
    when opened, for reading and writing; restoring a backup is the operator's call."""
