"""The slice of a table that one run owns: an interval or an explicit partition value.

A run replaces exactly its slice. The same :class:`Slice` object produces the SQL predicate
(with bound parameters), the Arrow mask that checks incoming rows, and the test applied to
Parquet partition directory values, so "what the writer deletes" and "what the writer accepts"
can never drift apart.

Interval semantics per partition column kind (half-open, like
:class:`twice.core.interval.Interval`):

* ``date``: the bounds must be midnights (in their own offsets); the slice is the dates
  ``start.date() <= d < end.date()``.
* ``timestamptz``: ``start <= ts < end`` as instants.
* ``timestamp`` (naive): naive values are taken as UTC; the bounds are converted to UTC.
* other kinds take an explicit value only (``day = value``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twice.core.interval import Interval
from twice.destinations.columns import ColumnType
from twice.destinations.errors import DestinationError

PartitionSpec = Any  # Interval | date | datetime | int | str | bool | Decimal


class PartitionError(DestinationError):
    """A partition spec does not fit the partition column, or rows fall outside the slice."""


class RowsOutsidePartitionError(PartitionError):
    """Some incoming rows do not belong to the slice being replaced; nothing was written."""


@dataclass(frozen=True)
class Slice:
    """One partition column and either an interval ``[low, high)`` or one ``value``."""

    column: str
    ctype: ColumnType
    low: Any = None
    high: Any = None
    value: Any = None
    is_range: bool = False
    label: str = ""

    @classmethod
    def of(cls, column: str, ctype: ColumnType, partition: PartitionSpec) -> Slice:
        if isinstance(partition, Interval):
            low, high = _interval_bounds(column, ctype, partition)
            return cls(column, ctype, low=low, high=high, is_range=True,
                       label=f"{column} in [{_show(low)}, {_show(high)})")
        value = coerce_value(column, ctype, partition)
        return cls(column, ctype, value=value, label=f"{column}={_show(value)}")

    def mask(self, table: pa.Table) -> pa.ChunkedArray:
        """True for rows inside the slice (nulls are outside)."""
        column = table.column(self.column)
        if self.is_range:
            low = pa.scalar(self.low, type=column.type)
            high = pa.scalar(self.high, type=column.type)
            inside = pc.and_(pc.greater_equal(column, low), pc.less(column, high))
        else:
            inside = pc.equal(column, pa.scalar(self.value, type=column.type))
        return pc.fill_null(inside, False)

    def check_rows(self, table: pa.Table) -> None:
        """Refuse the whole batch if any row lies outside the slice (before any delete)."""
        if table.num_rows == 0 or self._ends_inside(table.column(self.column)):
            return
        inside = self.mask(table)
        outside = table.num_rows - (pc.sum(inside).as_py() or 0)
        if outside:
            bad = table.filter(pc.invert(inside)).column(self.column)[0].as_py()
            raise RowsOutsidePartitionError(
                f"{outside} of {table.num_rows} row(s) are outside the slice {self.label} "
                f"(e.g. {self.column}={_show(bad)}); refusing the batch, nothing was deleted"
            )

    def _ends_inside(self, column: pa.ChunkedArray) -> bool:
        """Whether the column's least and greatest values, and so every value, lie inside the
        slice, with no NULL: one kernel where :meth:`mask` takes five (a write's every row is
        checked before its transaction). False also when the values' Python form would not
        compare exactly (nanosecond timestamps, other types): :meth:`mask` decides then."""
        kind = column.type
        if column.null_count or not (
            pa.types.is_date(kind) or pa.types.is_integer(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or (pa.types.is_timestamp(kind) and kind.unit != "ns")
        ):
            return False
        ends = pc.min_max(column)
        least, greatest = ends["min"].as_py(), ends["max"].as_py()
        if least is None or greatest is None:
            return False
        try:
            if self.is_range:
                return bool(self.low <= least and greatest < self.high)
            return bool(least == self.value and greatest == self.value)
        except TypeError:  # e.g. a naive value against an aware bound: mask() says
            return False

    def contains(self, value: Any) -> bool:
        """Python-side membership, for values parsed from Parquet directory names."""
        if value is None:
            return False
        if self.is_range:
            return bool(self.low <= value < self.high)
        return bool(value == self.value)


def _interval_bounds(column: str, ctype: ColumnType, interval: Interval) -> tuple[Any, Any]:
    if ctype.kind == "date":
        for name, bound in (("start", interval.start), ("end", interval.end)):
            if bound.timetz().replace(tzinfo=None) != time(0):
                raise PartitionError(
                    f"partition column {column!r} is a date, so the interval {name} must be a "
                    f"midnight; got {bound.isoformat()}"
                )
        return interval.start.date(), interval.end.date()
    if ctype.kind == "timestamptz":
        return interval.start.astimezone(UTC), interval.end.astimezone(UTC)
    if ctype.kind == "timestamp":
        return (interval.start.astimezone(UTC).replace(tzinfo=None),
                interval.end.astimezone(UTC).replace(tzinfo=None))
    raise PartitionError(
        f"partition column {column!r} is {ctype}; an interval needs a date or timestamp column, "
        "pass an explicit partition value instead"
    )


def coerce_value(column: str, ctype: ColumnType, value: Any) -> Any:
    """Turn an explicit partition value (possibly text from the CLI) into the column's type."""
    kind = ctype.kind
    try:
        if kind == "date":
            if isinstance(value, datetime):
                raise TypeError("a datetime is not a date")
            return value if isinstance(value, date) else date.fromisoformat(str(value))
        if kind == "integer":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise TypeError(f"{type(value).__name__} is not an integer")
            return int(value)
        if kind == "string":
            if not isinstance(value, str):
                raise TypeError(f"{type(value).__name__} is not a string")
            return value
        if kind in ("timestamp", "timestamptz"):
            moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
            if kind == "timestamptz":
                if moment.tzinfo is None:
                    raise ValueError("a timestamptz partition value needs a UTC offset")
                return moment.astimezone(UTC)
            if moment.tzinfo is not None:
                moment = moment.astimezone(UTC).replace(tzinfo=None)
            return moment
        if kind == "boolean":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError("expected true or false")
        if kind == "decimal":
            return Decimal(str(value)).quantize(Decimal(1).scaleb(-(ctype.scale or 0)))
    except (TypeError, ValueError, InvalidOperation) as exc:
        raise PartitionError(
            f"partition value {value!r} does not fit column {column!r} ({ctype}): {exc}"
        ) from None
    raise PartitionError(f"column {column!r} ({ctype}) cannot be a partition column")


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)
