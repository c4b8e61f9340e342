"""What the embedded SQL engines share: a database file opened inside this process.

SQLite and DuckDB run in the writer's own process over one local file. Their destinations
share how that file is opened (:class:`DestinationUnavailableError` when it cannot be), that
looking at a destination never creates an empty database file, and the transaction: one
``BEGIN`` statement (the engine's own), ``COMMIT`` on normal exit, ``ROLLBACK`` on any
exception. Each engine's module keeps what differs: its dialect, how it lists tables and
columns, and its bulk insert.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from twice.destinations.base import DestinationSpec, SqlDestination
from twice.destinations.columns import Schema
from twice.destinations.commits import COMMITS_TABLE
from twice.destinations.errors import (
    DestinationCommitUnknownError,
    DestinationSpecError,
    DestinationUnavailableError,
    driver_said,
)


class EmbeddedConnection(Protocol):
    """The DB-API surface both embedded engines' connections offer."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...
    def close(self) -> None: ...


EConnT = TypeVar("EConnT", bound=EmbeddedConnection)


class EmbeddedSqlDestination(SqlDestination[EConnT]):
    """A table in a database file that this process opens itself (``self.path``)."""

    # The statement that opens a write transaction (SQLite: BEGIN IMMEDIATE, see sqlite.py).
    begin_sql: ClassVar[str] = "BEGIN TRANSACTION"
    # What the engine's connect() raises when the file cannot be opened.
    open_errors: ClassVar[tuple[type[Exception], ...]]
    #: The driver's errors that say the engine's machinery failed (a lock held too long, a
    #: full disk, an I/O error), made ``DestinationUnavailableError`` by ``_machinery``.
    machinery_errors: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(self, path: str, *, spec: str, table: str, **kwargs: Any) -> None:
        super().__init__(spec=spec, table=table, **kwargs)
        self.path = path

    # -- what each engine supplies ----------------------------------------------------------

    @abstractmethod
    def _open(self) -> EConnT:
        """Open the database file, and register twice's functions on the connection."""

    @abstractmethod
    def _has_table(self, name: str) -> bool:
        """Whether table ``name`` exists in the destination table's schema."""

    @abstractmethod
    def _read_schema(self) -> Schema | None:
        """Column name -> type of the existing table, or None if it does not exist."""

    # -- shared -----------------------------------------------------------------------------

    def _connect(self) -> EConnT:
        try:
            return self._open()
        except self.open_errors as exc:
            raise DestinationUnavailableError(
                f"{self.spec}: cannot open {self.path}: {exc}"
            ) from None

    def _no_file_yet(self) -> bool:
        """True while nothing is open and the file does not exist: a look must not create it."""
        return self._conn is None and not os.path.exists(self.path)

    def schema(self) -> Schema | None:
        if self._no_file_yet():
            return None
        with self._machinery("reading the table's columns"):
            return self._read_schema()

    def _table_exists(self, name: str) -> bool:
        if self._no_file_yet():
            return False
        with self._machinery("looking for a table"):
            return self._has_table(name)

    def _commits_table_exists(self) -> bool:
        return self._table_exists(COMMITS_TABLE)

    @contextmanager
    def _machinery(self, what: str) -> Iterator[None]:
        """A driver error that says the engine's machinery failed (``machinery_errors``)
        becomes ``DestinationUnavailableError`` naming the destination, what twice was doing
        and the driver's own words ("database is locked", "database or disk is full")."""
        try:
            yield
        except self.machinery_errors as exc:
            raise DestinationUnavailableError(
                f"{self.spec}: {what}: {driver_said(exc)}") from exc

    @contextmanager
    def _transaction(self) -> Iterator[EConnT]:
        conn = self.connection
        with self._machinery("starting a write"):
            conn.execute(self.begin_sql)
        try:
            yield conn
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except self.open_errors:
                pass  # the engine rolled back already (SQLite does on a full disk, I/O error)
            if isinstance(exc, self.machinery_errors):
                with self._machinery("writing"):
                    raise
            raise
        finally:
            self._schema_in_write = None  # read under this transaction's lock: its own
        try:
            conn.execute("COMMIT")
        except Exception as exc:  # an I/O error while committing: it may have landed
            raise DestinationCommitUnknownError.of(
                self.spec, "committing the write failed", exc) from exc

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._machinery("reading"):
            rows: list[tuple[Any, ...]] = self.connection.execute(sql, list(params)).fetchall()
        return rows


def database_file(spec: DestinationSpec) -> Path:
    """The absolute path of an embedded engine's database file, in an existing directory
    (the engine creates the file; twice takes no engine options for these)."""
    if spec.options:
        raise DestinationSpecError(
            f"{spec.scheme} destination: unknown options {sorted(spec.options)}")
    path = Path(spec.file_path()).expanduser().absolute()
    if not path.parent.is_dir():
        raise DestinationUnavailableError(
            f"{spec.scheme} destination: directory {path.parent} missing"
        )
    return path
