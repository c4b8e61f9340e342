"""Landing: an owned write about to commit, the one moment a rejected output can still be stopped.

Every destination builds an owned write's commit record before the write commits: the
slice's fingerprint as the write will leave it (on SQLite, DuckDB and PostgreSQL read inside
the write transaction, which sees the uncommitted rows; on Parquet, Delta and Iceberg summed
from the staged rows and the rows the slice keeps). Right there, with nothing committed, the
destination calls :func:`admit` with a :class:`Landing`: the slice as it will be. The attempt
making the write installs its admission with :func:`admitting` (``twice.engine.owned_write``:
the task's acceptance criteria); an admission that raises refuses the write, and the
destination rolls its transaction back or swaps nothing in, so the slice, its commit records
and the ledger's recorded version stay as they were.

Outside an attempt no admission is active and :func:`admit` does nothing. An unstamped write
(``stamp=None``) is not owned and builds no record, so it is not admitted either; nor is a
stamped append that finds itself already committed (it writes nothing). Spark commits its data
before its record (see ``twice.destinations.commits``): it admits a static replace from the
incoming rows before its job runs, and nothing else. A refused first write leaves no table on
the SQL engines (the CREATE TABLE rolls back with it), Parquet and Delta; Iceberg creates the
empty table before it stages a write, and keeps it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from twice.destinations.errors import DestinationError

if TYPE_CHECKING:
    import pyarrow as pa

NullCounts: TypeAlias = Callable[[Sequence[str]], dict[str, int]]


@dataclass(frozen=True)
class Landing:
    """An owned write's slice as it will be if the write commits.

    ``destination``: the destination's spec; ``slice``: the slice label (``all rows`` when
    unpartitioned); ``mode``: replace, upsert or append; ``rows_written``: the write's own
    rows; ``rows``: the slice's rows after the write (the commit record's ``row_count``).
    """

    destination: str
    slice: str
    mode: str
    rows_written: int
    rows: int
    nulls: NullCounts = field(repr=False, compare=False)

    def null_counts(self, columns: Sequence[str]) -> dict[str, int]:
        """Nulls per column in the slice as it will be (read inside the write)."""
        return self.nulls(columns) if columns else {}


Admission: TypeAlias = Callable[[Landing], None]

_ADMISSION: contextvars.ContextVar[Admission | None] = contextvars.ContextVar(
    "twice_admission", default=None
)


@contextmanager
def admitting(admission: Admission | None) -> Iterator[None]:
    """Make ``admission`` decide every owned write made in this context (and restore after)."""
    token = _ADMISSION.set(admission)
    try:
        yield
    finally:
        _ADMISSION.reset(token)


def admit(landing: Landing) -> None:
    """Called by a destination just before an owned write commits: the active admission, if
    any, decides; its exception refuses the write (the destination then commits nothing)."""
    admission = _ADMISSION.get()
    if admission is not None:
        admission(landing)


def arrow_nulls(parts: Callable[[Sequence[str]], Iterable[pa.Table]]) -> NullCounts:
    """Null counts over a slice held as Arrow parts, for the engines that stage their rows as
    Arrow (``parts(columns)``: the rows written and the rows the slice keeps)."""

    def count(columns: Sequence[str]) -> dict[str, int]:
        totals = dict.fromkeys(columns, 0)
        seen: set[str] = set()
        for part in parts(columns):
            for column in columns:
                if column in part.column_names:
                    seen.add(column)
                    totals[column] += part.column(column).null_count
        missing = [column for column in columns if column not in seen]
        if missing:
            raise DestinationError(f"the slice has no column {missing[0]!r}")
        return totals

    return count
