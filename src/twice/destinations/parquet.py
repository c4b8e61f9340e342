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
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from twice.destinations.base import DestinationSpec, WriteResult
from twice.destinations.columns import ColumnType, Schema, SchemaError, schema_of
from twice.destinations.errors import DestinationError
from twice.destinations.identifiers import (
    validate_identifier,
    validate_identifiers,
    validate_path_value,
)
from twice.destinations.rows import RowsLike, check_keys, to_arrow
from twice.destinations.slices import PartitionError, PartitionSpec, Slice

SCHEMA_FILE = "_twice_schema.arrow"
LOCK_FILE = ".twice.lock"
_NEW, _OLD, _DEL = ".twice-new-", ".twice-old-", ".twice-del-"
_PARTITION_KINDS = ("date", "integer", "string")
_META_PARTITION = b"twice.partition_column"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class ParquetDestination:
    """A Hive-partitioned Parquet dataset written with atomic per-partition commits."""

    engine = "parquet"

    def __init__(
        self,
        root: Path,
        *,
        spec: str,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
        overwrite: str = "static",
    ) -> None:
        self.root = root
        self.spec = spec
        self.partition_column = (
            None if partition_column is None
            else validate_identifier(partition_column, "partition_column")
        )
        self.key_columns = validate_identifiers(key_columns, "key column")
        self.overwrite = _check_mode(overwrite)
        self.use_exchange = _renameat2 is not None
        self._arrow_schema()  # learn (or check) the partition column the dataset records

    def __enter__(self) -> ParquetDestination:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ParquetDestination {self.spec}>"

    def close(self) -> None:
        """Nothing stays open between calls."""

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
        stored = (schema.metadata or {}).get(_META_PARTITION, b"").decode() or None
        if stored and self.partition_column is None:
            self.partition_column = stored
        elif stored and stored != self.partition_column:
            raise DestinationError(
                f"{self.spec}: dataset is partitioned by {stored!r}, not {self.partition_column!r}"
            )
        return schema

    def _write_schema(self, table: pa.Table, column: str) -> None:
        schema = table.schema.with_metadata({_META_PARTITION: column.encode()})
        temp = self.root / f"{_NEW}schema-{uuid.uuid4().hex}"
        with open(temp, "wb") as handle:
            handle.write(schema.serialize().to_pybytes())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.root / SCHEMA_FILE)
        _fsync_dir(self.root)

    # -- writes -----------------------------------------------------------------------------

    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, overwrite: str | None = None
    ) -> WriteResult:
        """Replace the partitions of ``partition`` (static) or those receiving rows (dynamic)."""
        mode = _check_mode(overwrite or self.overwrite)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._recover()
            existing = self.schema()
            table = to_arrow(rows, target=existing)
            schema = existing or schema_of(table)
            column = self._require_partition_column(schema)
            slc = Slice.of(column, schema[column], partition)
            slc.check_rows(table)
            check_keys(table, self.key_columns)
            if existing is None:
                self._write_schema(table, column)
            receiving = self._split(table, column, schema[column])
            current = self._partitions(slc, schema[column]) if mode == "static" else {}
            deleted = 0
            for name, part in receiving.items():
                deleted += self._commit(name, part.drop_columns([column]))
            removed = sorted(set(current) - set(receiving))
            for name in removed:
                deleted += _count_rows(self.root / name)
                self._remove(name)
            _fsync_dir(self.root)
        return WriteResult(
            self.spec, slc.label, mode, table.num_rows, deleted,
            partitions_written=tuple(sorted(receiving)), partitions_removed=tuple(removed),
        )

    def upsert(self, rows: RowsLike, *, partition: PartitionSpec = None) -> WriteResult:
        raise DestinationError(
            f"{self.spec}: Parquet datasets support replace_partition only; an upsert needs a "
            "table format with row-level updates (Delta, Iceberg) or a SQL destination"
        )

    def _commit(self, name: str, table: pa.Table) -> int:
        """Stage ``table`` and swap it in as partition directory ``name``; return old rows."""
        token = uuid.uuid4().hex[:12]
        staging = self.root / f"{_NEW}{name}-{token}"
        staging.mkdir()
        with open(staging / "part-00000.parquet", "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_dir(staging)
        self._before_swap(name)
        target = self.root / name
        if not target.exists():
            os.rename(staging, target)
            return 0
        old_rows = _count_rows(target)
        if self.use_exchange and _exchange(staging, target):
            _fsync_dir(self.root)
            shutil.rmtree(staging)
        else:
            aside = self.root / f"{_OLD}{name}-{token}"
            os.replace(target, aside)
            self._between_renames(name)
            os.replace(staging, target)
            _fsync_dir(self.root)
            shutil.rmtree(aside)
        return old_rows

    def _remove(self, name: str) -> None:
        doomed = self.root / f"{_DEL}{name}-{uuid.uuid4().hex[:12]}"
        os.replace(self.root / name, doomed)
        _fsync_dir(self.root)
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
            flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
            try:
                fcntl.flock(handle.fileno(), flags)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

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
            _fsync_dir(self.root)
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

    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Rows of the matching partitions (all when ``partition`` is None), schema order."""
        self._recover_before_read()
        arrow_schema = self._arrow_schema()
        if arrow_schema is None:
            raise DestinationError(f"{self.spec}: no twice dataset here ({SCHEMA_FILE} missing)")
        schema = schema_of(arrow_schema.empty_table())
        column = self._require_partition_column(schema)
        names = list(schema) if columns is None else list(columns)
        missing = [n for n in names if n not in schema]
        if missing:
            raise SchemaError(f"columns {missing} are not in the dataset (has {list(schema)})")
        slc = None if partition is None else Slice.of(column, schema[column], partition)
        file_columns = [n for n in names if n != column]
        file_schema = pa.schema([arrow_schema.field(n) for n in file_columns])
        pieces = []
        for name, value in sorted(self._partitions(slc, schema[column]).items()):
            for path in sorted((self.root / name).glob("*.parquet")):
                piece = pq.read_table(path, columns=file_columns, schema=file_schema)
                if column in names:
                    constant = pa.array([value] * piece.num_rows, schema[column].arrow())
                    piece = piece.append_column(column, constant)
                pieces.append(piece.select(names))
        out_schema = pa.schema([arrow_schema.field(n) for n in names])
        if not pieces:
            return out_schema.empty_table()
        return pa.concat_tables(pieces).cast(out_schema)

    def fingerprint_sums(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """Arrow-computed sums (see :mod:`twice.fingerprint`); no SQL engine involved."""
        from twice.fingerprint import arrow_sums

        table = self.read_partition(partition, columns)
        return arrow_sums(table, list(schema_of(table).items()))

    def row_count(self, partition: PartitionSpec = None) -> int:
        """From Parquet footers only: as cheap as ``count(*)`` gets."""
        self._recover_before_read()
        schema = self.schema()
        if schema is None:
            raise DestinationError(f"{self.spec}: no twice dataset here ({SCHEMA_FILE} missing)")
        column = self._require_partition_column(schema)
        slc = None if partition is None else Slice.of(column, schema[column], partition)
        return sum(_count_rows(self.root / name) for name in self._partitions(slc, schema[column]))

    def null_counts(self, partition: PartitionSpec, columns: Sequence[str]) -> dict[str, int]:
        table = self.read_partition(partition, columns)
        return {c: table.column(c).null_count for c in columns}

    # -- helpers ----------------------------------------------------------------------------

    def _require_partition_column(self, schema: Schema) -> str:
        column = self.partition_column
        if column is None:
            raise DestinationError(f"{self.spec}: add ?partition_column=NAME (Hive key)")
        if column not in schema:
            raise SchemaError(f"partition column {column!r} is not in the rows ({list(schema)})")
        if schema[column].kind not in _PARTITION_KINDS:
            raise SchemaError(
                f"Parquet partition column {column!r} is {schema[column]}; use a date, integer "
                "or string column (its value becomes a directory name)"
            )
        if len(schema) < 2:
            raise SchemaError("a Parquet dataset needs a column besides the partition column")
        return column

    def _split(self, table: pa.Table, column: str, ctype: ColumnType) -> dict[str, pa.Table]:
        """Incoming rows by partition directory name."""
        parts: dict[str, pa.Table] = {}
        for value in pc.unique(table.column(column)).to_pylist():
            parts[self._dir_name(column, value)] = table.filter(
                pc.equal(table.column(column), pa.scalar(value, ctype.arrow()))
            )
        return parts

    @staticmethod
    def _dir_name(column: str, value: Any) -> str:
        text = value.isoformat() if isinstance(value, date) else str(value)
        return f"{column}={validate_path_value(text, f'partition value of {column!r}')}"

    def _partitions(self, slc: Slice | None, ctype: ColumnType) -> dict[str, Any]:
        """Existing partition directories (name -> typed value) inside ``slc`` (all if None)."""
        found: dict[str, Any] = {}
        prefix = f"{self.partition_column}="
        for entry in self.root.iterdir():
            if not entry.is_dir() or not entry.name.startswith(prefix):
                continue
            text = entry.name[len(prefix):]
            try:
                value = _parse_value(text, ctype)
            except ValueError:
                raise PartitionError(
                    f"{self.spec}: directory {entry.name!r} does not hold a {ctype} value"
                ) from None
            if slc is None or slc.contains(value):
                found[entry.name] = value
        return found


def _parse_value(text: str, ctype: ColumnType) -> Any:
    if ctype.kind == "date":
        return date.fromisoformat(text)
    if ctype.kind == "integer":
        return int(text)
    return text


def _check_mode(mode: str) -> str:
    if mode not in ("static", "dynamic"):
        raise DestinationError(f"overwrite must be 'static' or 'dynamic', got {mode!r}")
    return mode


def _count_rows(directory: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in directory.glob("*.parquet"))


def _remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_renameat2() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux ``renameat2(RENAME_EXCHANGE)``).

    Returns False when the platform or file system cannot (the caller falls back to two
    renames); any other failure is raised.
    """
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"renameat2 exchange failed: {os.strerror(code)}", str(a))


def open_destination(spec: DestinationSpec) -> ParquetDestination:
    """Open ``parquet:///abs/dir[?partition_column=day&overwrite=static|dynamic]``."""
    options = dict(spec.options)
    overwrite = options.pop("overwrite", "static")
    if options:
        raise DestinationError(f"parquet destination: unknown options {sorted(options)}")
    if spec.fragment:
        raise DestinationError("parquet destinations name a directory; drop the '#...' part")
    root = Path(spec.file_path()).expanduser().absolute()
    query = spec.twice_query()
    if overwrite != "static":
        query = f"{query}&overwrite={overwrite}" if query else f"?overwrite={overwrite}"
    return ParquetDestination(
        root, spec=f"parquet://{root}{query}", partition_column=spec.partition_column,
        key_columns=spec.key_columns, overwrite=overwrite,
    )
