"""Output verification: a unit's destination slice fingerprinted, recorded and compared.

One rule for every driver (DESIGN.md, "verification is one rule"): before an attempt counts as
succeeded, its acceptance criteria pass and the slice it wrote is fingerprinted and recorded as
the next version of that partition, compared with the previous version. The fingerprint comes
from the write's commit record (taken inside the write transaction) when twice owned the write,
else from the destination right after the attempt; it covers every column (``twice-fp-v3``)
and states them. A driver that measures the partition before it writes (a backfill) adds the
*drift*: the partition then against its latest recorded version, i.e. what changed behind
twice's back, which a comparison of recorded versions alone would hide. A schema that differs
from the previous version's is refused unless the change was accepted (a backfill across a
schema change applies it to every interval of the range).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from twice.core.interval import Interval
from twice.define.acceptance import (
    AcceptanceCriteria,
    AcceptanceResult,
    LoadOutcome,
    evaluate,
)
from twice.errors import TwiceError

if TYPE_CHECKING:
    from twice.define.pipeline import Task
    from twice.destinations.base import Destination
    from twice.destinations.columns import Schema
    from twice.destinations.commits import CommitRecord
    from twice.destinations.fingerprint import Fingerprint
    from twice.destinations.landing import Landing
    from twice.destinations.slices import PartitionSpec
    from twice.ledger import Ledger
    from twice.ledger.records import FingerprintRecord


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
    """One partition's new fingerprint against its previous recorded version (the *change*),
    and, when the driver measured it before writing (a backfill does), the partition as it was
    just before the write against that same recorded version (the *drift*: what changed behind
    twice's back).

    ``rows_before``/``checksum_before``: the previous recorded version; ``rows_now``/
    ``checksum_now``: the partition just before this write (None: not measured);
    ``rows_after``/``checksum_after``: what this write recorded. ``definition_changed``: the
    previous version covers other columns (or an unknown algorithm), so the checksums cannot
    be compared (the row counts still can).
    """

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
    columns: tuple[str, ...] = ()
    algorithm: str = ""
    definition_changed: bool = False
    rows_now: int | None = None
    checksum_now: str | None = None
    drifted: bool | None = None
    # keys added/removed/changed by the write, from the table's versions (Delta time travel;
    # twice.destinations.diff.commit_diff), None where the destination cannot say
    keys: dict[str, Any] | None = None

    @property
    def checksum_changed(self) -> bool | None:
        if self.checksum_before is None or self.definition_changed:
            return None
        return self.checksum_before != self.checksum_after

    @property
    def verdict(self) -> str:
        if self.rows_before is None:
            return "new"
        if self.schema_changed:
            return "schema changed"
        if self.checksum_changed or self.rows_before != self.rows_after:
            return "changed"
        if self.definition_changed:
            return "new definition"
        return "unchanged"

    def with_drift(self, drift: Drift | None) -> PartitionDiff:
        """This diff with the partition's state before the write (if measured against the
        version this diff's ``rows_before`` is)."""
        if drift is None or drift.version != self.version - 1:
            return self
        return replace(self, rows_now=drift.rows_now, checksum_now=drift.checksum_now,
                       drifted=drift.drifted)

    def with_keys(self, keys: dict[str, Any] | None) -> PartitionDiff:
        """This diff with the write's key diff (``twice.destinations.diff``), if known."""
        return self if keys is None else replace(self, keys=keys)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task, "destination": self.destination, "partition": self.partition,
            "version": self.version, "rows_before": self.rows_before,
            "rows_after": self.rows_after, "checksum_before": self.checksum_before,
            "checksum_after": self.checksum_after, "checksum_changed": self.checksum_changed,
            "schema_changed": self.schema_changed, "verdict": self.verdict,
            "source": self.source, "columns": list(self.columns), "algorithm": self.algorithm,
            "definition_changed": self.definition_changed, "rows_now": self.rows_now,
            "checksum_now": self.checksum_now, "drifted": self.drifted, "keys": self.keys,
        }


@dataclass(frozen=True)
class Drift:
    """A partition as it is now against its latest recorded fingerprint version, recomputed
    with that version's algorithm and columns: ``drifted`` means it changed behind twice's
    back (rows deleted, added or edited by something that recorded no new version)."""

    destination: str
    partition: str
    version: int
    rows_recorded: int
    checksum_recorded: str
    rows_now: int
    checksum_now: str
    columns: tuple[str, ...]
    algorithm: str
    uow_id: str | None = None  # the unit that recorded the version
    attempt: int | None = None
    measured_at: float = field(default=0.0, compare=False)  # time.monotonic()

    @property
    def drifted(self) -> bool:
        return (self.rows_now, self.checksum_now) != (self.rows_recorded, self.checksum_recorded)

    def describe(self) -> str:
        """``10 -> 8 rows, checksum changed`` (recorded -> now)."""
        checksum = "changed" if self.checksum_now != self.checksum_recorded else "unchanged"
        return f"{self.rows_recorded} -> {self.rows_now} rows, checksum {checksum}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "destination": self.destination, "partition": self.partition,
            "version": self.version, "rows_recorded": self.rows_recorded,
            "checksum_recorded": self.checksum_recorded, "rows_now": self.rows_now,
            "checksum_now": self.checksum_now, "columns": list(self.columns),
            "algorithm": self.algorithm, "drifted": self.drifted,
        }


def as_fingerprint(record: FingerprintRecord) -> Fingerprint:
    """A ledger fingerprint record as the :class:`~twice.destinations.fingerprint.Fingerprint` it
    states (a record without an algorithm predates ``twice-fp-v2``)."""
    from twice.destinations.fingerprint import ALGORITHM_V1, Fingerprint

    return Fingerprint(record.row_count, record.checksum, tuple(record.columns or ()),
                       record.algorithm or ALGORITHM_V1)


def comparable(before: FingerprintRecord, current: Fingerprint) -> bool:
    """Whether two versions' checksums can be compared: same columns, and algorithms whose
    checksums agree (the same one, or ``twice-fp-v1`` and ``-v2``, which agree on every column
    v1 could hold; a ``twice-fp-v3`` checksum is never compared with a v2 one)."""
    from twice.destinations.fingerprint import comparable_algorithms

    return (tuple(before.columns or ()) == current.columns
            and comparable_algorithms(before.algorithm or "", current.algorithm))


def current_fingerprint(spec: str, interval: Interval,
                        columns: Sequence[str] | None = None) -> Fingerprint | None:
    """The slice's fingerprint now (every column unless ``columns``), or None when the table
    does not exist yet."""
    from twice.destinations import open_destination
    from twice.destinations.fingerprint import fingerprint

    dest = open_destination(spec)
    try:
        if dest.schema() is None:
            return None
        return fingerprint(dest, slice_of(dest, interval), list(columns) if columns else None)
    finally:
        dest.close()


def measure_drift(spec: str, interval: Interval, record: FingerprintRecord) -> Drift:
    """The slice now against ``record`` (recomputed by its algorithm over its columns; a
    missing table counts as zero rows). Raises DestinationError when it cannot be recomputed
    (e.g. a record that does not list its columns)."""
    from twice.destinations import open_destination
    from twice.destinations.fingerprint import checksum_from_sums, recompute

    recorded = as_fingerprint(record)
    with open_destination(spec) as dest:
        if dest.schema() is None:
            rows, checksum = 0, checksum_from_sums(0, 0)
        else:
            now = recompute(dest, slice_of(dest, interval), recorded)
            rows, checksum = now.row_count, now.checksum
    return Drift(
        destination=spec, partition=record.partition, version=record.version,
        rows_recorded=record.row_count, checksum_recorded=record.checksum, rows_now=rows,
        checksum_now=checksum, columns=recorded.columns, algorithm=recorded.algorithm,
        uow_id=record.uow_id, attempt=record.attempt, measured_at=time.monotonic(),
    )


def record_partition(ledger: Ledger, task: Task, uow_id: str, attempt: int | None,
                     interval: Interval, *, accept_schema_change: bool = False,
                     commit: CommitRecord | None = None) -> PartitionDiff:
    """Fingerprint the slice ``task`` wrote for ``interval``, record it, return the diff
    (``measure_partition`` then ``record_measured``)."""
    return record_measured(ledger, task, uow_id, attempt,
                           measure_partition(task, interval, commit=commit),
                           accept_schema_change=accept_schema_change)


@dataclass(frozen=True)
class MeasuredPartition:
    """A written slice as the destination shows it: what ``record_measured`` records."""

    partition: str
    signature: str  # the destination's schema signature
    current: Fingerprint
    source: str  # "commit record" or "fingerprinted after the attempt"


def measure_partition(task: Task, interval: Interval, *,
                      commit: CommitRecord | None = None,
                      schema: Schema | None = None) -> MeasuredPartition:
    """Read the destination (never the ledger): its schema, and the slice's fingerprint.

    ``commit`` is the write's commit record: its fingerprint (taken inside the write
    transaction) is used when it covers the same slice, so nothing is scanned twice; with
    ``schema``, the columns that fingerprint read (``WriteResult.schema``), the destination
    is not opened at all.
    """
    from twice.destinations import open_destination
    from twice.destinations.base import DestinationSpec
    from twice.destinations.fingerprint import Fingerprint, fingerprint

    if commit is not None and schema is not None and commit.algorithm != "none" and (
        (commit.slice == "all rows")
        == (DestinationSpec.parse(task.destination).partition_column is None)
    ):
        current = Fingerprint(commit.row_count, commit.checksum, tuple(commit.columns),
                              commit.algorithm)
        return MeasuredPartition(partition_key(interval), schema_signature(schema), current,
                                 "commit record")
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
    return MeasuredPartition(partition_key(interval), signature, current, source)


def record_measured(ledger: Ledger, task: Task, uow_id: str, attempt: int | None,
                    measured: MeasuredPartition, *, accept_schema_change: bool = False
                    ) -> PartitionDiff:
    """Record ``measured`` as the partition's next version and return the diff with the
    previous one; reads and writes only the ledger, so it joins the caller's transaction.

    Raises :class:`SchemaChangeError` (recording nothing) when the schema signature differs
    from the previous version's and the change was not accepted.
    """
    partition, signature, current = measured.partition, measured.signature, measured.current
    previous: list[FingerprintRecord | None] = []

    def changed_from(before: FingerprintRecord | None) -> bool | None:
        """Whether the schema differs from ``before``'s (None: no signature to compare)."""
        return None if before is None or before.schema is None else before.schema != signature

    def follows(before: FingerprintRecord | None) -> None:  # under the partition's lock
        previous.append(before)
        if changed_from(before) and not accept_schema_change:
            assert before is not None
            raise SchemaChangeError(
                f"{task.destination} partition {partition}: schema changed from "
                f"[{before.schema}] to [{signature}]; a change of schema must be applied to "
                "every interval of the range (--accept-schema-change)"
            )

    record = ledger.record_fingerprint(
        task.destination, partition, current.row_count, current.checksum, uow_id=uow_id,
        attempt=attempt, columns=current.columns, algorithm=current.algorithm, schema=signature,
        after=follows,
    )
    before = previous[-1]
    schema_changed = changed_from(before)
    return PartitionDiff(
        task=task.name, destination=task.destination, partition=partition,
        version=record.version,
        rows_before=None if before is None else before.row_count, rows_after=current.row_count,
        checksum_before=None if before is None else before.checksum,
        checksum_after=current.checksum, schema_changed=schema_changed, source=measured.source,
        columns=current.columns, algorithm=current.algorithm,
        definition_changed=before is not None and not comparable(before, current),
    )


# -- acceptance: is a finished load also a correct one? (twice.define.acceptance) ---------


def observe(
    destination: Destination,
    partition: PartitionSpec,
    criteria: AcceptanceCriteria,
    *,
    rejected_rows: int | None,
    nonfatal_errors: int | None,
    rows: int | None = None,
) -> LoadOutcome:
    """Build a :class:`LoadOutcome` by asking the destination what it holds in the slice.

    ``rows`` defaults to the slice's row count in the destination; the rejected and non-fatal
    counts can only come from the load itself, so they are required (``None`` = unknown).
    """
    columns: Sequence[str] = criteria.required_non_null
    if rows is None:
        rows = destination.row_count(partition)
    nulls = destination.null_counts(partition, columns) if columns else {}
    return LoadOutcome(rows, rejected_rows, nonfatal_errors, nulls)


Refused = Literal["output", "write"]


class AcceptanceFailed(TwiceError):
    """An attempt's output failed the task's acceptance criteria.

    Raised by an owned write refused before it committed (:func:`check_before_landing`), or
    made by the executor from the check after the attempt; recorded as the attempt's
    permanent error, so the ledger says why a finished attempt is not a success.
    """

    def __init__(self, result: AcceptanceResult, *, refused: Refused | None = None) -> None:
        super().__init__("acceptance failed: " + "; ".join(result.reasons))
        self.result = result
        # refused before it committed: the returned "output" twice was landing, or a "write"
        # the task made itself; None: decided after the attempt
        self.refused = refused

    def __reduce__(self) -> tuple[Any, ...]:
        # crosses back from a child process (process isolation) with its verdict
        return (_acceptance_failed, (self.result, self.refused))


def check_before_landing(criteria: AcceptanceCriteria, landing: Landing, *,
                         nonfatal_errors: int, complete: bool) -> None:
    """The acceptance rule before anything lands: decided on the slice as an owned write will
    leave it, inside the write, before it commits (``twice.destinations.landing``). Raises
    :class:`AcceptanceFailed`, and the destination commits nothing, so a rejected output
    never replaces an accepted slice.

    ``complete``: the write lands the attempt's whole output (``write=``: twice writes what
    the task returned, once it has returned). Every criterion is decided then, as the check
    after the write would decide it: the slice's rows and nulls as they will be (an upsert
    or an append counts the rows already there), no rejected rows (twice writes every
    returned row or none), and the non-fatal errors the attempt recorded. Otherwise it is a
    write the task makes itself while it runs: only the non-fatal errors recorded so far are
    decided, since they can only grow. Its rows may still change by a later write, and its
    rejected rows are reported only in what it returns, so those criteria are decided after
    the attempt (``check_task_output``).

    The lifecycle's one acceptance rule before landing: every owned write of an attempt with
    criteria goes through here (``twice.engine.owned_write``).
    """
    if complete:
        decided = criteria
        rejected: int | None = 0
        nulls = landing.null_counts(criteria.required_non_null)
    else:
        decided = AcceptanceCriteria(min_rows=None, max_rejected_rows=None,
                                     max_nonfatal_errors=criteria.max_nonfatal_errors)
        rejected, nulls = None, {}
    verdict = evaluate(decided, LoadOutcome(landing.rows, rejected, nonfatal_errors, nulls))
    if not verdict.passed:
        raise AcceptanceFailed(verdict, refused="output" if complete else "write")


def _acceptance_failed(result: AcceptanceResult, refused: Refused | None) -> AcceptanceFailed:
    return AcceptanceFailed(result, refused=refused)


#: Where a job's statistics (BigQuery's job resource, either spelling) report the rows it wrote
#: and the rows it rejected, looked for at the top and under ``load`` / ``query``.
_ROW_KEYS = ("outputRows", "output_rows", "numDmlAffectedRows", "num_dml_affected_rows")
_REJECTED_KEYS = ("badRecords", "bad_records")


def job_reported(returned: object) -> tuple[int | None, int | None]:
    """(rows written, rows rejected) as a remote job reported them, None where it did not: a
    returned ``JobStatus`` (its ``statistics``) or a mapping (``rows``/``rejected_rows``, or
    statistics keys)."""
    statistics = getattr(returned, "statistics", None)
    found: Mapping[str, Any] = (statistics if isinstance(statistics, Mapping)
                                else returned if isinstance(returned, Mapping) else {})
    places = [found, *(found[k] for k in ("load", "query") if isinstance(found.get(k), Mapping))]

    def first(keys: tuple[str, ...]) -> int | None:
        for place in places:
            for key in keys:
                value = place.get(key)
                if isinstance(value, bool) or value is None:
                    continue
                try:
                    return int(value)  # BigQuery's REST API sends int64 as text
                except (TypeError, ValueError):
                    continue
        return None

    return first(("rows", *_ROW_KEYS)), first(("rejected_rows", *_REJECTED_KEYS))


def check_task_output(
    criteria: AcceptanceCriteria, destination_spec: str, partition: PartitionSpec,
    returned: object, nonfatal_errors: int, *, landed: bool = False,
) -> AcceptanceResult:
    """Check one attempt's output: what the task returned plus what its destination holds.

    ``returned`` may be a mapping with ``rejected_rows`` (the task's own count of rows it
    refused); anything else leaves rejected rows unknown, which fails a criterion that needs
    them. ``landed``: twice wrote the returned rows itself (``write=``), every one of them or
    none, so none was rejected. ``nonfatal_errors`` is the count the attempt recorded.

    A destination twice cannot open (``bq:project.dataset.table``: a remote job's table) is
    judged on what the job reported (:func:`job_reported`): its rows and rejected rows from
    the returned job status or mapping, its non-fatal errors as recorded; nulls are not
    reported, so a ``required_non_null`` criterion fails there, as an unknown count does.
    """
    from twice.core.schemes import is_owned
    from twice.destinations import open_destination

    rejected = (0 if landed
                else returned.get("rejected_rows") if isinstance(returned, Mapping) else None)
    if rejected is not None and (isinstance(rejected, bool) or not isinstance(rejected, int)):
        rejected = None
    if not is_owned(destination_spec):
        rows, reported_rejected = job_reported(returned)
        return evaluate(criteria, LoadOutcome(
            rows, rejected if rejected is not None else reported_rejected, nonfatal_errors))
    with open_destination(destination_spec) as destination:
        outcome = observe(destination, partition, criteria, rejected_rows=rejected,
                          nonfatal_errors=nonfatal_errors)
    return evaluate(criteria, outcome)
