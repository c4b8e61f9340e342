"""Apache Iceberg tables (``pyiceberg`` with a SQL catalog): ``iceberg:///abs/warehouse#ns.table``.

Spec::

    iceberg:///abs/warehouse?partition_column=day#namespace.table
    iceberg:///abs/warehouse?catalog_uri=postgresql://etl@db:5432/catalog&password=...#ns.t

The warehouse is a local directory (data and metadata files, ``file://``). The catalog is
embedded by default: a SQLite database ``<warehouse>/twice_catalog.db`` (pyiceberg's
``SqlCatalog``). ``catalog_uri=`` names a shared SQL catalog instead (PostgreSQL through
psycopg; ``postgresql://`` is read as ``postgresql+psycopg://``), whose password comes from
``?password=`` (a secret parameter: dropped from the public spec, see
:mod:`twice.core.secrets`), ``PGPASSWORD`` or ``~/.pgpass``; a password written inside
``catalog_uri`` is refused, because it would be stored with the spec. ``catalog_name=``
(default ``twice``) is the catalog's name inside that database. ``#table`` alone means the
namespace ``default``. Needs ``twice[iceberg]``.

How each guarantee is kept (all on Iceberg's own commit protocol, nothing twice-specific on
disk):

* **Atomic replace.** ``replace_partition`` stages a delete with a filter on the interval
  (``day >= low AND day < high``, or ``= value``) and an append of the new rows in ONE
  pyiceberg transaction, committed by one catalog update (a compare-and-swap of the table's
  metadata location in the catalog's ``iceberg_tables`` row). Until that update, readers and a
  crash see the old table; after it, the new one. A transaction may add two snapshots (the
  delete and the append); both carry the same ``twice.write`` id, and :meth:`versions` lists
  only the last snapshot of each write.
* **Commit record.** A stamped write puts its :class:`CommitRecord` (JSON) in the snapshot
  summary properties (``twice.commit``) of the snapshots it commits, so the record exists if
  and only if the data does. :meth:`commit_records` reads the summaries of the current
  snapshot and its ancestors (the table's log): a record whose snapshot is not in the current
  history (rolled back) is not reported.
* **What outlives expired snapshots.** Expiring snapshots (routine Iceberg maintenance)
  removes the records in their summaries, so the same commit also sets two table properties,
  as Delta keeps app transactions in its checkpoints: ``twice.fence.<fence key>``, the newest
  token committed for the slot, and, for an append, ``twice.unit.<uow_id>``, the unit's
  generation and attempt (:func:`~twice.destinations.commits.unit_marker`) with the first
  sequence number the write's snapshots take. Fencing reads the higher of the property and
  the records, so a zombie stays refused after the snapshot that fenced it is gone; an append
  of a generation the marker names is not repeated when its record has expired, unless the
  history still reaches back past the write without its record (an operator rolled it back).
  Reconciling an unknown outcome after expiry finds an append through that marker
  (:meth:`marked_attempt`); a replace or an upsert reads "absent" and is written again, the
  same slice replaced or the same keys updated. Properties are kept per slot and per
  appending unit, like Delta's app transactions.
* **Fencing.** Before staging, the newest token committed for the stamp's fence key is read
  from those summaries and the slot's property. The commit requires the table's current
  snapshot to still be the one that was read (pyiceberg's ``AssertRefSnapshotId``), so a
  writer racing another sees ``CommitFailedException``, reloads the table and checks the fence
  again (up to :data:`MAX_COMMIT_TRIES` times): two writers can never both pass on a stale
  read. pyiceberg's own retry (which would re-apply the staged write on a newer base without
  twice's check) is turned off with the table property ``commit.retry.num-retries=0``, set on
  the tables twice creates and, once, on an existing table before twice's first write.
* **Fingerprints.** The current algorithm, in Arrow (the shared path of
  :func:`twice.destinations.fingerprint.arrow_sums`, as Parquet) over a scan of the slice;
  the commit record's is computed from the base snapshot's rows plus the new ones (the
  checksum is a sum over rows), which is exactly the committed slice because the commit
  asserts that base.
* **Upsert.** A delete of the incoming keys and an append of the rows, in one transaction.
  Iceberg enforces no key: the key is unique as long as every writer of the table upserts
  through twice (or an engine that deletes by key first).

Partitioning: a table twice creates is partitioned by ``identity(partition_column)`` when that
column is a date, integer or string (whole files are then dropped by a replace); other columns
(timestamps) leave it unpartitioned and a replace rewrites the files holding the slice's rows.

Time travel (``twice diff``): :meth:`versions` lists snapshot ids (not sequence numbers), oldest
first, one per commit on the table's current history; :meth:`read_partition_at` scans a slice
as of one of them.
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import pyarrow as pa

from twice.core.extras import require
from twice.core.identifiers import validate_identifier
from twice.destinations.base import (
    ArrowScanned,
    DestinationSpec,
    WriteResult,
    checked_slice_label,
    required_partition_column,
)
from twice.destinations.columns import (
    Schema,
    SchemaError,
    require_columns,
    schema_of,
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
    newest_token,
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

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table, Transaction

CATALOG_FILE = "twice_catalog.db"
#: Locked while a writer opens (and so maybe creates) the embedded catalog.
CATALOG_LOCK_FILE = ".twice_catalog.lock"
DEFAULT_NAMESPACE = "default"
WHO = "iceberg:// destinations"
DEFAULT_CATALOG_NAME = "twice"
COMMIT_PROPERTY = "twice.commit"  # snapshot summary: the commit record, JSON
WRITE_PROPERTY = "twice.write"  # snapshot summary: the id of the twice write (all snapshots)
RETRY_PROPERTY = "commit.retry.num-retries"
FENCE_PROPERTY = "twice.fence."  # table property per slot: the newest fencing token committed
UNIT_PROPERTY = "twice.unit."  # table property per unit that appended: "<marker>@<sequence>"
MAX_COMMIT_TRIES = 20
IDENTITY_KINDS = ("date", "integer", "string")

# What a write does on one base snapshot: (rows it deletes, the slice's rows that stay after
# it (read lazily: only a stamped write's fingerprint needs them), how to stage its delete).
Plan = tuple[int, Callable[[], pa.Table], Callable[["Transaction", dict[str, str]], None]]


class IcebergDestination(ArrowScanned):
    """One Iceberg table in a SQL catalog; see the module docstring."""

    engine = "iceberg"

    def __init__(
        self,
        warehouse: Path,
        *,
        spec: str,
        namespace: str,
        table: str,
        catalog_uri: str | None = None,
        catalog_name: str = DEFAULT_CATALOG_NAME,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
    ) -> None:
        super().__init__(spec=spec, partition_column=partition_column, key_columns=key_columns)
        self.warehouse = warehouse
        self.namespace = validate_identifier(namespace, "namespace")
        self.table = validate_identifier(table, "table name")
        self.catalog_name = validate_identifier(catalog_name, "catalog_name")
        self._catalog_uri = catalog_uri  # with its password, if any: never shown
        self._catalog: SqlCatalog | None = None

    @property
    def table_label(self) -> str:
        return f"{self.namespace}.{self.table}"

    # -- the catalog ------------------------------------------------------------------------

    def close(self) -> None:
        if self._catalog is not None:
            engine = getattr(self._catalog, "engine", None)
            if engine is not None:
                engine.dispose()
            self._catalog = None

    def _catalog_exists(self) -> bool:
        """Whether there can be a table (an embedded catalog that was never created: no)."""
        return self._catalog_uri is not None or (self.warehouse / CATALOG_FILE).exists()

    def _open_catalog(self) -> SqlCatalog:
        if self._catalog is None:
            sql_catalog = require("pyiceberg.catalog.sql", extra="iceberg", who=WHO).SqlCatalog
            self.warehouse.mkdir(parents=True, exist_ok=True)
            uri = self._catalog_uri or f"sqlite:///{self.warehouse / CATALOG_FILE}"
            try:
                with self._creating_catalog():
                    self._catalog = sql_catalog(
                        self.catalog_name, uri=uri, warehouse=self.warehouse.as_uri()
                    )
            except Exception as exc:
                from twice.core.secrets import redact

                raise DestinationUnavailableError(
                    f"{self.spec}: cannot open the Iceberg catalog: {redact(str(exc))}"
                ) from None
        return self._catalog

    @contextmanager
    def _creating_catalog(self) -> Iterator[None]:
        """Opening a ``SqlCatalog`` creates its tables when they are missing, and a first write
        creates its namespace after checking for it: two writers into a fresh embedded
        catalog at once both tried, and one failed ("table iceberg_tables already exists", a
        UNIQUE constraint on the namespace). An exclusive ``flock`` on a file in the warehouse
        serialises those moments between threads and processes; a shared catalog (a server)
        is not locked here (``_create`` checks again after a failed namespace insert)."""
        if self._catalog_uri is not None:
            yield
            return
        import fcntl

        with open(self.warehouse / CATALOG_LOCK_FILE, "ab") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _load(self) -> Table | None:
        """The table as the catalog has it now, or None (nothing is created by looking)."""
        if not self._catalog_exists():
            return None
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self._open_catalog().load_table((self.namespace, self.table))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def _require(self) -> Table:
        table = self._load()
        if table is None:
            raise DestinationError(f"{self.spec}: table {self.table_label} does not exist")
        return table

    def _create(self, arrow_schema: pa.Schema, schema: Schema) -> Table:
        """Create the table (partitioned by identity(partition_column) when it can be)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        catalog = self._open_catalog()
        with self._creating_catalog():
            try:
                catalog.create_namespace_if_not_exists(self.namespace)
            except Exception:
                # a shared catalog's other writer created it between the check and the insert
                if not catalog.namespace_exists(self.namespace):
                    raise
        column = self.partition_column
        try:
            with catalog.create_table_transaction(
                (self.namespace, self.table), schema=arrow_schema,
                properties={RETRY_PROPERTY: "0"},
            ) as create:
                if column is not None and column in schema and (
                    schema[column].kind in IDENTITY_KINDS
                ):
                    with create.update_spec() as spec:
                        spec.add_identity(column)
        except TableAlreadyExistsError:
            pass  # another writer created it meanwhile: write into theirs
        return self._require()

    def _without_pyiceberg_retry(self, table: Table) -> Table | None:
        """``table`` once pyiceberg will not retry a failed commit on its own (see the module
        doc); None when setting that lost a race (the caller reloads and comes back)."""
        if table.properties.get(RETRY_PROPERTY) == "0":
            return table
        from pyiceberg.exceptions import CommitFailedException

        try:
            with table.transaction() as tx:
                tx.set_properties({RETRY_PROPERTY: "0"})
        except CommitFailedException:
            return None
        reloaded = self._require()
        return reloaded if reloaded.properties.get(RETRY_PROPERTY) == "0" else None

    # -- schema -----------------------------------------------------------------------------

    def schema(self) -> Schema | None:
        table = self._load()
        return None if table is None else _twice_schema(table)

    # -- writes -----------------------------------------------------------------------------

    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Replace exactly the slice ``partition`` with ``rows`` (all inside it), in one commit.

        With a stamp (default: the active one) the commit record goes into the snapshot
        summary, after the fencing check (:class:`FencedWriteError`: nothing written).
        """
        owner = resolve_stamp(stamp)
        column = self._require_partition_column()
        incoming, schema = self._incoming(rows)
        require_columns(schema, [column, *self.key_columns])
        slc = Slice.of(column, schema[column], partition)
        slc.check_rows(incoming)
        check_keys(incoming, self.key_columns)
        where = _expression(slc)

        def plan(base: Table) -> Plan:
            deleted = _count(base, where)

            def apply(tx: Transaction, props: dict[str, str]) -> None:
                if deleted:
                    _delete(tx, where, props)

            return deleted, lambda: incoming.slice(0, 0), apply  # nothing of the slice stays

        return self._write("replace", incoming, schema, slc.label, owner, plan)

    def append(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Add ``rows`` (inside ``partition`` when given).

        With a stamp (default: the active one): exactly once per unit of work and generation
        (an ``append`` record of the stamp's unit and generation in the table's log makes it a
        no-op returning that record). Without a stamp a retry appends again.
        """
        owner = resolve_stamp(stamp)
        incoming, schema = self._incoming(rows)
        label = self._check_slice(schema, incoming, partition)
        check_keys(incoming, self.key_columns)

        def plan(base: Table) -> Plan:
            return 0, lambda: self._scan(base, partition, None, base_snapshot(base)), _nothing

        return self._write("append", incoming, schema, label, owner, plan)

    def upsert(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Insert or update by ``key_columns``: delete the incoming keys and append the rows,
        in one commit; with ``partition``, rows must lie inside it."""
        owner = resolve_stamp(stamp)
        if not self.key_columns:
            raise DestinationError(f"{self.spec}: upsert needs key_columns (e.g. source id)")
        incoming, schema = self._incoming(rows)
        require_columns(schema, self.key_columns)
        label = self._check_slice(schema, incoming, partition)
        check_keys(incoming, self.key_columns)
        keys = list(self.key_columns)

        def plan(base: Table) -> Plan:
            def kept() -> pa.Table:
                current = self._scan(base, partition, None, base_snapshot(base))
                return _without_keys(current, incoming, keys)

            def apply(tx: Transaction, props: dict[str, str]) -> None:
                snapshot = base_snapshot(base)
                if not incoming.num_rows or snapshot is None:
                    return
                where, exact = _key_filter(incoming, keys)
                if exact:
                    _delete(tx, where, props)
                    return
                inside = self._slice_expression(_twice_schema(base), partition)
                if inside is not None:  # the superset stays inside the upserted slice
                    where = _expressions().And(inside, where)
                # a superset of the keys: the rows it matches that are not upserted go back
                matched = base.scan(row_filter=where, snapshot_id=snapshot).to_arrow()
                back = _without_keys(matched, incoming, keys)
                _delete(tx, where, props)
                if back.num_rows:
                    tx.append(_to_table_schema(back, base), snapshot_properties=props)

            return 0, kept, apply

        return self._write("upsert", incoming, schema, label, owner, plan)

    def _incoming(self, rows: RowsLike) -> tuple[pa.Table, Schema]:
        existing = self.schema()
        table = to_arrow(rows, target=existing)
        return table, existing or schema_of(table)

    def _check_slice(self, schema: Schema, table: pa.Table, partition: PartitionSpec) -> str:
        return checked_slice_label(self, schema, table, partition)

    def _require_partition_column(self) -> str:
        return required_partition_column(self)

    def _write(
        self, mode: str, incoming: pa.Table, schema: Schema, label: str,
        owner: WriteStamp | None, plan: Callable[[Table], Plan],
    ) -> WriteResult:
        """The commit loop: load, fence, plan on that base (rows deleted, the slice's rows
        that stay, the staging of the delete), stage, append, commit; when another writer
        committed first, start again from the load (so the fence is read again)."""
        from pyiceberg.exceptions import CommitFailedException

        for _ in range(MAX_COMMIT_TRIES):
            base = self._load()
            if base is None:
                base = self._create(incoming.schema, schema)
            checked = self._without_pyiceberg_retry(base)
            if checked is None:
                continue
            base = checked
            if owner is not None:
                records = _records(base)
                check_ledger_records(owner, records, self.spec)
                check_fence(owner, _newest_token(base, records, owner.fence_key), self.spec,
                            _holders(records, owner.fence_key))
                if mode == "append":
                    done = _appended(base, records, owner)
                    if done is not None:
                        return WriteResult(self.spec, label, "append", 0, None,
                                           commit=done.record)
            deleted, kept, apply = plan(base)
            props = {WRITE_PROPERTY: uuid.uuid4().hex}
            record = None
            if owner is not None:
                record = self._record(owner, mode, label, incoming, kept(), schema,
                                      {"rows_deleted": deleted} if mode == "replace" else {})
                props[COMMIT_PROPERTY] = record.to_json()
            tx = base.transaction()
            apply(tx, props)
            self._after_delete()
            tx.append(_to_table_schema(incoming, base), snapshot_properties=props)
            if owner is not None:
                tx.set_properties(_markers(base, owner, mode))
            self._before_commit()
            try:
                tx.commit_transaction()
            except CommitFailedException:
                continue  # another writer committed first: reload, fence again, restage
            return WriteResult(self.spec, label, mode, incoming.num_rows,
                               deleted if mode == "replace" else None, commit=record)
        raise DestinationUnavailableError(
            f"{self.spec}: {MAX_COMMIT_TRIES} commits in a row lost to concurrent writers"
        )

    def _record(
        self, owner: WriteStamp, mode: str, label: str, incoming: pa.Table, kept: pa.Table,
        schema: Schema, extra: dict[str, Any],
    ) -> CommitRecord:
        """The record of a write whose slice will hold ``kept`` plus ``incoming``; its
        fingerprint is what ``fingerprint()`` computes after the commit (sums add up). The
        attempt's admission decides on that slice before the transaction is staged
        (``twice.destinations.landing``)."""
        from twice.destinations.fingerprint import slice_fingerprint

        fp = slice_fingerprint(
            (incoming, kept), schema,
            lambda part, columns: _normalised(part.select(list(columns)), schema))
        admit(Landing(self.spec, label, mode, incoming.num_rows, fp.row_count,
                      arrow_nulls(lambda names: (incoming, kept))))
        return CommitRecord.create(
            owner, table=self.table_label, slice=label, mode=mode,
            rows_written=incoming.num_rows, row_count=fp.row_count, checksum=fp.checksum,
            algorithm=fp.algorithm, columns=fp.columns, extra=extra,
        )

    def _after_delete(self) -> None:
        """Seam between staging the delete and the append (crash tests kill here)."""

    def _before_commit(self) -> None:
        """Seam after the data files are written, before the catalog commit (crash tests)."""

    # -- commit records ---------------------------------------------------------------------

    def seal(self, stamp: WriteStamp) -> bool:
        """See :meth:`BaseDestination.seal`: an empty append (a snapshot without data files,
        its summary holding a ``fence`` record) that sets the slot's fence table property to
        the token. A concurrent write staged on the snapshot before it fails its commit (the
        branch moved: pyiceberg asserts the snapshot it read), reloads and is fenced; a
        property change alone would not move the branch. False while there is no table."""

        for _ in range(MAX_COMMIT_TRIES):
            base = self._load()
            if base is None:
                return False
            checked = self._without_pyiceberg_retry(base)
            if checked is None:
                continue
            records = _records(checked)
            check_ledger_records(stamp, records, self.spec)
            check_fence(stamp, _newest_token(checked, records, stamp.fence_key), self.spec,
                        _holders(records, stamp.fence_key))
            record = CommitRecord.fence(stamp, table=self.table_label)
            if _commit_record_only(checked, record,
                                   {FENCE_PROPERTY + stamp.fence_key: str(stamp.token)}):
                return True
            # else another writer committed first: read the fence again
        raise DestinationUnavailableError(
            f"{self.spec}: {MAX_COMMIT_TRIES} commits in a row lost to concurrent writers"
        )

    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord:
        """See :meth:`BaseDestination.adopt`: an empty append whose summary holds the
        ``adopt`` record (a table must exist: there is nothing to adopt before). Its token is
        checked against every record reachable and every slot's fence property."""

        for _ in range(MAX_COMMIT_TRIES):
            base = self._load()
            if base is None:
                raise DestinationError(f"{self.spec}: there is no table to adopt yet")
            checked = self._without_pyiceberg_retry(base)
            if checked is None:
                continue
            tokens = [r.token for r in _records(checked)] + [
                int(value) for key, value in checked.properties.items()
                if key.startswith(FENCE_PROPERTY)]
            check_adoption(stamp, max(tokens) if tokens else None, self.spec)
            record = CommitRecord.adoption(stamp, table=self.table_label, note=note,
                                           operator=operator)
            if _commit_record_only(checked, record):
                return record
            # else another writer committed first: read the tokens again
        raise DestinationUnavailableError(
            f"{self.spec}: {MAX_COMMIT_TRIES} commits in a row lost to concurrent writers"
        )

    def marked_attempt(self, uow_id: str) -> tuple[int, int] | None:
        """The unit's table property (appends only), unless the history still reaches back
        past that write without its record (rolled back)."""
        table = self._load()
        marker = None if table is None else _live_marker(table, uow_id)
        return None if marker is None else marker_parts(marker)

    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]:
        """The records in the summaries of the table's current history (of ``uow_id`` only,
        if given), by (token, committed_at); ``[]`` without a table (nothing is created)."""
        table = self._load()
        if table is None:
            return []
        records = _records(table)
        if uow_id is not None:
            records = [r for r in records if r.uow_id == uow_id]
        return sorted(records, key=lambda r: r.sort_key)

    # -- reads ------------------------------------------------------------------------------

    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of one slice (all rows when ``partition`` is None), as Arrow."""
        table = self._require()
        return self._scan(table, partition, columns, base_snapshot(table))

    def versions(self) -> list[int]:
        """Snapshot ids of the table's current history, oldest first: one per commit (the
        last snapshot of a twice write; every snapshot of other writers). ``[]`` without a
        table or before its first commit."""
        table = self._load()
        if table is None or table.current_snapshot() is None:
            return []
        out: list[int] = []
        last_write = None
        for snapshot in _history(table):
            write = (snapshot.summary.additional_properties if snapshot.summary else {}).get(
                WRITE_PROPERTY
            )
            if write is not None and write == last_write and out:
                out[-1] = snapshot.snapshot_id
            else:
                out.append(snapshot.snapshot_id)
            last_write = write
        return out

    def commit_versions(self) -> dict[int, CommitRecord]:
        """Version (as :meth:`versions` names them: a write's last snapshot id) -> the commit
        record that write carries (stamped writes only)."""
        table = self._load()
        if table is None:
            return {}
        found: dict[str, tuple[int, CommitRecord]] = {}
        for snapshot in _history(table):
            props = snapshot.summary.additional_properties if snapshot.summary else {}
            text = props.get(COMMIT_PROPERTY)
            if text is not None:  # a later snapshot of the same write replaces the earlier
                write = props.get(WRITE_PROPERTY) or text
                found[write] = (snapshot.snapshot_id,
                                CommitRecord.from_dict(json.loads(text)))
        return dict(found.values())

    def read_partition_at(self, partition: PartitionSpec, version: int) -> pa.Table:
        """The slice ``partition`` as of snapshot ``version`` (an id from :meth:`versions`)."""
        table = self._require()
        if table.metadata.snapshot_by_id(int(version)) is None:
            raise DestinationError(
                f"{self.spec}: no snapshot {version} (expired, or not of this table)"
            )
        return self._scan(table, partition, None, int(version))

    def _scan(
        self, table: Table, partition: PartitionSpec, columns: Sequence[str] | None,
        snapshot_id: int | None,
    ) -> pa.Table:
        schema = _twice_schema(table)
        names = list(schema) if columns is None else list(columns)
        require_columns(schema, names)
        out = pa.schema([pa.field(n, schema[n].arrow()) for n in names])
        if snapshot_id is None:
            return out.empty_table()
        where = self._slice_expression(schema, partition)
        if where is None:
            from pyiceberg.expressions import AlwaysTrue

            where = AlwaysTrue()
        data = table.scan(row_filter=where, selected_fields=tuple(names) or ("*",),
                          snapshot_id=snapshot_id).to_arrow()
        return data.select(names).cast(out)

    def _slice_expression(self, schema: Schema, partition: PartitionSpec
                          ) -> BooleanExpression | None:
        if partition is None:
            return None
        column = self._require_partition_column()
        require_columns(schema, [column])
        return _expression(Slice.of(column, schema[column], partition))

    def row_count(self, partition: PartitionSpec = None) -> int:
        table = self._require()
        if table.current_snapshot() is None:
            return 0
        from pyiceberg.expressions import AlwaysTrue

        where = self._slice_expression(_twice_schema(table), partition) or AlwaysTrue()
        return _count(table, where)


# --------------------------------------------------------------------------- helpers


def base_snapshot(table: Table) -> int | None:
    snapshot = table.current_snapshot()
    return None if snapshot is None else snapshot.snapshot_id


def _history(table: Table) -> list[Any]:
    """The current snapshot and its ancestors, oldest first (the table's log)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return []
    return list(reversed(list(ancestors_of(current, table.metadata))))


def _records(table: Table) -> list[CommitRecord]:
    """The commit records of the table's history, one per write (a write's snapshots all
    carry its record), by (token, committed_at)."""
    seen: set[str] = set()
    records = []
    for snapshot in _history(table):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        text = props.get(COMMIT_PROPERTY)
        if text is None:
            continue
        write = props.get(WRITE_PROPERTY) or text
        if write in seen:
            continue
        seen.add(write)
        records.append(CommitRecord.from_dict(json.loads(text)))
    return sorted(records, key=lambda r: r.sort_key)


def _holders(records: list[CommitRecord], fence_key: str) -> Callable[[int], list[Holder]]:
    """Who committed under a token of ``fence_key``, as the reachable records say (the table
    property may hold a newer token than any of them: ``commits.check_fence``)."""
    def holders(token: int) -> list[Holder]:
        return [holder_of(r) for r in records if r.fence_key == fence_key and r.token == token]

    return holders


def _newest_token(table: Table, records: list[CommitRecord], fence_key: str) -> int | None:
    """The newest token committed for ``fence_key``: the table property keeps it after the
    snapshot whose summary held it has been expired."""
    kept = table.properties.get(FENCE_PROPERTY + fence_key)
    tokens = [t for t in (newest_token(records, fence_key), kept) if t is not None]
    return max(int(t) for t in tokens) if tokens else None


def _markers(base: Table, owner: WriteStamp, mode: str) -> dict[str, str]:
    """The table properties a stamped write sets in its own commit: the slot's fencing token
    and, for an append, the unit's marker with the first sequence number the write can take
    (its snapshots are numbered from there)."""
    markers = {FENCE_PROPERTY + owner.fence_key: str(owner.token)}
    if mode == "append":
        sequence = base.metadata.next_sequence_number()
        markers[UNIT_PROPERTY + owner.uow_id] = f"{unit_marker(owner)}@{sequence}"
    return markers


def _appended(table: Table, records: list[CommitRecord], owner: WriteStamp) -> Appended | None:
    """The earlier append of this unit and generation, if the table holds it: its record from
    the history, or (the record's snapshots expired) the unit's marker alone. A marker whose
    write the history still reaches back past, without its record, was rolled back."""
    for record in records:
        if (record.uow_id, record.generation, record.mode) == (
            owner.uow_id, owner.generation, "append"
        ):
            return Appended(record)
    marker = _live_marker(table, owner.uow_id)
    if marker is None or marker_generation(marker) != owner.generation:
        return None
    return Appended(None)


def _live_marker(table: Table, uow_id: str) -> int | None:
    """The unit's marker property, unless the history still reaches back past that write: the
    records speak for it then (its record is there, or it was rolled back)."""
    text = table.properties.get(UNIT_PROPERTY + uow_id)
    if text is None:
        return None
    marker, _, sequence = text.partition("@")
    history = _history(table)
    oldest = history[0].sequence_number if history else None
    if oldest is not None and oldest < int(sequence):
        return None  # the history covers the write and has no record of it: rolled back
    return int(marker)


def _twice_schema(table: Table) -> Schema:
    """The table's columns as twice's kinds (see :func:`stored_schema`)."""
    return stored_schema(table.schema().as_arrow())


def _to_table_schema(incoming: pa.Table, table: Table) -> pa.Table:
    """``incoming`` with the table's column order and Arrow types (int vs long and so on)."""
    target = table.schema().as_arrow()
    try:
        return incoming.select(target.names).cast(
            pa.schema([pa.field(f.name, f.type, nullable=f.nullable) for f in target])
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"rows do not fit the Iceberg table's types: {exc}") from None


def _normalised(data: pa.Table, schema: Schema) -> pa.Table:
    return data.cast(pa.schema([pa.field(n, schema[n].arrow()) for n in data.column_names]))


def _nothing(tx: Transaction, props: dict[str, str]) -> None:
    return None


def _delete(tx: Transaction, where: BooleanExpression, props: dict[str, str]) -> None:
    with warnings.catch_warnings():  # "did not match any records": fine, nothing to delete
        warnings.simplefilter("ignore")
        tx.delete(where, snapshot_properties=props)


def _expressions() -> Any:
    """``pyiceberg.expressions`` (its classes' constructors confuse type checkers: they take
    a column name and a value positionally, which their pydantic signatures do not say)."""
    import pyiceberg.expressions

    return pyiceberg.expressions


def _expression(slc: Slice) -> BooleanExpression:
    ex = _expressions()
    if slc.is_range:
        low = ex.GreaterThanOrEqual(slc.column, slc.low)
        return cast("BooleanExpression", ex.And(low, ex.LessThan(slc.column, slc.high)))
    return cast("BooleanExpression", ex.EqualTo(slc.column, slc.value))


def _key_filter(incoming: pa.Table, keys: list[str]) -> tuple[BooleanExpression, bool]:
    """A filter matching the rows whose key is one of ``incoming``'s (no null key: refused
    before), and whether it matches exactly those.

    Exactly: one ``In`` over the key column with the most distinct values, per combination of
    the other key columns (a key ``(id, day)`` of one interval is ``day = d AND id IN (...)``),
    while there are at most ``KEY_TERMS`` combinations. Beyond that (keys distinct in every
    column), ``In`` over that column alone: a superset, whose other rows the caller puts back.
    One ``Or`` of thousands of terms crashed pyiceberg's delete (SIGSEGV at about 10,000) and
    slowed down quadratically before that."""
    ex = _expressions()
    values = {key: incoming.column(key).to_pylist() for key in keys}
    widest = max(keys, key=lambda key: len(set(values[key])))
    others = [key for key in keys if key != widest]
    groups: dict[tuple[Any, ...], set[Any]] = {}
    for index, value in enumerate(values[widest]):
        groups.setdefault(tuple(values[key][index] for key in others), set()).add(value)
    if len(groups) > KEY_TERMS:
        return cast("BooleanExpression", ex.In(widest, set(values[widest]))), False
    terms = []
    for fixed, members in groups.items():
        member = ex.In(widest, members) if len(members) > 1 else ex.EqualTo(widest, *members)
        equal = [ex.EqualTo(key, value) for key, value in zip(others, fixed, strict=True)]
        terms.append(ex.And(*equal, member) if equal else member)
    return cast("BooleanExpression", terms[0] if len(terms) == 1 else ex.Or(*terms)), True


#: Key combinations an upsert's delete names one by one (see :func:`_key_filter`).
KEY_TERMS = 256


def _without_keys(kept: pa.Table, incoming: pa.Table, keys: list[str]) -> pa.Table:
    """Rows of ``kept`` whose key is not among ``incoming``'s."""
    if not incoming.num_rows or not kept.num_rows:
        return kept
    new = set(zip(*(incoming.column(k).to_pylist() for k in keys), strict=True))
    old = zip(*(kept.column(k).to_pylist() for k in keys), strict=True)
    return kept.filter(pa.array([key not in new for key in old], pa.bool_()))


def _count(table: Table, where: BooleanExpression) -> int:
    if table.current_snapshot() is None:
        return 0
    return int(table.scan(row_filter=where).count())


def open_destination(spec: DestinationSpec) -> IcebergDestination:
    """Open ``iceberg:///abs/warehouse[?catalog_uri=...&catalog_name=...]#[namespace.]table``."""
    from twice.core.secrets import public_spec, secrets_of

    require("pyiceberg", extra="iceberg", who=WHO)  # found before anything runs (check_spec)
    options = dict(spec.options)
    catalog_uri = options.pop("catalog_uri", None) or None
    catalog_name = options.pop("catalog_name", None) or DEFAULT_CATALOG_NAME
    password = options.pop("password", None)
    if options:
        raise DestinationSpecError(f"iceberg destination: unknown options {sorted(options)}")
    if not spec.fragment:
        raise DestinationSpecError(
            "iceberg destination names no table: add '#namespace.table' (or '#table')"
        )
    if spec.fragment.count(".") > 1:
        raise DestinationSpecError(f"table {spec.fragment!r} must be 'table' or 'namespace.table'")
    namespace, _, table = spec.fragment.rpartition(".")
    namespace = validate_identifier(namespace or DEFAULT_NAMESPACE, "namespace")
    table = validate_identifier(table, "table name")
    warehouse = Path(spec.file_path()).expanduser().absolute()
    connect_uri = None
    if catalog_uri is not None:
        if secrets_of(catalog_uri) or public_spec(catalog_uri) != catalog_uri:
            raise DestinationSpecError(
                "iceberg destination: catalog_uri must not carry a password; pass it as "
                "?password=..., PGPASSWORD or ~/.pgpass"
            )
        require("psycopg", extra="postgres", who="Iceberg catalogs on PostgreSQL")
        connect_uri = _sqlalchemy_uri(catalog_uri, password)
    elif password is not None:
        raise DestinationSpecError("iceberg destination: password= is for a catalog_uri only")
    query = spec.twice_query()
    extra = []
    if catalog_uri is not None:
        extra.append("catalog_uri=" + quote(catalog_uri, safe=":/@"))
    if catalog_name != DEFAULT_CATALOG_NAME:
        extra.append(f"catalog_name={catalog_name}")
    if extra:
        query = (query + "&" if query else "?") + "&".join(extra)
    return IcebergDestination(
        warehouse, spec=f"iceberg://{warehouse}{query}#{namespace}.{table}",
        namespace=namespace, table=table, catalog_uri=connect_uri, catalog_name=catalog_name,
        partition_column=spec.partition_column, key_columns=spec.key_columns,
    )


def _sqlalchemy_uri(uri: str, password: str | None) -> str:
    """The catalog's SQLAlchemy URL: ``postgresql://`` through psycopg 3, with the password."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(uri)
    except Exception:
        raise DestinationError("iceberg destination: catalog_uri is not a database URL") from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if password:
        url = url.set(password=password)
    return url.render_as_string(hide_password=False)


def _commit_record_only(table: Any, record: CommitRecord,
                        properties: dict[str, str] | None = None) -> bool:
    """An empty append whose snapshot summary holds only ``record`` (a seal or an adoption),
    setting table ``properties`` in the same commit. False when another writer committed
    first (the caller loads the table again)."""
    from pyiceberg.exceptions import CommitFailedException

    tx = table.transaction()
    tx.append(table.schema().as_arrow().empty_table(), snapshot_properties={
        WRITE_PROPERTY: uuid.uuid4().hex, COMMIT_PROPERTY: record.to_json()})
    if properties:
        tx.set_properties(properties)
    try:
        tx.commit_transaction()
    except CommitFailedException:
        return False
    return True
