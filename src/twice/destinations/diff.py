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


@dataclass(frozen=True)
class HeldVersion:
    """One version of a slice as ``twice diff`` lists and takes it: ``name`` is what
    ``--from``/``--to`` give and the listing shows (a Delta table version, a SQL slice's version
    number, an Iceberg table's ordinal 1, 2, ... oldest first), ``version`` what the destination
    reads (the same number, but an Iceberg snapshot id)."""

    name: int
    version: int
    snapshot: bool = False  # ``version`` is an Iceberg snapshot id

    def __str__(self) -> str:
        return f"{self.name} (snapshot {self.version})" if self.snapshot else str(self.name)


def held_versions(destination: Any, partition: Any) -> list[HeldVersion]:
    """The versions of ``partition`` that ``destination`` holds, oldest first, named as
    ``twice diff`` lists and takes them (:class:`HeldVersion`). Iceberg versions are
    numbered 1, 2, ... in the order of the table's current history (the versions held now:
    expiring snapshots renumbers them; a snapshot id names one for good)."""
    if hasattr(destination, "keep_previous"):  # a SQL destination (previous.py)
        if destination.keep_previous is None:
            from twice.destinations.previous import not_kept

            raise DiffError(str(not_kept(destination)))
    elif not isinstance(destination, TimeTravel):
        raise DiffError(
            f"{destination.spec}: {destination.engine} destinations keep no earlier versions; "
            f"twice diff reads versions of {' and '.join(TIME_TRAVEL_ENGINES)} tables, and "
            "of SQL tables opened with keep_previous=DAYS"
        )
    if hasattr(destination, "keep_previous"):
        return [HeldVersion(v, v) for v in destination.versions(partition)]
    found = destination.versions()
    if getattr(destination, "engine", "") == "iceberg":  # snapshot ids: listed by ordinal
        return [HeldVersion(n, v, snapshot=True) for n, v in enumerate(found, start=1)]
    return [HeldVersion(v, v) for v in found]


def resolve_version(destination: Any, partition: Any, held: Sequence[HeldVersion], given: int,
                    option: str) -> HeldVersion:
    """The held version ``given`` names (as listed; on Iceberg also a snapshot id), or a
    :class:`DiffError` naming ``option`` and listing the versions held."""
    by_name = [h for h in held if h.name == given]
    by_id = [h for h in held if h.snapshot and h.version == given]
    if by_name and by_id and by_name != by_id:
        raise DiffError(f"{option} {given}: both version {by_name[0]} and the snapshot id "
                        f"of version {by_id[0]}; give the snapshot id of the one you mean")
    if by_name or by_id:
        return (by_name or by_id)[0]
    raise DiffError(f"{option} {given}: no such version of {_where(destination, partition)} "
                    f"(versions held: {_shown(held)})")


def _where(destination: Any, partition: Any) -> str:
    if hasattr(destination, "keep_previous"):
        from twice.destinations.previous import slice_label

        try:
            return f"{destination.spec}, slice {slice_label(destination, partition)}"
        except DestinationError:
            return f"{destination.spec}, slice {partition}"
    return str(destination.spec)


def _shown(held: Sequence[HeldVersion]) -> str:
    """``1, 2, 3``; a run of Delta versions as ``0..41``; an Iceberg table's last 20."""
    if not held:
        return "none"
    names = [h.name for h in held]
    if held[0].snapshot:
        last = ", ".join(map(str, held[-20:]))
        return last + (f" (the last 20 of {len(held)}, oldest first)" if len(held) > 20 else "")
    if len(names) > 3 and names == list(range(names[0], names[-1] + 1)):
        return f"{names[0]}..{names[-1]}"
    return ", ".join(map(str, names))


@dataclass(frozen=True)
class VersionsDiff:
    """:func:`diff_versions`' answer: the keys' diff and the two versions compared."""

    keys: PartitionDiff
    old: HeldVersion
    new: HeldVersion


def diff_versions(destination: Any, partition: Any, old: int, new: int,
                  key_columns: Sequence[str] | None = None, *,
                  samples: int = DEFAULT_SAMPLES) -> PartitionDiff:
    """:func:`diff_tables` of one slice of ``destination`` at versions ``old`` and ``new``,
    named as :func:`held_versions` lists them (the destination's key columns unless
    ``key_columns``)."""
    return diff_held_versions(destination, partition, old, new, key_columns,
                              samples=samples).keys


def diff_held_versions(destination: Any, partition: Any, old: int, new: int,
                       key_columns: Sequence[str] | None = None, *,
                       samples: int = DEFAULT_SAMPLES) -> VersionsDiff:
    """:func:`diff_versions`, with the versions it compared (``--from`` and ``--to``)."""
    keys = tuple(key_columns or tuple(destination.key_columns or ()))
    held = held_versions(destination, partition)
    before = resolve_version(destination, partition, held, old, "--from")
    after = resolve_version(destination, partition, held, new, "--to")
    result = diff_tables(destination.read_partition_at(partition, before.version),
                         destination.read_partition_at(partition, after.version), keys,
                         samples=samples)
    return VersionsDiff(result, before, after)


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


__all__ = ["CommitDiff", "DiffError", "HeldVersion", "PartitionDiff", "TimeTravel", "VersionsDiff",
           "commit_diff", "diff_held_versions", "diff_tables", "diff_versions", "held_versions",
           "resolve_version"]
