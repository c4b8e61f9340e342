"""Partitioned Parquet destinations: ``parquet:///abs/dir?partition_column=day``.

Layout (Hive, readable by Spark, DuckDB, pyarrow.dataset): ``dir/day=2026-11-30/part-00000.parquet``
with the partition column kept in the directory name only, plus ``dir/_twice_schema.arrow`` (the
full Arrow schema, so types survive) and ``dir/.twice.lock``. Readers skip names starting with
``.`` or ``_`` (pyarrow's default ``ignore_prefixes``), so twice's staging directories and
metadata are invisible to them.

Overwrite modes (``?overwrite=`` or per call):

* ``static`` (default): every existing partition matching the slice is replaced; one that
  receives no rows is *removed*, so a reprocessed interval that now yields zero rows is emptied.
* ``dynamic``: only partitions receiving rows are replaced; a partition whose rerun yields zero
  rows keeps its old rows (as Spark's ``partitionOverwriteMode=dynamic``). A backfill should name
  its partitions explicitly, i.e. use static.

Commit protocol, per partition, under an exclusive ``flock`` on ``.twice.lock``:

1. Write the new files into a hidden sibling ``.twice-new-<key>=<value>-<token>/``; fsync each
   file and the directory.
2. If ``<key>=<value>/`` does not exist: ``rename(staging, target)``.
   Otherwise swap atomically with ``renameat2(staging, target, RENAME_EXCHANGE)`` (Linux): after
   it, ``target`` holds the new files and ``staging`` the old ones, which are then deleted.
   Without ``renameat2`` (non-Linux): ``os.replace(target, .twice-old-<key>=<value>-<token>)``,
   then ``os.replace(staging, target)``; between the two renames the partition is briefly absent.
3. fsync the dataset directory.
4. Partitions removed by a static overwrite are first renamed to ``.twice-del-...`` (one atomic
   step for readers), then deleted.

Recovery, at the start of every write (and opportunistically before reads, when no writer holds
the lock): ``.twice-new-*`` and ``.twice-del-*`` are deleted (uncommitted data, or old data after
a finished swap); a ``.twice-old-K=V-*`` whose ``K=V`` is missing is renamed back (a crash between
the two fallback renames rolls back to the old partition), otherwise deleted. So a crash at any
point leaves every partition either old or new, never half written, and leftovers vanish on the
next run. Each partition commits atomically; a write touching several partitions is not atomic
across them (a crash may leave some replaced and some not; rerunning the interval converges).
A reader that listed files just before a swap may find them gone and must retry; it never mixes
old and new files of one partition. Single machine, POSIX file systems only (``flock``).

Commit records (stamped writes, see :mod:`twice.destinations.commits`): the record is written as
``_twice_commit.json`` into the staging directory of every partition the write swaps in, so it
lands atomically with that partition's files. Every swap carries the partition's earlier records
into ``_twice_commits.jsonl`` beside it (also on unstamped writes), so records are never lost
(they grow by one short line per write of the partition). A static overwrite that empties a
partition holding records (or with a stamp) leaves the directory with its records and no data
files instead of deleting it: readers see no rows there. A write that changes no partition (zero
rows, nothing to empty) keeps its record in ``<dataset>/_twice_commits.jsonl``. Fencing reads the
records of the slice's partitions under the lock, before anything is staged. ``append`` stages
the partition's existing files (hard links) plus one new ``part-<token>.parquet``; stamped, it is
exactly once per unit and generation *per partition* (a retry after a crash in the middle of a
multi-partition append completes the partitions that lack the record). Readers list
``*.parquet`` only, and Hive readers skip ``_`` names, so the JSON files are invisible to data.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from twice.core import processes
from twice.core.schemes import NO_UPSERT
from twice.destinations.base import ArrowScanned, DestinationSpec, WriteResult
from twice.destinations.columns import ColumnType, Schema, require_columns, schema_of
from twice.destinations.commits import (
    ACTIVE,
    PARQUET_COMMIT_FILE,
    PARQUET_HISTORY_FILE,
    CommitRecord,
    StampArg,
    WriteStamp,
    check_adoption,
    check_fence_records,
    check_ledger_records,
    resolve_stamp,
)
from twice.destinations.errors import (
    DestinationError,
    DestinationSpecError,
    DestinationUnavailableError,
)
from twice.destinations.hive import (
    HiveDestination,
    Incoming,
    canonical_query,
    check_mode,
    dir_name,
    fsync_dir,
    replace_durably,
    write_durable,
)
from twice.destinations.landing import Landing, admit, arrow_nulls
from twice.destinations.rows import RowsLike
from twice.destinations.slices import PartitionSpec, Slice

SCHEMA_FILE = "_twice_schema.arrow"
LOCK_FILE = ".twice.lock"
_NEW, _OLD, _DEL = ".twice-new-", ".twice-old-", ".twice-del-"
_META_PARTITION = b"twice.partition_column"


class ParquetDestination(HiveDestination, ArrowScanned):
    """A Hive-partitioned Parquet dataset written with atomic per-partition commits."""

    engine = "parquet"
    kind_name = "Parquet"
    noun = "dataset"
    no_upsert = NO_UPSERT["parquet"]

    def __init__(
        self,
        root: Path,
        *,
        spec: str,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
        overwrite: str = "static",
    ) -> None:
        super().__init__(spec=spec, partition_column=partition_column, key_columns=key_columns,
                         overwrite=overwrite)
        self.root = root
        self.use_exchange = processes.can_exchange()
        self._arrow_schema()  # learn (or check) the partition column the dataset records

    # -- schema -----------------------------------------------------------------------------

    def schema(self) -> Schema | None:
        arrow = self._arrow_schema()
        if arrow is None:
            return None
        return schema_of(arrow.empty_table())

    def _arrow_schema(self) -> pa.Schema | None:
        path = self.root / SCHEMA_FILE
        if not path.exists():
            return None
        schema = pa.ipc.read_schema(pa.py_buffer(path.read_bytes()))
        self._adopt_partition_column(
            (schema.metadata or {}).get(_META_PARTITION, b"").decode() or None
        )
        return schema

    def _write_schema(self, table: pa.Table, column: str) -> None:
        schema = table.schema.with_metadata({_META_PARTITION: column.encode()})
        replace_durably(self.root / SCHEMA_FILE, schema.serialize().to_pybytes(),
                        self.root / f"{_NEW}schema-{uuid.uuid4().hex}")

    # -- writes -----------------------------------------------------------------------------

    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, overwrite: str | None = None,
        stamp: StampArg = ACTIVE,
    ) -> WriteResult:
        """Replace the partitions of ``partition`` (static) or those receiving rows (dynamic).

        With a stamp (default: the active one) every partition swapped in carries the commit
        record; an older fencing token than the slice's newest is refused before staging.
        """
        owner = resolve_stamp(stamp)
        mode = check_mode(overwrite or self.overwrite)
        with self._writing(rows, partition, whole_table=False) as (incoming, current):
            existing, schema, table, column, label = incoming.unpacked()
            if owner is not None:
                self._check_fence(owner, current)
            receiving = self._split(table, column, schema[column])
            emptied = sorted(
                n for n in current if n not in receiving and _data_files(self.root / n)
            ) if mode == "static" else []
            record = None
            if owner is not None:
                deleting = sum(_count_rows(self.root / n) for n in [*receiving, *emptied]
                               if (self.root / n).is_dir())
                kept = {n: v for n, v in current.items() if n not in receiving and n not in emptied}
                record = self._new_record(
                    owner, "replace", label, table, kept, sorted([*receiving, *emptied]),
                    {"rows_deleted": deleting},
                )
            if existing is None:  # after the admission: a refused first write leaves nothing
                self._write_schema(table, column)
            deleted = 0
            for name, part in receiving.items():
                deleted += self._commit(name, part.drop_columns([column]), record=record)
            for name in emptied:
                deleted += _count_rows(self.root / name)
                if record is not None or _record_files(self.root / name):
                    self._commit(name, None, record=record)  # keep the records, drop the rows
                else:
                    self._remove(name)
            if record is not None and not receiving and not emptied:
                self._add_dataset_record(record)
            fsync_dir(self.root)
        return WriteResult(
            self.spec, label, mode, table.num_rows, deleted,
            partitions_written=tuple(sorted(receiving)), partitions_removed=tuple(emptied),
            commit=record,
        )

    def append(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Add ``rows`` (inside ``partition`` when given) as a new file in each partition.

        With a stamp (default: the active one): exactly once per unit of work and generation.
        A partition already holding an ``append`` record of the stamp's unit and generation is
        skipped; when that earlier append is complete, nothing is written and the result
        carries its record (``rows_written=0``). Without a stamp a retry appends again.
        """
        owner = resolve_stamp(stamp)
        with self._writing(rows, partition, whole_table=True) as (incoming, current):
            existing, schema, table, column, label = incoming.unpacked()
            receiving = self._split(table, column, schema[column])
            if owner is not None:
                self._check_fence(owner, current)
                done, skip = self._appended(owner, current)
                if done is not None:
                    return WriteResult(self.spec, label, "append", 0, None, commit=done)
                receiving = {n: t for n, t in receiving.items() if n not in skip}
            written = sum(t.num_rows for t in receiving.values())
            record = None
            if owner is not None:
                new = (pa.concat_tables(list(receiving.values())) if receiving
                       else table.slice(0, 0))
                record = self._new_record(
                    owner, "append", label, new, current, sorted(receiving), {}
                )
            if existing is None:  # after the admission: a refused first write leaves nothing
                self._write_schema(table, column)
            for name, part in receiving.items():
                self._commit(name, part.drop_columns([column]), keep=True, record=record)
            if record is not None and not receiving:
                self._add_dataset_record(record)
            fsync_dir(self.root)
        return WriteResult(
            self.spec, label, "append", written, None,
            partitions_written=tuple(sorted(receiving)), commit=record,
        )

    @contextmanager
    def _writing(
        self, rows: RowsLike, partition: PartitionSpec, *, whole_table: bool
    ) -> Iterator[tuple[Incoming, dict[str, Any]]]:
        """A write's frame: under the dataset's lock, after recovery, the checked incoming
        rows and the existing partitions of the slice (name -> value)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._recover()
            incoming = self._incoming(rows, partition, whole_table=whole_table)
            yield incoming, self._partitions(incoming.slice, incoming.schema[incoming.column])

    def _commit(
        self, name: str, table: pa.Table | None, *, keep: bool = False,
        record: CommitRecord | None = None,
    ) -> int:
        """Stage and swap in partition directory ``name``; return the old directory's rows.

        The staging directory gets: the current files when ``keep`` (append: hard links),
        ``table`` as a new file (none: a directory of records only), the current directory's
        records as history, and ``record`` as ``_twice_commit.json``.
        """
        token = uuid.uuid4().hex[:12]
        staging = self.root / f"{_NEW}{name}-{token}"
        staging.mkdir()
        target = self.root / name
        exists = target.is_dir()
        if keep and exists:
            for path in _data_files(target):
                _link_or_copy(path, staging / path.name)
        if table is not None:
            file_name = f"part-{token}.parquet" if keep else "part-00000.parquet"
            with open(staging / file_name, "wb") as handle:
                pq.write_table(table, handle)
                handle.flush()
                os.fsync(handle.fileno())
        history = _history_text(target) if exists else ""
        if history:
            write_durable(staging / PARQUET_HISTORY_FILE, history)
        if record is not None:
            write_durable(staging / PARQUET_COMMIT_FILE, record.to_json() + "\n")
        fsync_dir(staging)
        self._before_swap(name)
        if not exists:
            os.rename(staging, target)
            return 0
        old_rows = _count_rows(target)
        if self.use_exchange and _exchange(staging, target):
            fsync_dir(self.root)
            shutil.rmtree(staging)
        else:
            aside = self.root / f"{_OLD}{name}-{token}"
            os.replace(target, aside)
            self._between_renames(name)
            os.replace(staging, target)
            fsync_dir(self.root)
            shutil.rmtree(aside)
        return old_rows

    # -- commit records -----------------------------------------------------------------------

    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]:
        """This dataset's commit records (of ``uow_id`` only, if given), by (token,
        committed_at). A record of a multi-partition write counts once, and only when every
        partition it wrote carries it. ``[]`` when there is no dataset (nothing is created)."""
        if not self.root.is_dir():
            return []
        self._recover_before_read()
        with self._shared_lock():
            found = [(where, record) for where in self._record_dirs()
                     for record in _read_records(self.root / where)]
            found += [("", record) for record in _read_records(self.root)]
        groups: dict[str, tuple[CommitRecord, set[str]]] = {}
        records = []
        for where, record in found:
            write_id = str(record.extra.get("write_id") or "")
            if not write_id:
                records.append(record)
                continue
            groups.setdefault(write_id, (record, set()))[1].add(where)
        for record, places in groups.values():
            if set(record.extra.get("partitions") or ()) <= places:
                records.append(record)
        if uow_id is not None:
            records = [r for r in records if r.uow_id == uow_id]
        return sorted(records, key=lambda r: r.sort_key)

    def _record_dirs(self) -> list[str]:
        column = self.partition_column
        if column is None:
            return []
        return sorted(e.name for e in self.root.iterdir()
                      if e.is_dir() and e.name.startswith(f"{column}="))

    def _slice_records(self, names: Iterable[str]) -> list[tuple[str, CommitRecord]]:
        """Records of the partitions ``names`` and of the dataset itself (where, record)."""
        found = [(n, r) for n in names for r in _read_records(self.root / n)]
        return found + [("", r) for r in _read_records(self.root)]

    def _check_fence(self, owner: WriteStamp, names: Iterable[str]) -> None:
        """The ownership check (every partition's records: a dataset belongs to one ledger),
        then the fencing check (the slice's records)."""
        if owner.ledger:
            check_ledger_records(owner, self._all_records(), self.spec)
        check_fence_records(owner, [r for _, r in self._slice_records(names)], self.spec)

    def _all_records(self) -> list[CommitRecord]:
        """Every record of the dataset, complete or not (under the dataset's lock)."""
        return [r for _, r in self._slice_records(self._record_dirs())]

    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord:
        """See :meth:`BaseDestination.adopt`: an ``adopt`` record in the dataset's own history
        file, under the dataset's lock."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._recover()
            tokens = [r.token for r in self._all_records()]
            check_adoption(stamp, max(tokens) if tokens else None, self.spec)
            record = CommitRecord.adoption(stamp, table=str(self.root), note=note,
                                           operator=operator)
            self._add_dataset_record(record)
        return record

    def _appended(
        self, owner: WriteStamp, names: Iterable[str]
    ) -> tuple[CommitRecord | None, set[str]]:
        """(a complete earlier append of this unit and generation, or None; the partitions
        already holding such a record)."""
        matches = [
            (where, r) for where, r in self._slice_records(names)
            if (r.uow_id, r.generation, r.mode) == (owner.uow_id, owner.generation, "append")
        ]
        for _, record in sorted(matches, key=lambda m: m[1].sort_key):
            write_id = record.extra.get("write_id")
            partitions = record.extra.get("partitions") or ()
            if all(any(r.extra.get("write_id") == write_id for r in _read_records(self.root / p))
                   for p in partitions):
                return record, set()
        return None, {where for where, _ in matches if where}

    def _new_record(
        self, owner: WriteStamp, mode: str, label: str, new_rows: pa.Table,
        kept: dict[str, Any], partitions: list[str], extra: dict[str, Any],
    ) -> CommitRecord:
        """The record of a write whose slice will hold ``new_rows`` plus the current rows of
        the partitions ``kept``; its fingerprint is the one ``fingerprint()`` will compute
        after the write (the checksum is a sum over rows, so the parts add up). The attempt's
        admission decides on that slice before anything is staged
        (``twice.destinations.landing``)."""
        from twice.destinations.fingerprint import resolve_columns, slice_fingerprint

        arrow_schema = self._arrow_schema() or new_rows.schema  # a new dataset: the rows'
        schema = schema_of(arrow_schema.empty_table())
        column = self._require_partition_column(schema)
        try:
            columns: tuple[str, ...] | None = resolve_columns(schema)  # every column
        except DestinationError:
            columns = None
        read = list(columns or (column,))
        parts = [new_rows.select(read), self._read_dirs(kept, read, arrow_schema, column)]
        fp = slice_fingerprint(parts, schema)

        def slice_parts(names: Sequence[str]) -> list[pa.Table]:
            present = [n for n in names if n in schema]
            return [new_rows.select(present), self._read_dirs(kept, present, arrow_schema, column)]

        admit(Landing(self.spec, label, mode, new_rows.num_rows, fp.row_count,
                      arrow_nulls(slice_parts)))
        return CommitRecord.create(
            owner, table=str(self.root), slice=label, mode=mode,
            rows_written=new_rows.num_rows, row_count=fp.row_count, checksum=fp.checksum,
            algorithm=fp.algorithm, columns=fp.columns,
            extra={"write_id": uuid.uuid4().hex, "partitions": partitions, **extra},
        )

    def seal(self, stamp: WriteStamp) -> bool:
        """See :meth:`BaseDestination.seal`: a ``fence`` record in the dataset's own history
        file, which every write's fencing reads, under the dataset's lock (so it waits for a
        write in progress)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._recover()
            self._check_fence(stamp, self._record_dirs())
            self._add_dataset_record(CommitRecord.fence(stamp, table=str(self.root)))
        return True

    def _add_dataset_record(self, record: CommitRecord) -> None:
        """Record a write that changed no partition (atomic replace of the dataset's file)."""
        text = _history_text(self.root) + record.to_json() + "\n"
        replace_durably(self.root / PARQUET_HISTORY_FILE, text,
                        self.root / f"{_NEW}commits-{uuid.uuid4().hex}")

    @contextmanager
    def _shared_lock(self) -> Iterator[None]:
        """A shared ``flock`` for readers of the records (none if no writer ever ran)."""
        import fcntl

        path = self.root / LOCK_FILE
        if not path.exists():
            yield
            return
        with open(path, "rb") as handle:
            self._flock_waiting(handle, fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _remove(self, name: str) -> None:
        doomed = self.root / f"{_DEL}{name}-{uuid.uuid4().hex[:12]}"
        os.replace(self.root / name, doomed)
        fsync_dir(self.root)
        shutil.rmtree(doomed)

    def _before_swap(self, name: str) -> None:
        """Seam after staging is durable, before the swap (crash tests kill here)."""

    def _between_renames(self, name: str) -> None:
        """Seam between the two renames of the non-Linux fallback (crash tests kill here)."""

    # -- recovery ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self, blocking: bool = True) -> Iterator[bool]:
        import fcntl

        with open(self.root / LOCK_FILE, "a+b") as handle:
            try:
                if blocking:
                    self._flock_waiting(handle, fcntl.LOCK_EX)
                else:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _flock_waiting(self, handle: Any, flags: int) -> None:
        """``flock`` the dataset's lock file, waiting while another writer holds it (writers of
        one dataset take turns, each for its whole write), but refused at once when the holder
        is a stopped process: it holds the lock until resumed or ended, and a takeover must not
        hang behind it for ever, renewing a lease nobody else can take."""
        import fcntl

        pause = 0.01
        while True:
            try:
                fcntl.flock(handle.fileno(), flags | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                holder = _flock_holder(handle)
                if holder is not None and holder.stopped:
                    raise DestinationUnavailableError(
                        f"{self.spec}: the dataset's lock ({LOCK_FILE}) is held by process "
                        f"{holder.describe()}, which holds it until it is resumed (`kill -CONT "
                        f"{holder.pid}`) or ended; not waiting for it"
                    ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def recover(self) -> list[str]:
        """Clean up after a crashed writer (takes the lock); return what was done."""
        if not self.root.is_dir():
            return []
        with self._locked():
            return self._recover()

    def _recover(self) -> list[str]:
        actions = []
        for entry in sorted(self.root.iterdir()):
            name = entry.name
            if name.startswith((_NEW, _DEL)):
                _remove_path(entry)
                actions.append(f"removed {name}")
            elif name.startswith(_OLD):
                original = self.root / name[len(_OLD):].rsplit("-", 1)[0]
                if original.exists():
                    _remove_path(entry)
                    actions.append(f"removed {name}")
                else:
                    os.replace(entry, original)
                    actions.append(f"restored {original.name} from {name}")
        if actions:
            fsync_dir(self.root)
        return actions

    def _recover_before_read(self) -> None:
        if not self.root.is_dir() or not any(
            e.name.startswith((_NEW, _OLD, _DEL)) for e in self.root.iterdir()
        ):
            return
        with self._locked(blocking=False) as acquired:
            if acquired:
                self._recover()

    # -- reads ------------------------------------------------------------------------------

    def _schema_to_read(self) -> pa.Schema:
        """The dataset's Arrow schema, once a crashed write's leftovers are recovered; a read of
        a directory without one is refused (it holds no twice dataset)."""
        self._recover_before_read()
        arrow_schema = self._arrow_schema()
        if arrow_schema is None:
            raise DestinationError(f"{self.spec}: no twice dataset here ({SCHEMA_FILE} missing)")
        return arrow_schema

    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Rows of the matching partitions (all when ``partition`` is None), schema order."""
        arrow_schema = self._schema_to_read()
        schema = schema_of(arrow_schema.empty_table())
        column = self._require_partition_column(schema)
        names = list(schema) if columns is None else list(columns)
        require_columns(schema, names)
        slc = None if partition is None else Slice.of(column, schema[column], partition)
        return self._read_dirs(self._partitions(slc, schema[column]), names, arrow_schema, column)

    def _read_dirs(
        self, parts: dict[str, Any], names: Sequence[str], arrow_schema: pa.Schema, column: str
    ) -> pa.Table:
        """Columns ``names`` of the partition directories ``parts`` (name -> value)."""
        file_columns = [n for n in names if n != column]
        file_schema = pa.schema([arrow_schema.field(n) for n in file_columns])
        ctype = ColumnType.from_arrow(arrow_schema.field(column).type, column)
        pieces = []
        for name, value in sorted(parts.items()):
            for path in _data_files(self.root / name):
                piece = pq.read_table(path, columns=file_columns, schema=file_schema)
                if column in names:
                    constant = pa.array([value] * piece.num_rows, ctype.arrow())
                    piece = piece.append_column(column, constant)
                pieces.append(piece.select(list(names)))
        out_schema = pa.schema([arrow_schema.field(n) for n in names])
        if not pieces:
            return out_schema.empty_table()
        return pa.concat_tables(pieces).cast(out_schema)

    def row_count(self, partition: PartitionSpec = None) -> int:
        """From Parquet footers only: as cheap as ``count(*)`` gets."""
        schema = schema_of(self._schema_to_read().empty_table())
        column = self._require_partition_column(schema)
        slc = None if partition is None else Slice.of(column, schema[column], partition)
        return sum(_count_rows(self.root / name) for name in self._partitions(slc, schema[column]))

    # -- helpers ----------------------------------------------------------------------------

    def _split(self, table: pa.Table, column: str, ctype: ColumnType) -> dict[str, pa.Table]:
        """Incoming rows by partition directory name."""
        parts: dict[str, pa.Table] = {}
        for value in pc.unique(table.column(column)).to_pylist():
            parts[dir_name(column, value)] = table.filter(
                pc.equal(table.column(column), pa.scalar(value, ctype.arrow()))
            )
        return parts

    def _partitions(self, slc: Slice | None, ctype: ColumnType) -> dict[str, Any]:
        """Existing partition directories (name -> typed value) inside ``slc`` (all if None)."""
        return self._partitions_in(self.root, slc, ctype)


def _data_files(directory: Path) -> list[Path]:
    """The data files of a partition directory, sorted: every file whose name does not start
    with ``_`` or ``.`` (twice's records start with ``_``), whatever its extension, since that
    is what other readers read (Arrow datasets, Spark, Hive): a file copied in as
    ``part-1.snappy`` duplicates rows for them, and so it does for twice's fingerprint."""
    return sorted(path for path in directory.iterdir()
                  if path.is_file() and not path.name.startswith(("_", ".")))


def _count_rows(directory: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in _data_files(directory))


def _record_files(directory: Path) -> bool:
    return (directory / PARQUET_COMMIT_FILE).exists() or (
        directory / PARQUET_HISTORY_FILE).exists()


def _history_text(directory: Path) -> str:
    """The records of ``directory`` as JSON lines, oldest first (carried into the next swap)."""
    lines = []
    for name in (PARQUET_HISTORY_FILE, PARQUET_COMMIT_FILE):
        path = directory / name
        if path.exists():
            lines += [line for line in path.read_text().splitlines() if line.strip()]
    return "".join(line + "\n" for line in lines)


def _read_records(directory: Path) -> list[CommitRecord]:
    return [CommitRecord.from_dict(json.loads(line))
            for line in _history_text(directory).splitlines()]


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link an immutable data file into a staging directory (copy where links fail)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        with open(target, "rb") as handle:
            os.fsync(handle.fileno())


def _remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux ``renameat2(RENAME_EXCHANGE)``,
    :func:`twice.core.processes.exchange`). Returns False when the platform or file system
    cannot (the caller falls back to two renames); any other failure is raised."""
    return processes.exchange(a, b)


def open_destination(spec: DestinationSpec) -> ParquetDestination:
    """Open ``parquet:///abs/dir[?partition_column=day&overwrite=static|dynamic]``."""
    options = dict(spec.options)
    overwrite = options.pop("overwrite", "static")
    if options:
        raise DestinationSpecError(f"parquet destination: unknown options {sorted(options)}")
    if spec.fragment:
        raise DestinationSpecError("parquet destinations name a directory; drop the '#...' part")
    root = Path(spec.file_path()).expanduser().absolute()
    return ParquetDestination(
        root, spec=f"parquet://{root}{canonical_query(spec, overwrite)}",
        partition_column=spec.partition_column,
        key_columns=spec.key_columns, overwrite=overwrite,
    )


def _flock_holder(handle: Any) -> processes.Process | None:
    """Another process holding a ``flock`` on ``handle``'s file (Linux's ``/proc/locks``);
    None when none is named or it cannot be told."""
    try:
        pid = processes.flock_holder(handle.fileno())
    except (OSError, ValueError):
        return None
    return None if pid is None else processes.look(pid)
