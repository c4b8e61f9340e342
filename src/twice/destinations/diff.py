"""Row-level differences between two versions of one slice: keys added, removed and changed.

``twice diff`` and a backfill's per-interval summary compare a partition as it was at one table
version with the same partition at another (Delta and Iceberg time travel: a destination with
``versions()`` and ``read_partition_at(partition, version)``; SQL destinations opened with
``keep_previous=DAYS`` number versions per slice, ``versions(partition)``: see
:mod:`twice.destinations.previous`). Rows are matched by their key
columns; a key present on both sides whose other columns differ in any value is *changed*.
Values are compared by twice's canonical text (:mod:`twice.destinations.columns`), so the
comparison is exact for every kind: floats by their shortest round-trip text (``0.1`` and
``0.1000000000000001`` differ, every NaN equals every NaN, ``-0.0`` equals ``0.0``), decimals
by their fixed-point text, timestamps to the microsecond, and NULL differs from every value
(also from ``''``).

A side holding the same key more than once cannot be compared by key: that is refused
(:class:`DiffError`), naming the key, rather than guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from twice.destinations.columns import canonical_text, schema_of
from twice.destinations.errors import DestinationError

DEFAULT_SAMPLES = 10
TIME_TRAVEL_ENGINES = ("delta", "iceberg")


class DiffError(DestinationError):
    """Two versions of a slice cannot be compared (no key, a key repeated, other columns)."""


@runtime_checkable
class TimeTravel(Protocol):
    """What a destination offers to compare versions (Delta, Iceberg; SQL destinations with
    keep_previous, whose ``versions`` takes the partition)."""

    def versions(self) -> list[int]: ...
    def read_partition_at(self, partition: Any, version: int) -> pa.Table: ...


@dataclass(frozen=True)
class PartitionDiff:
    """Keys added, removed and changed between two versions of a slice (counts, then up to
    ``samples`` keys of each kind, in key order). A key is a dict column -> value."""

    key_columns: tuple[str, ...]
    rows_before: int
    rows_after: int
    added: int
    removed: int
    changed: int
    unchanged: int
    added_keys: tuple[dict[str, Any], ...] = ()
    removed_keys: tuple[dict[str, Any], ...] = ()
    changed_keys: tuple[dict[str, Any], ...] = ()
    changed_columns: dict[str, int] = field(default_factory=dict)  # column -> rows it changed

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        """``+3 -1 ~2 (rows 10 -> 12)``: added, removed, changed."""
        return (f"+{self.added} -{self.removed} ~{self.changed} "
                f"(rows {self.rows_before} -> {self.rows_after})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_columns": list(self.key_columns), "rows_before": self.rows_before,
            "rows_after": self.rows_after, "added": self.added, "removed": self.removed,
            "changed": self.changed, "unchanged": self.unchanged,
            "added_keys": [_jsonable(k) for k in self.added_keys],
            "removed_keys": [_jsonable(k) for k in self.removed_keys],
            "changed_keys": [_jsonable(k) for k in self.changed_keys],
            "changed_columns": dict(self.changed_columns),
        }


def diff_tables(old: pa.Table, new: pa.Table, key_columns: Sequence[str], *,
                samples: int = DEFAULT_SAMPLES) -> PartitionDiff:
    """The difference from ``old`` to ``new``, matching rows by ``key_columns``."""
    keys = tuple(key_columns)
    if not keys:
        raise DiffError("a diff needs key columns to match rows (--key-columns a,b, or the "
                        "destination's key_columns)")
    if samples < 0:
        raise DiffError("samples must be 0 or more")
    old_schema, new_schema = schema_of(old), schema_of(new)
    if set(old_schema) != set(new_schema):
        raise DiffError(f"the versions have different columns: {sorted(old_schema)} vs "
                        f"{sorted(new_schema)}")
    missing = [k for k in keys if k not in old_schema]
    if missing:
        raise DiffError(f"key columns {missing} are not in the table ({list(old_schema)})")
    others = [c for c in sorted(old_schema) if c not in keys]
    before, after = _by_key(old, keys, others), _by_key(new, keys, others)
    def order(k: tuple[Any, ...]) -> tuple[Any, ...]:  # key order, NULL last
        side = after if k in after else before
        return tuple((v is None, 0 if v is None else v) for v in side[k][0])

    added = sorted((k for k in after if k not in before), key=order)
    removed = sorted((k for k in before if k not in after), key=order)
    changed = []
    per_column: dict[str, int] = {}
    for k in sorted((k for k in after if k in before), key=order):
        differing = [c for c, a, b in zip(others, before[k][1], after[k][1], strict=True)
                     if a != b]
        if differing:
            changed.append(k)
            for c in differing:
                per_column[c] = per_column.get(c, 0) + 1

    def shown(found: list[tuple[Any, ...]], side: dict[tuple[Any, ...], Any]) -> tuple[
            dict[str, Any], ...]:
        return tuple(dict(zip(keys, side[k][0], strict=True)) for k in found[:samples])

    return PartitionDiff(
        key_columns=keys, rows_before=old.num_rows, rows_after=new.num_rows, added=len(added),
        removed=len(removed), changed=len(changed),
        unchanged=sum(1 for k in after if k in before) - len(changed),
        added_keys=shown(added, after), removed_keys=shown(removed, before),
        changed_keys=shown(changed, after), changed_columns=dict(sorted(per_column.items())),
    )


def diff_versions(destination: Any, partition: Any, old: int, new: int,
                  key_columns: Sequence[str] | None = None, *,
                  samples: int = DEFAULT_SAMPLES) -> PartitionDiff:
    """:func:`diff_tables` of one slice of ``destination`` at table versions ``old`` and
    ``new`` (the destination's key columns unless ``key_columns``)."""
    spec, default_keys = destination.spec, tuple(destination.key_columns or ())
    per_slice = hasattr(destination, "keep_previous")  # a SQL destination (previous.py)
    if per_slice and destination.keep_previous is None:
        from twice.destinations.previous import not_kept

        raise DiffError(str(not_kept(destination)))
    if not isinstance(destination, TimeTravel):
        raise DiffError(
            f"{destination.spec}: {destination.engine} destinations keep no earlier versions; "
            f"twice diff reads versions of {' and '.join(TIME_TRAVEL_ENGINES)} tables, and "
            "of SQL tables opened with keep_previous=DAYS"
        )
    keys = tuple(key_columns or default_keys)
    sql_table: Any = destination  # versions(partition): per slice (previous.py)
    available = sql_table.versions(partition) if per_slice else destination.versions()
    for name, version in (("--from", old), ("--to", new)):
        if version not in available:
            if per_slice:
                shown = ", ".join(map(str, available)) or "none"
                where = f"{spec}, slice {partition}"
            elif getattr(destination, "engine", "") == "iceberg":  # snapshot ids: no range
                shown = (", ".join(map(str, available[-20:])) or "none") + (
                    f" (the last 20 of {len(available)}, oldest first)"
                    if len(available) > 20 else "")
                where = spec
            else:
                shown = f"{available[0]}..{available[-1]}" if available else "none"
                where = spec
            raise DiffError(f"{name} {version}: no such version of {where} "
                            f"(versions held: {shown})")
    return diff_tables(destination.read_partition_at(partition, old),
                       destination.read_partition_at(partition, new), keys, samples=samples)


@dataclass(frozen=True)
class CommitDiff:
    """What one commit changed in a slice (:func:`commit_diff`), and the table versions
    compared (``from_version`` None: the commit created the table)."""

    keys: PartitionDiff
    from_version: int | None
    to_version: int


def commit_diff(spec: str, uow_id: str, attempt: int, partition: Any, *,
                samples: int = 3) -> CommitDiff | None:
    """The key diff one commit made to ``partition``: the slice at the table version that
    carries the commit record of (``uow_id``, ``attempt``) against the version before it (an
    empty slice when the commit created the table). None when it cannot be said: a destination
    without versioned commit records (Delta and Iceberg map records to versions), no key columns,
    no such record (e.g. a write already compacted out of the log), or any read failure: the
    summary is evidence for operators, never a reason to fail the write it describes."""
    from twice.destinations import open_destination

    try:
        with open_destination(spec) as dest:
            versions_of = getattr(dest, "commit_versions", None)
            if versions_of is None or not dest.key_columns or not isinstance(dest, TimeTravel):
                return None
            found = [v for v, r in versions_of().items()
                     if r.uow_id == uow_id and r.attempt == attempt]
            if not found:
                return None
            versions = dest.versions()  # in commit order (Iceberg's are snapshot ids)
            version = max(found, key=versions.index)
            at = versions.index(version)
            before = versions[at - 1] if at > 0 else None
            partition = partition if dest.partition_column else None
            new = dest.read_partition_at(partition, version)
            old = (new.schema.empty_table() if before is None
                   else dest.read_partition_at(partition, before))
            return CommitDiff(diff_tables(old, new, dest.key_columns, samples=samples),
                              before, version)
    except Exception:  # best-effort evidence, see the docstring
        return None


def _by_key(table: pa.Table, keys: tuple[str, ...], others: list[str]
            ) -> dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """canonical key -> (key values, canonical texts of the other columns); a repeated key is
    refused. Canonical text makes equal values equal whatever the engine gave back."""
    schema = schema_of(table)
    texts = {c: _texts(table, c, schema) for c in [*keys, *others]}
    values = {k: table.column(k).to_pylist() for k in keys}
    found: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
    for i in range(table.num_rows):
        key = tuple(texts[k][i] for k in keys)
        if key in found:
            raise DiffError(
                "key " + ", ".join(f"{k}={values[k][i]!r}" for k in keys)
                + " appears more than once in one version: rows cannot be matched by key")
        found[key] = (tuple(values[k][i] for k in keys), tuple(texts[c][i] for c in others))
    return found


def _texts(table: pa.Table, column: str, schema: Any) -> list[Any]:
    """Canonical text of every value (None for NULL, so NULL differs from every text)."""
    array = table.column(column)
    if array.null_count == len(array):
        return [None] * len(array)
    texts: list[Any] = canonical_text(array, schema[column]).to_pylist()
    return texts


def _jsonable(key: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in key.items():
        if value is None or isinstance(value, (bool, int, str)):
            out[name] = value
        elif isinstance(value, float):
            out[name] = value if value == value and abs(value) != float("inf") else str(value)
        elif isinstance(value, bytes):
            out[name] = value.hex()
        elif hasattr(value, "isoformat"):
            out[name] = value.isoformat()
        else:
            out[name] = str(value)
    return out


__all__ = ["CommitDiff", "DiffError", "PartitionDiff", "TimeTravel", "commit_diff", "diff_tables",
           "diff_versions"]
