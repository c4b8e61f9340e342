"""Per-interval input snapshots, for sources that overwrite history.

The Portuguese seed text: a source that rewrites the past needs a snapshot per interval (or
CDC), otherwise a retry reads different data under the same input version. A task opts in with
``snapshot=read`` (``read(interval)`` returns the interval's input: an Arrow table or anything
``write=`` accepts). Before the first attempt of the unit, twice calls it once, writes the rows
to a Parquet file it manages and records the file's fingerprint (``twice-fp-v3``; older
snapshots keep their ``twice-fp-v2``) as version 1 of the snapshot store
``snapshot://PIPELINE/TASK``, partition = the interval. Every attempt and
rerun reads that file through ``ctx.snapshot.read()``, which refuses a file whose fingerprint no
longer matches the record. The source is read again only when asked (``refresh_snapshots`` on
the executor, ``--refresh-snapshots`` on the CLI); a refreshed snapshot with other rows becomes
version N of the store, and from version 2 on its checksum is part of the unit's input version
(``+snap:CHECKSUM``), so the changed source is a new unit of work, never an equivalent retry.

Files live under ``$TWICE_SNAPSHOT_ROOT`` (default ``.twice-snapshots`` in the working
directory), at ``PIPELINE/TASK/INTERVAL/vN.parquet``; the ledger keeps the fingerprint, so a
file that was changed or lost is detected, never silently read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twice.errors import TwiceError

if TYPE_CHECKING:
    import pyarrow as pa

    from twice.core.interval import Interval
    from twice.define.pipeline import Task
    from twice.ledger import Ledger

ROOT_ENV = "TWICE_SNAPSHOT_ROOT"
DEFAULT_ROOT = ".twice-snapshots"
SCHEME = "snapshot://"


class SnapshotError(TwiceError):
    """A snapshot could not be taken, or its file no longer matches its recorded fingerprint."""


def snapshot_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Where snapshot files live: ``root``, else ``$TWICE_SNAPSHOT_ROOT``, else the default."""
    return Path(root if root is not None else os.environ.get(ROOT_ENV, DEFAULT_ROOT))


def store_of(pipeline: str, task: str) -> str:
    """The ledger's name for a task's snapshot store (fingerprints are kept per partition)."""
    return f"{SCHEME}{pipeline}/{task}"


@dataclass(frozen=True)
class SnapshotView:
    """One recorded snapshot, as a task sees it (``ctx.snapshot``); picklable, so a task in a
    child process reads the same file."""

    store: str
    partition: str
    version: int
    path: str
    rows: int
    checksum: str
    algorithm: str = ""  # of the recorded checksum; "" = the current one

    def read(self) -> pa.Table:
        """The snapshot's rows, after checking the file still has the recorded fingerprint."""
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(self.path)
        except (OSError, ValueError) as exc:
            raise SnapshotError(
                f"snapshot {self.store} [{self.partition}] v{self.version}: cannot read "
                f"{self.path} ({exc}); set ${ROOT_ENV} to where it was taken, or refresh it"
            ) from None
        rows, checksum = _fingerprint(table, self.algorithm)
        if (rows, checksum) != (self.rows, self.checksum):
            raise SnapshotError(
                f"snapshot {self.store} [{self.partition}] v{self.version} at {self.path} "
                f"changed on disk: recorded {self.rows} rows / {self.checksum}, found {rows} "
                f"rows / {checksum}; refresh the snapshot to read the source again"
            )
        return table

    def to_detail(self) -> dict[str, Any]:
        return {"store": self.store, "partition": self.partition, "version": self.version,
                "path": self.path, "rows": self.rows, "checksum": self.checksum}


def latest(ledger: Ledger, pipeline: str, task: str, interval: Interval,
           root: str | os.PathLike[str] | None = None) -> SnapshotView | None:
    """The latest recorded snapshot of ``task`` for ``interval``, if any."""
    store = store_of(pipeline, task)
    record = ledger.latest_fingerprint(store, interval.label)
    if record is None:
        return None
    path = _path(snapshot_root(root), pipeline, task, interval, record.version)
    return SnapshotView(store, interval.label, record.version, str(path), record.row_count,
                        record.checksum, record.algorithm or "")


def input_version_suffix(ledger: Ledger, pipeline: str, task: str, interval: Interval) -> str:
    """What a snapshot adds to the unit's input version: nothing while the latest snapshot has
    the first one's rows (the unit was identified before the first was taken), else
    ``+snap:CHECKSUM``, so a changed source is a new unit of work. Content, not version
    numbers: two processes that raced to take the same snapshot name the same unit."""
    versions = ledger.fingerprints(store_of(pipeline, task), interval.label)
    if not versions or versions[-1].checksum == versions[0].checksum:
        return ""
    return f"+snap:{versions[-1].checksum}"


def ensure(ledger: Ledger, task: Task, pipeline: str, interval: Interval, *,
           refresh: bool = False, root: str | os.PathLike[str] | None = None) -> SnapshotView:
    """The snapshot an attempt reads: the latest recorded one, taken now if there is none or
    ``refresh`` asks for the source again (a refresh with the same rows keeps the version)."""
    current = latest(ledger, pipeline, task.name, interval, root)
    if current is not None and not refresh:
        return current
    return take(ledger, task, pipeline, interval, root=root, previous=current)


def take(ledger: Ledger, task: Task, pipeline: str, interval: Interval, *,
         root: str | os.PathLike[str] | None = None,
         previous: SnapshotView | None = None) -> SnapshotView:
    """Read the source for ``interval`` once, store it, record its fingerprint."""
    from twice.destinations.columns import schema_of
    from twice.destinations.fingerprint import ALGORITHM
    from twice.destinations.rows import to_arrow
    from twice.engine.owned_write import rows_of
    from twice.engine.verification import schema_signature

    if task.snapshot is None:
        raise SnapshotError(f"task {task.name!r} declares no snapshot=")
    table = to_arrow(rows_of(task.snapshot(interval)))
    rows, checksum = _fingerprint(table)
    previous = latest(ledger, pipeline, task.name, interval, root) or previous  # raced?
    if previous is not None and (previous.rows, previous.checksum) == (rows, checksum) \
            and Path(previous.path).exists():
        return previous
    store = store_of(pipeline, task.name)
    base = snapshot_root(root)
    version = 1 if previous is None else previous.version + 1
    _write(table, _path(base, pipeline, task.name, interval, version))
    record = ledger.record_fingerprint(
        store, interval.label, rows, checksum, columns=tuple(table.column_names),
        algorithm=ALGORITHM, schema=schema_signature(schema_of(table)),
    )
    path = _path(base, pipeline, task.name, interval, record.version)
    if record.version != version:  # another process recorded a version meanwhile
        _write(table, path)
        _path(base, pipeline, task.name, interval, version).unlink(missing_ok=True)
    return SnapshotView(store, interval.label, record.version, str(path), rows, checksum)


def _fingerprint(table: pa.Table, algorithm: str = "") -> tuple[int, str]:
    """(rows, checksum) of a snapshot's table by ``algorithm`` (default: the current one; a
    snapshot recorded with ``twice-fp-v2`` is checked with v2)."""
    from twice.destinations.columns import schema_of
    from twice.destinations.fingerprint import (
        ALGORITHM_V2,
        arrow_sums,
        arrow_sums_v2,
        checksum_from_sums,
    )

    sums = arrow_sums_v2 if algorithm == ALGORITHM_V2 else arrow_sums
    rows, high, low = sums(table, list(schema_of(table).items()))
    return rows, checksum_from_sums(high, low)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _path(root: Path, pipeline: str, task: str, interval: Interval, version: int) -> Path:
    return root / _safe(pipeline) / _safe(task) / _safe(interval.label) / f"v{version}.parquet"


def _write(table: pa.Table, path: Path) -> None:
    """Write atomically: a reader sees the whole file or none (temp file, fsync, rename)."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp-{os.getpid()}")
    pq.write_table(table, temporary)
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
