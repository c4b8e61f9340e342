"""Output verification: a unit's destination slice fingerprinted, recorded and compared.

One rule for every driver (DESIGN.md, "verification is one rule"): before an attempt counts as
succeeded, its acceptance criteria pass and the slice it wrote is fingerprinted and recorded as
the next version of that partition, compared with the previous version. The fingerprint comes
from the write's commit record (taken inside the write transaction) when twice owned the write,
else from the destination right after the attempt. A schema that differs from the previous
version's is refused unless the change was accepted (a backfill across a schema change applies
it to every interval of the range).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twice.errors import TwiceError
from twice.interval import Interval

if TYPE_CHECKING:
    from twice.destinations.base import Destination
    from twice.destinations.columns import Schema
    from twice.destinations.commits import CommitRecord
    from twice.fingerprint import Fingerprint
    from twice.ledger import Ledger
    from twice.pipeline import Task


class SchemaChangeError(TwiceError):
    """A destination's schema differs from its previous version's and the change was not
    accepted."""


def partition_key(interval: Interval) -> str:
    """The ledger's partition name for an interval's slice (stable, ``START/END``)."""
    return interval.label


def schema_signature(schema: Schema | None) -> str:
    """Order-sensitive text of a destination's columns and types, stored with fingerprints."""
    if schema is None:
        return ""
    return ", ".join(f"{name} {ctype}" for name, ctype in schema.items())


def slice_of(dest: Destination, interval: Interval) -> Interval | None:
    """What a unit's output is in ``dest``: the interval's slice, or every row of an
    unpartitioned destination."""
    return interval if dest.partition_column else None


@dataclass(frozen=True)
class PartitionDiff:
    """One partition's new fingerprint against its previous recorded version."""

    task: str
    destination: str
    partition: str
    version: int
    rows_before: int | None
    rows_after: int
    checksum_before: str | None
    checksum_after: str
    schema_changed: bool | None
    source: str = "fingerprinted after the attempt"

    @property
    def checksum_changed(self) -> bool | None:
        return None if self.checksum_before is None else self.checksum_before != self.checksum_after

    @property
    def verdict(self) -> str:
        if self.rows_before is None:
            return "new"
        if self.schema_changed:
            return "schema changed"
        if self.checksum_changed or self.rows_before != self.rows_after:
            return "changed"
        return "unchanged"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task, "destination": self.destination, "partition": self.partition,
            "version": self.version, "rows_before": self.rows_before,
            "rows_after": self.rows_after, "checksum_before": self.checksum_before,
            "checksum_after": self.checksum_after, "checksum_changed": self.checksum_changed,
            "schema_changed": self.schema_changed, "verdict": self.verdict,
            "source": self.source,
        }


def current_fingerprint(spec: str, interval: Interval,
                        columns: Sequence[str] | None = None) -> Fingerprint | None:
    """The slice's fingerprint now, or None when the table does not exist yet."""
    from twice.destinations import open_destination
    from twice.fingerprint import fingerprint

    dest = open_destination(spec)
    try:
        if dest.schema() is None:
            return None
        return fingerprint(dest, slice_of(dest, interval), list(columns) if columns else None)
    finally:
        dest.close()


def record_partition(ledger: Ledger, task: Task, uow_id: str, attempt: int | None,
                     interval: Interval, *, accept_schema_change: bool = False,
                     commit: CommitRecord | None = None) -> PartitionDiff:
    """Fingerprint the slice ``task`` wrote for ``interval``, record it, return the diff.

    ``commit`` is the write's commit record: its fingerprint (taken inside the write
    transaction) is used when it covers the same slice, so nothing is scanned twice. Raises
    :class:`SchemaChangeError` (recording nothing) when the schema signature differs from the
    previous version's and the change was not accepted.
    """
    from twice.destinations import open_destination
    from twice.fingerprint import Fingerprint, fingerprint

    partition = partition_key(interval)
    before = ledger.latest_fingerprint(task.destination, partition)
    dest = open_destination(task.destination)
    try:
        signature = schema_signature(dest.schema())
        whole = dest.partition_column is None
        if commit is not None and commit.algorithm != "none" and (
            (commit.slice == "all rows") == whole
        ):
            current = Fingerprint(commit.row_count, commit.checksum, tuple(commit.columns),
                                  commit.algorithm)
            source = "commit record"
        else:
            current = fingerprint(dest, slice_of(dest, interval))
            source = "fingerprinted after the attempt"
    finally:
        dest.close()
    schema_changed = None
    if before is not None and before.schema is not None:
        schema_changed = before.schema != signature
        if schema_changed and not accept_schema_change:
            raise SchemaChangeError(
                f"{task.destination} partition {partition}: schema changed from "
                f"[{before.schema}] to [{signature}]; a change of schema must be applied to "
                "every interval of the range (--accept-schema-change)"
            )
    record = ledger.record_fingerprint(
        task.destination, partition, current.row_count, current.checksum, uow_id=uow_id,
        attempt=attempt, columns=current.columns, algorithm=current.algorithm, schema=signature,
    )
    return PartitionDiff(
        task=task.name, destination=task.destination, partition=partition,
        version=record.version,
        rows_before=None if before is None else before.row_count, rows_after=current.row_count,
        checksum_before=None if before is None else before.checksum,
        checksum_after=current.checksum, schema_changed=schema_changed, source=source,
    )
