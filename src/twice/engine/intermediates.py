"""Materialized intermediates: keep a computed result, reuse it only while it is provably intact.

An intermediate is a named result (e.g. ``positions_enriched``) that one unit of work produces
and several dependents read. Storing it saves recomputing it on every rerun or backfill, but a
stored copy is only worth anything if it is the right version *and* nobody changed it since, so
:func:`materialize_or_reuse` decides with evidence:

* **version** = hash of the producing unit of work's identity (pipeline, task, interval, input
  partition and version, transform version, destination): a new input or transform version is a
  new version, so it is computed, and the old one, whose slice is overwritten, is superseded;
* **integrity** = the twice fingerprint (row count + checksum, computed in the engine) taken
  right after the write; a reuse recomputes it and must find it equal, otherwise the stored copy
  is *refused* (recorded, with both fingerprints) and recomputed, never silently reused;
* **retention** = how long the owner keeps it; past it the copy is recomputed on demand and
  :func:`expire` deletes its slice and records the expiry.

Storage is an existing destination (``replace_partition`` into SQLite, DuckDB, PostgreSQL or
Parquet), the catalog and its history are ledger tables (``twice.ledger.catalog``). Every number
in the storage-vs-recompute trade-off (:func:`tradeoff`) is a measurement recorded in the ledger
(bytes stored, compute seconds, bytes scanned, verification seconds, reuse count), priced by an
explicit :class:`CostModel` whose defaults are documented list prices the caller can override.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.errors import InputError
from twice.ledger.records import IntermediateEvent, IntermediateRecord

if TYPE_CHECKING:
    from twice.destinations.base import Destination, WriteResult
    from twice.destinations.fingerprint import Fingerprint
    from twice.destinations.rows import RowsLike
    from twice.ledger.store import Ledger

#: Version strings: the first 32 hex digits of a SHA-256 (fits the catalog's 64 characters).
VERSION_DIGITS = 32

UseAction = Literal["materialized", "recomputed", "reused"]
Recommendation = Literal["keep", "drop"]


class IntermediateError(InputError):
    """Invalid arguments for an intermediate (the message names the field)."""


@dataclass(frozen=True)
class Computed:
    """What ``compute`` may return instead of bare rows: the rows plus what it read.

    ``bytes_scanned`` is what computing the result read from its inputs (e.g. a BigQuery job's
    ``total_bytes_processed``); twice cannot observe it, so None means "not measured" and the
    trade-off then prices compute time only.
    """

    rows: RowsLike
    bytes_scanned: int | None = None


@dataclass(frozen=True)
class CostModel:
    """Prices turning recorded measurements into a keep/drop recommendation.

    Defaults (USD, list prices of late 2026, order of magnitude only):
    ``storage_usd_per_gb_month=0.023`` (object storage, standard class),
    ``compute_usd_per_hour=0.20`` (one small general-purpose VM),
    ``scan_usd_per_tb=6.25`` (BigQuery on-demand query pricing),
    ``expected_reuses=1.0`` (one rerun or backfill expected within the retention).

    Rule: keep when ``saved_usd_per_reuse * max(reuse_count, expected_reuses)`` is at least the
    cost of storing the bytes for the whole retention; otherwise drop (recompute on demand).
    """

    storage_usd_per_gb_month: float = 0.023
    compute_usd_per_hour: float = 0.20
    scan_usd_per_tb: float = 6.25
    expected_reuses: float = 1.0

    def __post_init__(self) -> None:
        for name in ("storage_usd_per_gb_month", "compute_usd_per_hour", "scan_usd_per_tb",
                     "expected_reuses"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise IntermediateError(f"cost {name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class TradeOff:
    """Storage bytes x retention against measured compute saved per reuse, and the verdict."""

    name: str
    version: str
    bytes_stored: int
    retention: timedelta
    compute_seconds: float
    bytes_scanned: int | None
    reuse_count: int
    verify_seconds_per_reuse: float
    saved_seconds_per_reuse: float
    storage_usd: float
    saved_usd_per_reuse: float
    saved_usd_so_far: float
    break_even_reuses: float | None
    recommendation: Recommendation
    rule: str
    cost: CostModel = field(default_factory=CostModel)

    def line(self) -> str:
        """One sentence: what is stored for how long, what each reuse saved, the verdict."""
        scanned = "" if self.bytes_scanned is None else \
            f" and {format_bytes(self.bytes_scanned)} scanned"
        reuses = f"{self.reuse_count} reuse{'' if self.reuse_count == 1 else 's'} so far"
        return (
            f"stored {format_bytes(self.bytes_stored)} for {format_duration(self.retention)}; "
            f"each reuse saved {self.saved_seconds_per_reuse:.1f} s of compute{scanned} "
            f"({reuses}); recommendation: {self.recommendation} ({self.rule})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_stored": self.bytes_stored,
            "retention_seconds": int(self.retention.total_seconds()),
            "compute_seconds": self.compute_seconds,
            "bytes_scanned": self.bytes_scanned,
            "reuse_count": self.reuse_count,
            "verify_seconds_per_reuse": self.verify_seconds_per_reuse,
            "saved_seconds_per_reuse": self.saved_seconds_per_reuse,
            "storage_usd": self.storage_usd,
            "saved_usd_per_reuse": self.saved_usd_per_reuse,
            "saved_usd_so_far": self.saved_usd_so_far,
            "break_even_reuses": self.break_even_reuses,
            "recommendation": self.recommendation,
            "rule": self.rule,
            "cost_model": {
                "storage_usd_per_gb_month": self.cost.storage_usd_per_gb_month,
                "compute_usd_per_hour": self.cost.compute_usd_per_hour,
                "scan_usd_per_tb": self.cost.scan_usd_per_tb,
                "expected_reuses": self.cost.expected_reuses,
            },
        }


@dataclass(frozen=True)
class IntermediateUse:
    """What :func:`materialize_or_reuse` did and why; ``refusal`` says why a copy was refused."""

    action: UseAction
    reason: str
    entry: IntermediateRecord
    fingerprint: Fingerprint
    tradeoff: TradeOff
    refusal: str | None = None
    written: WriteResult | None = None  # the write that stored it (None: reused)

    @property
    def reused(self) -> bool:
        return self.action == "reused"


@dataclass(frozen=True)
class Expiry:
    """One garbage-collected (or, with ``error``, not collectable) intermediate version."""

    name: str
    version: str
    location: str
    partition: str
    rows_deleted: int | None
    error: str | None = None


# --------------------------------------------------------------------------- versions


def intermediate_version(unit: UnitOfWork) -> str:
    """The version of the intermediate ``unit`` produces: a hash of the unit's identity.

    Same pipeline, task, interval, input partition/version, transform version and destination
    give the same version on every machine; changing any of them gives a new one.
    """
    if not isinstance(unit, UnitOfWork):
        raise IntermediateError(f"unit must be a UnitOfWork, got {type(unit).__name__}")
    text = json.dumps(unit.identity(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:VERSION_DIGITS]


def encode_partition(partition: object) -> str:
    """Catalog text of a partition: an interval's ``START/END`` label, else the value's text."""
    if isinstance(partition, Interval):
        return partition.label
    if partition is None or isinstance(partition, bool | float):
        raise IntermediateError(
            f"partition must be an Interval or a date/str/int value, got {partition!r}"
        )
    text = partition.isoformat() if hasattr(partition, "isoformat") else str(partition)
    if not text or "/" in text:
        raise IntermediateError(f"partition value {text!r} must be non-empty without '/'")
    return text


def decode_partition(text: str) -> Interval | str:
    """Inverse of :func:`encode_partition` (values come back as text; destinations coerce)."""
    return Interval.parse(text) if "/" in text else text


# --------------------------------------------------------------------------- trade-off


def tradeoff(
    entry: IntermediateRecord,
    events: Iterable[IntermediateEvent] = (),
    cost: CostModel | None = None,
) -> TradeOff:
    """Price ``entry``'s recorded measurements with ``cost`` (see :class:`CostModel`).

    Each reuse saves the recorded compute time minus what verifying the stored copy took (the
    mean over the recorded reuses in ``events``; with none yet, the entry's verification total
    over its reuse count, else 0), plus the bytes the computation scanned.
    """
    cost = cost or CostModel()
    verifies = [float(e.detail.get("verify_seconds", 0.0)) for e in events
                if e.action == "reused" and e.version == entry.version]
    if verifies:
        verify_mean = sum(verifies) / len(verifies)
    elif entry.reuse_count:
        verify_mean = entry.verify_seconds / entry.reuse_count
    else:
        verify_mean = 0.0
    saved_seconds = max(0.0, entry.compute_seconds - verify_mean)
    scanned_usd = 0.0 if entry.bytes_scanned is None else \
        entry.bytes_scanned / 1e12 * cost.scan_usd_per_tb
    saved_per_reuse = saved_seconds / 3600 * cost.compute_usd_per_hour + scanned_usd
    months = entry.retention.total_seconds() / (30 * 86400)
    storage_usd = entry.bytes_stored / 1e9 * months * cost.storage_usd_per_gb_month
    counted = max(float(entry.reuse_count), cost.expected_reuses)
    break_even = None if saved_per_reuse <= 0 else storage_usd / saved_per_reuse
    keep = saved_per_reuse > 0 and saved_per_reuse * counted >= storage_usd
    comparison = ">=" if keep else "<"
    rule = (
        f"{_count(counted)} reuse(s) x ${saved_per_reuse:.3g} saved {comparison} "
        f"${storage_usd:.3g} to store it for its retention"
    )
    if saved_per_reuse <= 0:
        rule = "verifying the stored copy takes as long as recomputing it"
    return TradeOff(
        name=entry.name, version=entry.version, bytes_stored=entry.bytes_stored,
        retention=entry.retention, compute_seconds=entry.compute_seconds,
        bytes_scanned=entry.bytes_scanned, reuse_count=entry.reuse_count,
        verify_seconds_per_reuse=verify_mean, saved_seconds_per_reuse=saved_seconds,
        storage_usd=storage_usd, saved_usd_per_reuse=saved_per_reuse,
        saved_usd_so_far=saved_per_reuse * entry.reuse_count, break_even_reuses=break_even,
        recommendation="keep" if keep else "drop", rule=rule, cost=cost,
    )


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def format_bytes(count: int) -> str:
    """Decimal units (1 MB = 10**6 bytes), one decimal: ``12.3 MB``."""
    if count < 1000:
        return f"{count} B"
    size = float(count)
    for unit in ("kB", "MB", "GB", "TB", "PB"):
        size /= 1000
        if size < 1000 or unit == "PB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def format_duration(span: timedelta) -> str:
    """``7 days``, ``36 hours``, ``90 minutes``, ``45 seconds`` (largest whole unit)."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


# --------------------------------------------------------------------------- decide


def materialize_or_reuse(
    ledger: Ledger,
    name: str,
    unit: UnitOfWork,
    *,
    compute: Callable[[], RowsLike | Computed],
    store: Destination | str,
    owner: str,
    retention: timedelta,
    fingerprint_columns: Sequence[str] | None = None,
    partition: object = None,
    cost: CostModel | None = None,
) -> IntermediateUse:
    """Reuse the stored copy of ``name`` for ``unit`` if it is provably intact, else compute it.

    ``store`` is a destination (or its spec string) with a ``partition_column``; the result is
    written with ``replace_partition`` into ``partition`` (default: the unit's interval).
    Reuse needs an active catalog entry of the same version, in the same slice, within its
    retention, whose freshly computed fingerprint equals the recorded one. A mismatch is
    recorded as a refusal with both fingerprints, then the result is recomputed. ``compute``
    is timed (with the write) and may return :class:`Computed` to report bytes scanned.
    The integrity fingerprint covers ``fingerprint_columns``, by default every column of a
    fingerprintable type (not only the key columns: a changed value must be caught; float
    columns have no canonical text and are left out, so cast them to decimals to cover them).
    Read the result back with ``store.read_partition(partition)``.
    """
    _check_arguments(name, owner, retention, compute)
    version = intermediate_version(unit)
    slice_spec = unit.interval if partition is None else partition
    slice_text = encode_partition(slice_spec)
    retention_seconds = math.ceil(retention.total_seconds())
    with _opened(store) as dest:
        now = ledger.now()
        entry = ledger.intermediate(name, version)
        refusal: str | None = None
        if entry is None:
            reason = _why_new(ledger, name, unit, dest.spec, slice_text)
        elif entry.status != "active":
            reason = f"version {version} was {entry.status} ({entry.status_reason})"
        elif entry.expired(now):
            reason = f"retention of version {version} ended at {entry.expires_at.isoformat()}"
        elif (entry.location, entry.partition) != (dest.spec, slice_text):
            refusal = (
                f"stored at {entry.location} [{entry.partition}], requested at "
                f"{dest.spec} [{slice_text}]"
            )
            ledger.record_intermediate_refusal(
                name, version, reason=refusal,
                detail={"location": dest.spec, "partition": slice_text},
            )
            reason = f"refused the stored copy: {refusal}"
        else:
            reused = _try_reuse(ledger, entry, dest, slice_spec)
            if isinstance(reused, tuple):
                record, current = reused
                events = ledger.intermediate_events(name, version)
                return IntermediateUse("reused", f"fingerprint matches ({current})", record,
                                       current, tradeoff(record, events, cost))
            refusal = reused
            reason = f"refused the stored copy: {refusal}"
        return _materialize(
            ledger, name, unit, version=version, dest=dest, slice_spec=slice_spec,
            slice_text=slice_text, compute=compute, owner=owner,
            retention_seconds=retention_seconds, columns=fingerprint_columns, reason=reason,
            refusal=refusal, cost=cost,
        )


def _check_arguments(name: object, owner: object, retention: object, compute: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise IntermediateError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(owner, str) or not owner.strip():
        raise IntermediateError(f"owner must be a non-empty string, got {owner!r}")
    if not isinstance(retention, timedelta) or retention.total_seconds() < 1:
        raise IntermediateError(f"retention must be a timedelta of at least 1 s, got {retention!r}")
    if not callable(compute):
        raise IntermediateError("compute must be a callable returning the rows")


class _opened:
    """Context manager: a destination given as a spec is opened here and closed afterwards."""

    def __init__(self, store: Destination | str) -> None:
        self._store = store
        self._owned: Destination | None = None

    def __enter__(self) -> Destination:
        if isinstance(self._store, str):
            from twice.destinations import open_destination

            self._owned = open_destination(self._store)
            return self._owned
        return self._store

    def __exit__(self, *_exc: object) -> None:
        if self._owned is not None:
            self._owned.close()


def _why_new(ledger: Ledger, name: str, unit: UnitOfWork, location: str, slice_text: str
             ) -> str:
    """Reason for a first materialization; names the identity fields that changed, if any."""
    version = intermediate_version(unit)
    occupant = next(
        (e for e in ledger.intermediates(name=name, status="active")
         if (e.location, e.partition) == (location, slice_text)),
        None,
    )
    if occupant is None:
        return f"no stored copy of version {version}"
    identity = unit.identity()
    changed = [f"{key} {occupant.identity.get(key)!r} -> {identity[key]!r}"
               for key in sorted(identity) if occupant.identity.get(key) != identity[key]]
    what = ", ".join(changed) or "identity"
    return f"new version {version} (stored version {occupant.version} differs: {what})"


def _try_reuse(
    ledger: Ledger, entry: IntermediateRecord, dest: Destination, slice_spec: object
) -> tuple[IntermediateRecord, Fingerprint] | str:
    """Verify the stored copy; record a reuse (match) or a refusal (anything else)."""
    from twice.destinations import DestinationError
    from twice.destinations.fingerprint import Fingerprint, verify

    recorded = Fingerprint(entry.row_count, entry.checksum, entry.columns, entry.algorithm)
    started = time.perf_counter()
    try:
        result = verify(dest, slice_spec, recorded)
    except DestinationError as exc:
        seconds = time.perf_counter() - started
        refusal = f"stored copy cannot be verified: {exc}"
        ledger.record_intermediate_refusal(
            entry.name, entry.version, reason=refusal, verify_seconds=seconds,
            detail={"recorded": recorded.to_dict()},
        )
        return refusal
    seconds = time.perf_counter() - started
    evidence = {"recorded": recorded.to_dict(), "current": result.current.to_dict()}
    if not result.matches:
        refusal = "fingerprint mismatch, the stored copy was modified: " + "; ".join(result.reasons)
        ledger.record_intermediate_refusal(
            entry.name, entry.version, reason=refusal, verify_seconds=seconds, detail=evidence,
        )
        return refusal
    record = ledger.record_intermediate_reuse(
        entry.name, entry.version, verify_seconds=seconds,
        reason=f"fingerprint matches: {result.current}", detail=evidence,
    )
    return record, result.current


def _materialize(
    ledger: Ledger,
    name: str,
    unit: UnitOfWork,
    *,
    version: str,
    dest: Destination,
    slice_spec: object,
    slice_text: str,
    compute: Callable[[], RowsLike | Computed],
    owner: str,
    retention_seconds: int,
    columns: Sequence[str] | None,
    reason: str,
    refusal: str | None,
    cost: CostModel | None,
) -> IntermediateUse:
    from twice.destinations.fingerprint import fingerprint, resolve_columns
    from twice.destinations.rows import to_arrow

    started = time.perf_counter()
    produced = compute()
    computed = produced if isinstance(produced, Computed) else Computed(produced)
    compute_seconds = time.perf_counter() - started
    bytes_scanned = computed.bytes_scanned
    if bytes_scanned is not None and (isinstance(bytes_scanned, bool)
                                      or not isinstance(bytes_scanned, int) or bytes_scanned < 0):
        raise IntermediateError(f"bytes_scanned must be an integer >= 0, got {bytes_scanned!r}")
    table = to_arrow(computed.rows, target=dest.schema())
    written = _write(dest, table, slice_spec)
    total_seconds = time.perf_counter() - started
    stored, measured_as = _bytes_stored(dest, written, table.nbytes)
    schema = dest.schema()
    assert schema is not None  # the write just created the table
    current = fingerprint(dest, slice_spec, columns or resolve_columns(schema, None))
    record = ledger.record_intermediate(
        name=name, version=version, unit=unit, owner=owner,
        retention_seconds=retention_seconds, location=dest.spec, partition=slice_text,
        columns=current.columns, algorithm=current.algorithm, row_count=current.row_count,
        checksum=current.checksum, bytes_stored=stored, compute_seconds=total_seconds,
        bytes_scanned=bytes_scanned, reason=reason,
        detail={"compute_only_seconds": compute_seconds, "rows_written": written.rows_written,
                "rows_deleted": written.rows_deleted, "bytes_measured_as": measured_as,
                "refusal": refusal},
    )
    events = ledger.intermediate_events(name, version)
    action: UseAction = "materialized" if record.materializations == 1 else "recomputed"
    return IntermediateUse(action, reason, record, current, tradeoff(record, events, cost), refusal,
                           written)


def _write(dest: Destination, rows: RowsLike, slice_spec: object) -> WriteResult:
    """``replace_partition``; Parquet always static, so an emptied slice is really emptied."""
    if dest.engine == "parquet":
        replace: Any = dest.replace_partition
        result: WriteResult = replace(rows, slice_spec, overwrite="static")
        return result
    return dest.replace_partition(rows, slice_spec)


def _bytes_stored(dest: Destination, written: WriteResult, logical: int) -> tuple[int, str]:
    """Bytes on disk for Parquet partitions; otherwise the Arrow size of the written rows."""
    root = getattr(dest, "root", None)
    if dest.engine == "parquet" and isinstance(root, Path):
        total = sum(path.stat().st_size for name in written.partitions_written
                    for path in (root / name).rglob("*") if path.is_file())
        return total, "parquet files on disk"
    return int(logical), "Arrow in-memory size of the rows written (uncompressed)"


# --------------------------------------------------------------------------- expiry


def expire(ledger: Ledger, *, name: str | None = None) -> list[Expiry]:
    """Delete the slices of active versions past their retention and record each expiry.

    "Now" is the ledger's clock. A version whose destination cannot be opened or emptied keeps
    its status (its data may still be there) and is returned with ``error`` set.
    """
    from twice.destinations import DestinationError, open_destination

    now = ledger.now()
    done: list[Expiry] = []
    for entry in ledger.intermediates(name=name, status="active"):
        if not entry.expired(now):
            continue
        try:
            dest = open_destination(entry.location)
            try:
                deleted: int | None = 0
                if dest.schema() is not None:
                    deleted = _write(dest, [], decode_partition(entry.partition)).rows_deleted
            finally:
                dest.close()
        except (DestinationError, OSError) as exc:
            done.append(Expiry(entry.name, entry.version, entry.location, entry.partition,
                               None, f"{type(exc).__name__}: {exc}"))
            continue
        ledger.expire_intermediate(
            entry.name, entry.version,
            reason=f"retention of {format_duration(entry.retention)} ended at "
            f"{entry.expires_at.isoformat()}; slice deleted",
            detail={"rows_deleted": deleted, "bytes_freed": entry.bytes_stored},
        )
        done.append(Expiry(entry.name, entry.version, entry.location, entry.partition, deleted))
    return done
