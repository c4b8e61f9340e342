"""``Intermediate``: declare that a task's output is a materialized intermediate.

A task declared ``@pipeline.task(intermediate=Intermediate(owner=..., retention=...), ...)``
writes its returned rows into its own destination (``write="replace"`` of the interval's slice,
as any ``write=`` task), and twice keeps that slice as a catalogued intermediate
(``twice.engine.intermediates``):

* its **version** is a hash of the producing unit of work's identity (pipeline, task,
  interval, input partition and version, transform version, destination), so a changed input
  or transform is a new version, computed anew;
* its **integrity** is the slice's fingerprint taken right after the write; when the unit runs
  again (a forced rerun, a backfill), the stored copy is reused only if its fingerprint still
  matches, and then the task body is NOT run again. A copy changed behind twice's back is
  refused (recorded with both fingerprints) and recomputed, never silently reused;
* its **owner** is who answers for keeping it, and its **retention** how long they keep it:
  past it the copy is recomputed on demand, and ``twice intermediates --expire`` deletes it.

Why the destination is the storage: dependents read it as any upstream output
(``ctx.read_upstream(name)``, pinned to the version they were identified on), and each slice
keeps one writer, so nothing else can replace it unseen. This module only declares; it does no
I/O and imports nothing heavy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from twice.errors import InputError

#: Storage the materialize-or-reuse logic can replace a slice of and fingerprint.
INTERMEDIATE_SCHEMES: tuple[str, ...] = ("sqlite", "duckdb", "postgresql", "parquet")


@dataclass(frozen=True)
class Intermediate:
    """A task's output kept as a versioned, owned, retained, integrity-checked intermediate.

    Pass it as ``@pipeline.task(intermediate=Intermediate(owner="team-funds",
    retention=timedelta(days=7)), destination="duckdb:///wh.duckdb?partition_column=day#t")``.
    The task returns its rows (``write="replace"`` is implied); rerunning the same unit reuses
    the stored slice while its fingerprint matches instead of running the task again, which is
    why an expensive result read by several dependents is worth declaring one.

    - ``owner``: who answers for the stored copy (shown by ``twice intermediates``).
    - ``retention``: how long the copy is kept (at least one second); past it, it is
      recomputed on demand and ``twice intermediates --expire`` deletes it.
    - ``name``: the catalog name (default: the task's name).
    - ``fingerprint_columns``: the columns the integrity fingerprint covers (default: every
      column of a fingerprintable type; floats have no canonical text and are left out, so
      cast them to decimals to have a changed value caught).
    """

    owner: str
    retention: timedelta
    name: str | None = None
    fingerprint_columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.owner, str) or not self.owner.strip() or len(self.owner) > 200:
            raise InputError(
                f"Intermediate owner must be a non-empty string of at most 200 characters, "
                f"got {self.owner!r}"
            )
        retention = self.retention
        if not isinstance(retention, timedelta) or not math.isfinite(retention.total_seconds()) \
                or retention.total_seconds() < 1:
            raise InputError(
                f"Intermediate retention must be a timedelta of at least 1 second, got "
                f"{retention!r}"
            )
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()
                                      or len(self.name) > 200):
            raise InputError(
                f"Intermediate name must be a non-empty string of at most 200 characters or "
                f"None, got {self.name!r}"
            )
        columns = self.fingerprint_columns
        if columns is not None:
            if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns) \
                    or not columns:
                raise InputError(
                    "Intermediate fingerprint_columns must be a non-empty sequence of column "
                    f"names or None, got {columns!r}"
                )
            object.__setattr__(self, "fingerprint_columns", tuple(columns))

    def catalog_name(self, task_name: str) -> str:
        """The name the catalog records: ``name``, else the task's name."""
        return self.name or task_name
