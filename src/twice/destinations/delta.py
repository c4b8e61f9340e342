"""Delta Lake tables: ``delta:///abs/path/to/table?partition_column=day`` (needs ``twice[delta]``).

Built on ``deltalake`` (delta-rs). The table's own transaction log is the only source of truth:
twice keeps no side files.

Writes, each ONE Delta commit (one new ``_delta_log/NNN.json``, put-if-absent):

* ``replace_partition``: ``write_deltalake(mode="overwrite", predicate=<the slice>)``: the
  commit removes every file holding rows of the slice (rewriting the rows outside it) and adds
  the new rows; readers see the old version or the new one. ``partition=None`` overwrites the
  whole table.
* ``upsert``: ``DeltaTable.merge`` on ``key_columns`` (update all columns when matched, insert
  when not).
* ``append``: ``write_deltalake(mode="append")``.

Commit records ride in the same commit: the ``commitInfo`` carries the record as custom
metadata (``twice.commit``, the JSON of :class:`~twice.destinations.commits.CommitRecord`), and
the commit holds two *app transactions* (Delta ``txn`` actions): ``twice-unit:<uow_id>`` with
version ``generation * 2**32 + attempt`` and ``twice-fence:<fence_key>`` with version = the
lease's fencing token. :meth:`DeltaDestination.commit_records` reads the records back from the
table's history (``DeltaTable.history()``), so reconciliation reads the log itself: a record is
there exactly when its rows are.

Fencing: before writing, the ``twice-fence:<fence_key>`` transaction version of the snapshot the
write reads (``DeltaTable.transaction_version``) is the newest token committed for the slot; an
older stamp is refused. Two writers of one slot race safely: both commits carry the same app id,
and delta-rs's conflict checker fails the second commit (``CommitFailedError``) when a winning
commit updated an app id it carries; the loser reloads the table, checks the fence again (and
is refused if the winner's token is newer) or redoes its write on the new version. Any other
commit conflict is retried the same way (a replace or an upsert is idempotent; a stamped append
first looks for its own record).

The fingerprint in the record is computed before the commit, from what the commit will leave in
the slice: the new rows (replace), the slice at the read version plus the new rows (append), the
slice at the read version without the incoming keys plus the incoming rows (upsert); delta-rs's
conflict checks fail a commit whose read files changed meanwhile, so it is the slice as
committed (a concurrent *unstamped* blind append to the same slice is outside this guarantee).

Time travel (``twice diff``): :meth:`DeltaDestination.versions` lists the table versions the log
still holds and :meth:`DeltaDestination.read_partition_at` reads a slice at one of them.

Layout and limits: twice creates tables without physical partitions (the slice is a predicate,
so any date or timestamp column can be the partition column) and reads them with Arrow; tables
written by other tools may be partitioned. Tables using deletion vectors or column mapping are
refused (read with file-level Arrow). Old commit records disappear from ``history()`` when
Delta's log retention cleans up old log files (``delta.logRetentionDuration``, 30 days by
default); fencing keeps working because checkpoints keep the app transactions, and so does
append-once: an append whose unit's app transaction names its generation is not repeated
though its record is gone (the write then returns no record), and an unknown outcome is
settled from that app transaction (:meth:`DeltaDestination.marked_attempt`). Object storage
(``delta:s3://bucket/path``, credentials from the environment as delta-rs reads them) works
through delta-rs but is not what twice's tests cover; on local disk reads use Arrow's local file
system directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from twice.core.extras import require
from twice.destinations.base import ArrowScanned, DestinationSpec, WriteResult
from twice.destinations.columns import (
    ColumnType,
    Schema,
    SchemaError,
    require_columns,
    stored_schema,
)
from twice.destinations.commits import (
    ACTIVE,
    Appended,
    CommitRecord,
    Holder,
    StampArg,
    WriteStamp,
    check_adoption,
    check_fence,
    check_ledger_records,
    holder_of,
    marker_generation,
    marker_parts,
    resolve_stamp,
    unit_marker,
)
from twice.destinations.errors import (
    DestinationError,
    DestinationSpecError,
    DestinationUnavailableError,
)
from twice.destinations.landing import Landing, admit, arrow_nulls
from twice.destinations.rows import RowsLike, check_keys, to_arrow
from twice.destinations.slices import PartitionSpec, Slice

COMMIT_KEY = "twice.commit"  # commitInfo custom metadata holding the record's JSON
UNIT_APP = "twice-unit:"  # app transaction per unit of work: generation * 2**32 + attempt
FENCE_APP = "twice-fence:"  # app transaction per slot: the newest fencing token
MAX_COMMIT_TRIES = 10
PARTITION_KINDS = ("date", "integer", "string", "timestamp", "timestamptz", "boolean")
# Reader features twice reads correctly with plain Parquet (others change what a file means).
READABLE_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _deltalake() -> Any:
    return require("deltalake", extra="delta", who="delta:// destinations")


class DeltaDestination(ArrowScanned):
    """A Delta Lake table written with one Delta commit per write (see the module doc)."""

    engine = "delta"

    def __init__(
        self,
        uri: str,
        *,
        spec: str,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
        local_root: Path | None = None,
    ) -> None:
        super().__init__(spec=spec, partition_column=partition_column, key_columns=key_columns)
        self.uri = uri
        self.root = local_root  # the table's directory when it is on local disk

    # -- the table --------------------------------------------------------------------------

    def _table(self, version: int | None = None) -> Any:
        """The table (at ``version``, default the latest), or None when there is none."""
        dl = _deltalake()
        if self.root is not None and not (self.root / "_delta_log").is_dir():
            return None
        if self.root is None and not dl.DeltaTable.is_deltatable(self.uri):
            return None
        try:
            return dl.DeltaTable(self.uri, version=version)
        except dl.exceptions.TableNotFoundError:
            return None
        except dl.exceptions.DeltaError as exc:
            if version is not None:
                raise DestinationError(
                    f"{self.spec}: version {version} cannot be read ({exc}); see versions()"
                ) from None
            raise

    def _require(self, version: int | None = None) -> Any:
        table = self._table(version)
        if table is None:
            raise DestinationError(f"{self.spec}: no Delta table here")
        return table

    def schema(self) -> Schema | None:
        table = self._table()
        return None if table is None else _schema_of(table)

    def versions(self) -> list[int]:
        """The table versions whose commits the log still holds, ascending ([] if no table)."""
        table = self._table()
        if table is None:
            return []
        return sorted(int(entry["version"]) for entry in table.history())

    # -- writes -----------------------------------------------------------------------------

    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Replace the slice of ``partition`` (every row when None) in one Delta commit: an
        overwrite whose predicate is the slice. With a stamp (default: the active one) the
        commit carries the commit record, after the fencing check on the version read."""
        owner = resolve_stamp(stamp)
        dl = _deltalake()

        def write(table: Any, incoming: pa.Table, slc: Slice | None, label: str) -> WriteResult:
            deleted = 0 if table is None else self._count(table, slc)
            record = None
            if owner is not None:
                record = self._record(owner, "replace", label, incoming, [incoming],
                                      {"rows_deleted": deleted})

            def commit() -> None:
                dl.write_deltalake(
                    self.uri if table is None else table, incoming, mode="overwrite",
                    predicate=None if slc is None else _predicate(slc),
                    commit_properties=_properties(dl, owner, record),
                )

            return self._commit(commit, "replace", label, incoming, record, deleted)

        return self._committing(rows, partition, owner, write, whole_table=False)

    def append(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Append ``rows`` (inside ``partition`` when given) in one Delta commit. With a stamp
        (default: the active one): once per unit of work and generation; a repeat writes
        nothing and returns the earlier record (``rows_written=0``)."""
        owner = resolve_stamp(stamp)
        dl = _deltalake()

        def write(table: Any, incoming: pa.Table, slc: Slice | None, label: str) -> WriteResult:
            record = None
            if owner is not None:
                done = self._appended(table, owner)
                if done is not None:
                    return WriteResult(self.spec, label, "append", 0, None, commit=done.record)
                kept = [] if table is None else [self._read(table, slc, None)]
                record = self._record(owner, "append", label, incoming, [*kept, incoming], {})

            def commit() -> None:
                dl.write_deltalake(self.uri if table is None else table, incoming, mode="append",
                                   commit_properties=_properties(dl, owner, record))

            return self._commit(commit, "append", label, incoming, record)

        return self._committing(rows, partition, owner, write, whole_table=True)

    def upsert(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Insert or update by ``key_columns`` with Delta's merge, in one commit; with
        ``partition``, rows must lie inside it. With a stamp the commit carries the record
        (fingerprint of ``partition``, or of every row)."""
        owner = resolve_stamp(stamp)
        if not self.key_columns:
            raise DestinationError(f"{self.spec}: upsert needs key_columns (e.g. source id)")
        dl = _deltalake()
        keys = list(self.key_columns)

        def write(table: Any, incoming: pa.Table, slc: Slice | None, label: str) -> WriteResult:
            record = None
            if owner is not None:
                kept = [] if table is None else [
                    self._read(table, slc, None).join(
                        incoming.select(keys), keys=keys, join_type="left anti"
                    )
                ]
                record = self._record(owner, "upsert", label, incoming, [*kept, incoming], {})

            def commit() -> None:
                properties = _properties(dl, owner, record)
                if table is None:
                    dl.write_deltalake(self.uri, incoming, mode="append",
                                       commit_properties=properties)
                    return
                on = " AND ".join(f"s.{_quote(k)} = t.{_quote(k)}" for k in keys)
                merger = table.merge(incoming, on, source_alias="s", target_alias="t",
                                     commit_properties=properties)
                if any(c not in keys for c in incoming.column_names):
                    merger = merger.when_matched_update_all()
                merger.when_not_matched_insert_all().execute()

            return self._commit(commit, "upsert", label, incoming, record)

        return self._committing(rows, partition, owner, write, whole_table=True, keyed=True)

    def _committing(
        self, rows: RowsLike, partition: PartitionSpec, owner: WriteStamp | None,
        write: Callable[[Any, pa.Table, Slice | None, str], WriteResult], *, whole_table: bool,
        keyed: bool = False,
    ) -> WriteResult:
        """Run ``write(table, rows, slice, label)`` on the latest version until it commits: the
        rows are checked (and ``rows`` consumed) once, the fence is checked on every version
        read, and a commit that conflicts with a concurrent one is redone on the new version."""
        dl = _deltalake()
        incoming: pa.Table | None = None
        slc: Slice | None = None
        for tries in range(1, MAX_COMMIT_TRIES + 1):
            table = self._table()
            schema = None if table is None else _schema_of(table)
            if incoming is None or tries > 1:
                source = rows if incoming is None else incoming
                incoming, slc = self._incoming(source, partition, schema, whole_table, keyed)
            if owner is not None and table is not None:
                self._check_ledger(table, owner)
                newest = table.transaction_version(FENCE_APP + owner.fence_key)
                check_fence(owner, newest, self.spec, self._holders(owner.fence_key))
            try:
                return write(table, incoming, slc, "all rows" if slc is None else slc.label)
            except dl.exceptions.CommitFailedError as exc:
                if tries == MAX_COMMIT_TRIES:
                    raise DestinationError(
                        f"{self.spec}: the commit conflicted with concurrent writers "
                        f"{tries} times ({exc}); nothing was written"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _incoming(
        self, rows: RowsLike, partition: PartitionSpec, existing: Schema | None,
        whole_table: bool, keyed: bool,
    ) -> tuple[pa.Table, Slice | None]:
        """Rows conformed to the table (in its column order) and checked before anything is
        written: inside the slice, key columns present and unique."""
        table = to_arrow(rows, target=existing)
        schema = existing or stored_schema(table.schema)
        if existing is not None:
            table = table.select(list(existing))
        if keyed:
            require_columns(schema, self.key_columns)
        slc = None
        if partition is not None or not whole_table:
            if partition is not None:
                slc = self._slice(schema, partition)
                slc.check_rows(table)
        check_keys(table, self.key_columns)
        return table, slc

    def _commit(
        self, commit: Callable[[], None], mode: str, label: str, incoming: pa.Table,
        record: CommitRecord | None, deleted: int | None = None,
    ) -> WriteResult:
        """Make the Delta ``commit`` between the two crash-test seams, and say what it wrote:
        every write mode passes both seams in the same order."""
        self._before_commit()
        commit()
        self._after_commit()
        return WriteResult(self.spec, label, mode, incoming.num_rows, deleted, commit=record)

    def _before_commit(self) -> None:
        """Seam after the fence check and the record, before delta-rs writes anything
        (crash tests kill here)."""

    def _after_commit(self) -> None:
        """Seam after the Delta commit, before the write returns (crash tests kill here)."""

    # -- commit records ---------------------------------------------------------------------

    def seal(self, stamp: WriteStamp) -> bool:
        """See :meth:`BaseDestination.seal`: a commit without rows carrying the slot's fence app
        transaction at the token (and a ``fence`` record): a concurrent write carrying the
        same app id loses to it, reloads and is fenced. False while there is no table yet."""
        dl = _deltalake()
        for _ in range(MAX_COMMIT_TRIES):
            table = self._table()
            if table is None:
                return False
            self._check_ledger(table, stamp)
            newest = table.transaction_version(FENCE_APP + stamp.fence_key)
            check_fence(stamp, newest, self.spec, self._holders(stamp.fence_key))
            record = CommitRecord.fence(stamp, table=self.uri)
            if _commit_record_only(table, record, [dl.Transaction(FENCE_APP + stamp.fence_key,
                                                                  stamp.token)]):
                return True
            # else another writer committed first: read the fence again
        raise DestinationUnavailableError(
            f"{self.spec}: {MAX_COMMIT_TRIES} commits in a row lost to concurrent writers"
        )

    def _check_ledger(self, table: Any, stamp: WriteStamp) -> None:
        """The ownership check, against every record the log holds (a record cleaned up by
        log retention no longer counts: the next identified write claims the table again)."""
        if stamp.ledger:
            check_ledger_records(stamp, [r for _, r in _logged(table)], self.spec)

    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord:
        """See :meth:`BaseDestination.adopt`: a commit without rows carrying the ``adopt``
        record (a table must exist: there is nothing to adopt before)."""
        for _ in range(MAX_COMMIT_TRIES):
            table = self._table()
            if table is None:
                raise DestinationError(f"{self.spec}: there is no table to adopt yet")
            tokens = [r.token for _, r in _logged(table)]
            check_adoption(stamp, max(tokens) if tokens else None, self.spec)
            record = CommitRecord.adoption(stamp, table=self.uri, note=note, operator=operator)
            if _commit_record_only(table, record):
                return record
            # else another writer committed first: read the tokens again
        raise DestinationUnavailableError(
            f"{self.spec}: {MAX_COMMIT_TRIES} commits in a row lost to concurrent writers"
        )

    def _holders(self, fence_key: str) -> Callable[[int], list[Holder]]:
        """Who committed under a token of ``fence_key``, from the log's records (read only
        when the token equals the writer's: ``commits.check_fence``)."""
        def holders(token: int) -> list[Holder]:
            return [holder_of(r) for r in self.commit_records()
                    if r.fence_key == fence_key and r.token == token]

        return holders

    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]:
        """The commit records in the table's log (of ``uow_id`` only, if given), by (token,
        committed_at). ``[]`` when there is no table (nothing is created by looking)."""
        table = self._table()
        if table is None:
            return []
        records = [r for _, r in _logged(table)]
        if uow_id is not None:
            records = [r for r in records if r.uow_id == uow_id]
        return sorted(records, key=lambda r: r.sort_key)

    def commit_versions(self) -> dict[int, CommitRecord]:
        """Table version -> the commit record it carries (versions of stamped writes only)."""
        table = self._table()
        return {} if table is None else dict(_logged(table))

    def marked_attempt(self, uow_id: str) -> tuple[int, int] | None:
        """The unit's app transaction (checkpoints keep it): its last stamped write."""
        table = self._table()
        version = None if table is None else table.transaction_version(UNIT_APP + uow_id)
        return None if version is None else marker_parts(version)

    def _appended(self, table: Any, owner: WriteStamp) -> Appended | None:
        """The earlier ``append`` of this unit and generation in this table, if any. The unit's
        app transaction says whether there is one (checkpoints keep it); the history gives its
        record, unless log retention has cleaned that commit up (then the record is None)."""
        if table is None:
            return None
        version = table.transaction_version(UNIT_APP + owner.uow_id)
        if version is None or marker_generation(version) < owner.generation:
            return None  # the log holds no write of this generation: skip reading history
        ours = [r for _, r in _logged(table)
                if (r.uow_id, r.generation) == (owner.uow_id, owner.generation)]
        found = [r for r in ours if r.mode == "append"]
        if found:
            return Appended(min(found, key=lambda r: r.sort_key))
        cleaned = not ours and marker_generation(version) == owner.generation
        return Appended(None) if cleaned else None

    def _record(
        self, owner: WriteStamp, mode: str, label: str, new_rows: pa.Table,
        slice_after: list[pa.Table], extra: dict[str, Any],
    ) -> CommitRecord:
        """The record of a write whose slice will hold the rows of ``slice_after``; its
        fingerprint is the one ``fingerprint()`` computes after the commit. The attempt's
        admission decides on that slice before delta-rs writes anything
        (``twice.destinations.landing``)."""
        from twice.destinations.fingerprint import slice_fingerprint

        fp = slice_fingerprint(slice_after, stored_schema(new_rows.schema))
        admit(Landing(self.spec, label, mode, new_rows.num_rows, fp.row_count,
                      arrow_nulls(lambda names: slice_after)))
        return CommitRecord.create(
            owner, table=self.uri, slice=label, mode=mode, rows_written=new_rows.num_rows,
            row_count=fp.row_count, checksum=fp.checksum, algorithm=fp.algorithm,
            columns=fp.columns, extra=extra,
        )

    # -- reads ------------------------------------------------------------------------------

    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of one slice (all rows when ``partition`` is None), as Arrow."""
        table = self._require()
        return self._read(table, self._slice_of(table, partition), columns)

    def read_partition_at(self, partition: PartitionSpec, version: int) -> pa.Table:
        """The rows of one slice as they were at table ``version`` (Delta time travel)."""
        table = self._require(int(version))
        return self._read(table, self._slice_of(table, partition), None)

    def row_count(self, partition: PartitionSpec = None) -> int:
        table = self._require()
        return self._count(table, self._slice_of(table, partition))

    def fingerprint_sums(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """Arrow-computed sums (see :mod:`twice.destinations.fingerprint`), read with the
        slice's predicate pushed down to Delta's file statistics and Parquet."""
        from twice.destinations.fingerprint import arrow_sums

        table = self._require()
        schema = _schema_of(table)
        require_columns(schema, columns)
        read = self._read(table, self._slice_of(table, partition), columns)
        return arrow_sums(read, [(c, schema[c]) for c in columns])

    def _slice_of(self, table: Any, partition: PartitionSpec) -> Slice | None:
        return None if partition is None else self._slice(_schema_of(table), partition)

    def _slice(self, schema: Schema, partition: PartitionSpec) -> Slice:
        column = self.partition_column
        if column is None:
            raise DestinationError(
                f"{self.spec}: no partition_column configured (add ?partition_column=NAME to "
                "the destination or pass partition_column=...)"
            )
        require_columns(schema, [column])
        if schema[column].kind not in PARTITION_KINDS:
            raise SchemaError(
                f"Delta partition column {column!r} is {schema[column]}; use a date, "
                "timestamp, integer, string or boolean column"
            )
        return Slice.of(column, schema[column], partition)

    def _dataset(self, table: Any) -> pds.Dataset:
        _check_readable(table, self.spec)
        schema = pa.schema(table.schema().to_arrow())
        if self.root is not None:
            import pyarrow.fs as pfs

            # Arrow's own local file system (not delta-rs's object store handler, whose
            # threads can abort the interpreter at exit).
            system = pfs.SubTreeFileSystem(str(self.root), pfs.LocalFileSystem())
            return table.to_pyarrow_dataset(filesystem=system, schema=schema)
        return table.to_pyarrow_dataset(schema=schema)

    def _read(self, table: Any, slc: Slice | None, columns: Sequence[str] | None) -> pa.Table:
        schema = _schema_of(table)
        names = list(schema) if columns is None else list(columns)
        require_columns(schema, names)
        read = self._dataset(table).to_table(columns=names, filter=_filter(slc))
        target = pa.schema([pa.field(n, schema[n].arrow()) for n in names])
        return read.cast(target) if read.schema != target else read

    def _count(self, table: Any, slc: Slice | None) -> int:
        return int(self._dataset(table).count_rows(filter=_filter(slc)))


# --------------------------------------------------------------------------- helpers


def _schema_of(table: Any) -> Schema:
    return stored_schema(pa.schema(table.schema().to_arrow()))


def _check_readable(table: Any, spec: str) -> None:
    features = set(table.protocol().reader_features or ())
    unknown = sorted(features - READABLE_FEATURES)
    if unknown:
        raise DestinationError(
            f"{spec}: the table uses Delta reader features {unknown}, which twice does not "
            "read (it reads the Parquet files with Arrow); disable them or use another table"
        )


def _logged(table: Any) -> list[tuple[int, CommitRecord]]:
    """(version, record) of every commit in the log that carries a twice commit record."""
    import json

    found = []
    for entry in table.history():
        text = entry.get(COMMIT_KEY)
        if text:
            found.append((int(entry["version"]), CommitRecord.from_dict(json.loads(text))))
    return found


def _properties(dl: Any, owner: WriteStamp | None, record: CommitRecord | None) -> Any:
    """The commit's properties: for a stamped write, the record and the app transactions."""
    if owner is None or record is None:
        return None
    return dl.CommitProperties(
        custom_metadata={COMMIT_KEY: record.to_json()},
        app_transactions=[
            dl.Transaction(UNIT_APP + owner.uow_id, unit_marker(owner)),
            dl.Transaction(FENCE_APP + owner.fence_key, owner.token),
        ],
    )


def _quote(name: str) -> str:
    return f'"{name}"'  # names are validated identifiers (no quotes inside)


def _literal(value: Any, ctype: ColumnType) -> str:
    """A SQL literal of the slice value for delta-rs's predicate parser (DataFusion)."""
    kind = ctype.kind
    if kind == "date":
        assert isinstance(value, date)
        return f"DATE '{value.isoformat()}'"
    if kind in ("timestamp", "timestamptz"):
        assert isinstance(value, datetime)
        text = value.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S.%f")
        if kind == "timestamptz":
            return f"arrow_cast('{text}Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"
        return f"arrow_cast('{text}', 'Timestamp(Microsecond, None)')"
    if kind == "integer":
        return str(int(value))
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "string":
        return "'" + str(value).replace("'", "''") + "'"
    raise SchemaError(f"a {ctype} column cannot hold a Delta slice")


def _predicate(slc: Slice) -> str:
    column = _quote(slc.column)
    if slc.is_range:
        return (f"{column} >= {_literal(slc.low, slc.ctype)} AND "
                f"{column} < {_literal(slc.high, slc.ctype)}")
    return f"{column} = {_literal(slc.value, slc.ctype)}"


def _filter(slc: Slice | None) -> pds.Expression | None:
    """The slice as an Arrow dataset filter (pushed down to Delta statistics and Parquet)."""
    if slc is None:
        return None
    field = pc.field(slc.column)
    arrow_type = slc.ctype.arrow()
    if slc.is_range:
        low, high = pa.scalar(slc.low, arrow_type), pa.scalar(slc.high, arrow_type)
        return (field >= low) & (field < high)
    return field == pa.scalar(slc.value, arrow_type)


def open_destination(spec: DestinationSpec) -> DeltaDestination:
    """Open ``delta:///abs/path[?partition_column=day&key_columns=a,b]`` (``delta:rel/path``
    for a path relative to the working directory; ``delta:s3://bucket/path`` for object
    storage through delta-rs)."""
    _deltalake()  # a missing extra is found before anything runs (check_spec)
    if spec.options:
        raise DestinationSpecError(f"delta destination: unknown options {sorted(spec.options)}")
    if spec.fragment:
        raise DestinationSpecError("delta destinations name a directory; drop the '#...' part")
    query = spec.twice_query()
    if _URI.match(spec.location) and not spec.location.startswith("file://"):
        uri = spec.location
        return DeltaDestination(uri, spec=f"delta:{uri}{query}",
                                partition_column=spec.partition_column,
                                key_columns=spec.key_columns)
    location = spec.location.removeprefix("file:")
    local = DestinationSpec(spec.scheme, location, "")
    root = Path(local.file_path()).expanduser().absolute()
    return DeltaDestination(str(root), spec=f"delta://{root}{query}",
                            partition_column=spec.partition_column,
                            key_columns=spec.key_columns, local_root=root)


def _commit_record_only(table: Any, record: CommitRecord,
                        app_transactions: list[Any] | None = None) -> bool:
    """Commit no rows, only ``record`` (and ``app_transactions``): a seal or an adoption.
    False when another writer committed first (the caller reads the table again)."""
    dl = _deltalake()
    properties = dl.CommitProperties(custom_metadata={COMMIT_KEY: record.to_json()},
                                     app_transactions=app_transactions)
    empty = pa.schema(table.schema().to_arrow()).empty_table()
    try:
        dl.write_deltalake(table, empty, mode="append", commit_properties=properties)
    except dl.exceptions.CommitFailedError:
        return False
    return True
