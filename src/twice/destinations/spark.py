"""Apache Spark destinations: ``spark:///abs/warehouse?partition_column=day#table``.

The table is an external, Parquet-backed, partitioned Spark SQL table at ``<warehouse>/<table>``
(Hive layout ``day=2026-11-30/part-*.parquet``), registered in the session catalog of a
``SparkSession`` (``?master=local[2]`` by default; an already running session is reused). The file
system is the source of truth: partitions are *not* tracked in the catalog
(``spark.sql.hive.manageFilesourcePartitions=false`` at creation), and ``_twice_table.json`` in
the table directory keeps the schema, so a new process (or ``twice verify``) re-registers the
table from disk with no ``REPAIR TABLE``. Spark skips ``_``/``.`` files when reading.

Overwrite modes (``?overwrite=`` or per call), both ``INSERT OVERWRITE``:

* ``dynamic``: one ``INSERT OVERWRITE t SELECT ...`` under
  ``spark.sql.sources.partitionOverwriteMode=dynamic``: only partitions *receiving rows* are
  replaced. A partition whose rerun yields zero rows keeps its old rows (Spark's semantics).
* ``static`` (default): the whole slice is replaced. Partitions receiving rows are written as in
  dynamic mode; every other existing partition of the slice is cleared with an explicit
  ``INSERT OVERWRITE t PARTITION (day = :value) SELECT ... WHERE false``. So a reprocessed
  interval that now yields no rows is emptied, which dynamic mode cannot do.

Why rows never go through Spark's own static ``PARTITION (day = value)`` insert: Spark deletes the
matching partition *before* running the job (``InsertIntoHadoopFsRelationCommand``), so a job that
fails mid-write leaves the partition empty. Dynamic overwrite writes to a ``.spark-staging-*``
directory and swaps partitions only at job commit, so a failed job leaves the old partitions
intact (tests/on_spark demonstrate both). What Spark does *not* guarantee: the commit itself
deletes then renames each partition directory, so a driver killed during commit, or a reader
listing files at that moment, can see a partition missing; a write touching several partitions
is not atomic across them. Rerunning the interval converges. One writer per table at a time.

Fingerprints run in Spark as one DataFrame aggregation (md5 of the canonical row text, sums of
the high and low 30 bits of its first 60 bits), equal to :mod:`twice.destinations.fingerprint`'s
``twice-fp-v2`` on every other engine (the older definition, kept to verify v2 records;
``twice-fp-v3``, the current one, is hashed in the Python workers over Arrow batches, see
fingerprint_sums). Float columns are the exception: Java's double-to-string
is not twice's shortest text, so the floats' part of each row is written by twice's Python
function in Spark's Python workers (``mapInArrow``, twice must be installed there), batch by
batch, and Spark sums the batches. Operations pin ``spark.sql.session.timeZone=UTC`` (for
``timestamptz`` text and Arrow conversion) and restore the session's settings afterwards.

Commit records (stamped writes, see :mod:`twice.destinations.commits`) are **not atomic with the
data** here: Spark cannot commit a file of ours in its job commit. A stamped
``replace_partition`` commits the data first, then fingerprints the slice (one more Spark job)
and writes the record as ``<warehouse>/_twice_commits/<table>/<token>-<id>.json`` (temp file +
rename). A crash between the two leaves the data without its record: reconcile then reads
"absent" and the retry rewrites the slice, which replace makes harmless. Fencing is best-effort:
the records are checked before the job, not under a lock (one writer per table, as above). A
stamped ``append`` is refused, since a crash between data and record would make its retry append
twice; unstamped, ``append`` is a plain ``INSERT INTO`` (not exactly-once).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from twice.core.extras import require
from twice.core.identifiers import validate_identifier
from twice.core.schemes import NO_UPSERT
from twice.destinations.base import DestinationSpec, WriteResult
from twice.destinations.columns import ColumnType, Schema, SchemaError, require_columns
from twice.destinations.commits import (
    ACTIVE,
    SPARK_COMMITS_DIR,
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
    replace_durably,
)
from twice.destinations.landing import Landing, admit, arrow_nulls
from twice.destinations.rows import RowsLike, to_arrow
from twice.destinations.slices import PartitionSpec, Slice

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

WHO = "spark:// destinations"
TABLE_FILE = "_twice_table.json"
DEFAULT_MASTER = "local[2]"
_LOCK = threading.RLock()  # session settings are session-wide: one twice operation at a time
_DDL = {
    "integer": "BIGINT", "float": "DOUBLE", "boolean": "BOOLEAN", "string": "STRING",
    "binary": "BINARY", "date": "DATE", "timestamp": "TIMESTAMP_NTZ", "timestamptz": "TIMESTAMP",
}
_TIMESTAMP_TEXT = "yyyy-MM-dd HH:mm:ss.SSSSSS"


def spark_session(master: str = DEFAULT_MASTER, warehouse: str | None = None) -> SparkSession:
    """The active SparkSession, or a new one on ``master`` (a running session wins: Spark
    allows one per process, and its static settings cannot change afterwards)."""
    session_class = require("pyspark.sql", extra="spark", who=WHO).SparkSession
    active = session_class.getActiveSession()
    if active is not None:
        return active
    builder = (
        session_class.builder.master(master).appName("twice")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if warehouse is not None:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    if not os.environ.get("PYSPARK_PYTHON"):
        # PySpark starts its Python workers with `python3` from PATH unless PYSPARK_PYTHON
        # says otherwise (read when the context starts; spark.pyspark.python is spark-submit's):
        # without an activated venv that is an interpreter without twice, and twice's
        # fingerprint runs in those workers (mapInArrow) after the data is written
        os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # Java missing, bad master URL: py4j / pyspark errors vary
        raise DestinationUnavailableError(
            f"spark destination: cannot start Spark on master {master!r}: {exc}"
        ) from None
    session.sparkContext.setLogLevel("ERROR")  # operators read twice's output, not Spark's
    return session


def column_type(spark_type: Any) -> ColumnType:
    """A Spark SQL data type as a twice logical type (unknown types become ``unsupported``)."""
    from pyspark.sql import types as T

    if isinstance(spark_type, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return ColumnType("integer")
    if isinstance(spark_type, T.BooleanType):
        return ColumnType("boolean")
    if isinstance(spark_type, (T.StringType, T.VarcharType, T.CharType)):
        return ColumnType("string")
    if isinstance(spark_type, T.BinaryType):
        return ColumnType("binary")
    if isinstance(spark_type, T.DateType):
        return ColumnType("date")
    if isinstance(spark_type, T.TimestampNTZType):
        return ColumnType("timestamp")
    if isinstance(spark_type, T.TimestampType):
        return ColumnType("timestamptz")
    if isinstance(spark_type, T.DecimalType):
        return ColumnType("decimal", spark_type.precision, spark_type.scale)
    if isinstance(spark_type, (T.DoubleType, T.FloatType)):
        return ColumnType("float")
    return ColumnType("unsupported", engine_type=spark_type.simpleString())


def ddl_type(ctype: ColumnType) -> str:
    if ctype.kind == "decimal":
        return f"DECIMAL({ctype.precision},{ctype.scale})"
    if ctype.kind not in _DDL:
        raise SchemaError(f"Spark tables cannot hold {ctype}")
    return _DDL[ctype.kind]


def _q(name: str) -> str:
    """Backtick-quote a validated identifier (the pattern excludes backticks)."""
    return f"`{validate_identifier(name, 'identifier')}`"


class SparkDestination(HiveDestination):
    """An external partitioned Parquet table in a Spark session catalog; see the module doc."""

    engine = "spark"
    kind_name = "Spark"
    noun = "table"
    no_upsert = NO_UPSERT["spark"]
    escaped_names = True  # Spark %-escapes special characters in directory names

    def __init__(
        self,
        warehouse: Path,
        table: str,
        *,
        spec: str,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
        overwrite: str = "static",
        master: str = DEFAULT_MASTER,
        session: SparkSession | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.table = validate_identifier(table, "table name")
        self.location = warehouse / self.table
        super().__init__(spec=spec, partition_column=partition_column, key_columns=key_columns,
                         overwrite=overwrite)
        self.master = master
        self._session = session  # shared: it outlives the destination (close() releases nothing)
        self._checked = False
        self._read_metadata()  # learn (or check) the partition column the table records

    @property
    def spark(self) -> SparkSession:
        if self._session is None:
            self._session = spark_session(self.master, str(self.warehouse))
        return self._session

    # -- schema and catalog -----------------------------------------------------------------

    def _read_metadata(self) -> dict[str, Any] | None:
        path = self.location / TABLE_FILE
        if not path.exists():
            return None
        try:
            meta: dict[str, Any] = json.loads(path.read_text())
            stored = str(meta["partition_column"])
            list(meta["columns"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DestinationError(f"{self.spec}: {path} is not a twice table file: {exc}"
                                   ) from None
        self._adopt_partition_column(stored)
        return meta

    def schema(self) -> Schema | None:
        """Column -> type of the table (Spark order: partition column last), None if absent."""
        if not self._ensure_registered():
            return None
        fields = self.spark.table(self.table).schema.fields
        return {f.name: column_type(f.dataType) for f in fields}

    def _ensure_registered(self) -> bool:
        """Make the session catalog know the table on disk; False if there is none yet."""
        meta = self._read_metadata()
        catalog_has = self.spark.catalog.tableExists(self.table)
        if catalog_has:
            if not self._checked:
                self._check_location()
            return True
        if meta is None:
            return False
        columns = [(str(n), ColumnType(**t)) for n, t in meta["columns"]]
        self._create_table(dict(columns), str(meta["partition_column"]))
        return True

    def _check_location(self) -> None:
        rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED {_q(self.table)}").collect()
        found = next((r.data_type for r in rows if r.col_name == "Location"), None)
        if found is None or _local_path(found) != self.location:
            raise DestinationError(
                f"{self.spec}: the Spark session already has a table {self.table!r} at "
                f"{found}; one session cannot hold two tables of that name"
            )
        self._checked = True

    def _create_table(self, schema: Schema, column: str) -> None:
        """CREATE TABLE ... USING parquet PARTITIONED BY ... LOCATION, partitions untracked."""
        text = str(self.location)
        if "'" in text or "\\" in text:
            raise DestinationError(f"spark warehouse path {text!r} must not contain ' or \\")
        self.location.mkdir(parents=True, exist_ok=True)
        ordered = [n for n in schema if n != column] + [column]
        columns = ", ".join(f"{_q(n)} {ddl_type(schema[n])}" for n in ordered)
        with self._conf({"spark.sql.hive.manageFilesourcePartitions": "false"}):
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {_q(self.table)} ({columns}) USING parquet "
                f"PARTITIONED BY ({_q(column)}) LOCATION '{text}'"
            )
        self._check_location()
        path = self.location / TABLE_FILE
        if not path.exists():
            meta = {
                "partition_column": column,
                "columns": [
                    [n, {"kind": schema[n].kind, "precision": schema[n].precision,
                         "scale": schema[n].scale}]
                    for n in ordered
                ],
            }
            replace_durably(path, json.dumps(meta, indent=1),
                            self.location / f".{TABLE_FILE}.{uuid.uuid4().hex}")

    @contextmanager
    def _conf(self, settings: dict[str, str]) -> Iterator[None]:
        """Set session settings for one operation and restore the previous values."""
        with _LOCK:
            conf = self.spark.conf
            before: dict[str, str | None] = {key: conf.get(key, None) for key in settings}
            for key, value in settings.items():
                conf.set(key, value)
            try:
                yield
            finally:
                for key, previous in before.items():
                    if previous is None:
                        conf.unset(key)
                    else:
                        conf.set(key, previous)

    def _utc(self) -> AbstractContextManager[None]:
        return self._conf({"spark.sql.session.timeZone": "UTC"})

    # -- writes -----------------------------------------------------------------------------

    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, overwrite: str | None = None,
        stamp: StampArg = ACTIVE,
    ) -> WriteResult:
        """Replace the slice (static) or the partitions receiving rows (dynamic).

        With a stamp (default: the active one) the commit record is written AFTER the data
        commits (not atomically: see the module docstring); fencing is best-effort.
        """
        owner = resolve_stamp(stamp)
        if owner is not None:
            self._check_fence(owner)
        mode = check_mode(overwrite or self.overwrite)
        incoming = self._incoming(rows, partition, whole_table=False)
        table, column, label = incoming.table, incoming.column, incoming.label
        if owner is not None and mode == "static":
            # the record follows the data here, so the attempt's admission decides before the
            # job, on the incoming rows: a static overwrite leaves the slice exactly those
            # (a dynamic one keeps partitions Spark alone can count: decided after the write)
            admit(Landing(self.spec, label, "replace", table.num_rows, table.num_rows,
                          arrow_nulls(lambda names: [table])))
        schema, receiving = self._prepared(incoming)
        ordered = table.select(list(schema))
        current = list(self._partitions_in(self.location, incoming.slice,
                                           schema[column]).values())
        cleared = sorted(set(current) - set(receiving)) if mode == "static" else []
        replaced = sorted(set(receiving) & set(current))
        deleted = self._count_in(column, [*replaced, *cleared])
        settings = {
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.sources.partitionOverwriteMode": "dynamic",
        }
        view = f"twice_incoming_{uuid.uuid4().hex[:12]}"
        with self._conf(settings):
            spark_schema = self.spark.table(self.table).schema
            frame = self._prepare(self.spark.createDataFrame(ordered, schema=spark_schema))
            frame.createOrReplaceTempView(view)
            staging_before = self._staging_dirs()
            try:
                names = ", ".join(_q(n) for n in schema)
                if receiving:
                    self.spark.sql(f"INSERT OVERWRITE {_q(self.table)} SELECT {names} FROM {view}")
                others = ", ".join(_q(n) for n in schema if n != column)
                for value in cleared:
                    self.spark.sql(
                        f"INSERT OVERWRITE {_q(self.table)} PARTITION ({_q(column)} = :value) "
                        f"SELECT {others} FROM {view} WHERE false",
                        args={"value": value},
                    )
            except BaseException:
                self._remove_staging(staging_before)
                raise
            finally:
                self.spark.catalog.dropTempView(view)
        commit = None
        if owner is not None:
            commit = self._write_record(
                owner, "replace", label, partition, table.num_rows, {"rows_deleted": deleted}
            )
        return WriteResult(
            self.spec, label, mode, table.num_rows, deleted,
            partitions_written=tuple(dir_name(column, v) for v in sorted(receiving)),
            partitions_removed=tuple(dir_name(column, v) for v in cleared),
            commit=commit,
        )

    def append(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Plain ``INSERT INTO`` (not exactly-once); a stamped append is refused here."""
        if resolve_stamp(stamp) is not None:
            raise DestinationError(
                f"{self.spec}: a stamped (exactly-once) append needs a commit record atomic "
                "with the rows, which Spark Parquet tables cannot give; use replace_partition, "
                "or a SQL or Parquet destination"
            )
        incoming = self._incoming(rows, partition, whole_table=True)
        table, column = incoming.table, incoming.column
        schema, receiving = self._prepared(incoming)
        if table.num_rows:
            view = f"twice_incoming_{uuid.uuid4().hex[:12]}"
            with self._utc():
                spark_schema = self.spark.table(self.table).schema
                frame = self.spark.createDataFrame(table.select(list(schema)),
                                                   schema=spark_schema)
                frame.createOrReplaceTempView(view)
                try:
                    names = ", ".join(_q(n) for n in schema)
                    self.spark.sql(f"INSERT INTO {_q(self.table)} SELECT {names} FROM {view}")
                finally:
                    self.spark.catalog.dropTempView(view)
        return WriteResult(
            self.spec, incoming.label, "append", table.num_rows, None,
            partitions_written=tuple(dir_name(column, v) for v in sorted(receiving)),
        )

    def _prepared(self, incoming: Incoming) -> tuple[Schema, list[Any]]:
        """(the table's schema, the partition values receiving rows), after refusing types
        and values Spark cannot hold and creating the table if it is new."""
        schema = incoming.schema
        for ctype in schema.values():
            ddl_type(ctype)  # refuse unsupported types before creating anything
        receiving = _distinct(incoming.table, incoming.column)
        for value in receiving:
            dir_name(incoming.column, value)  # refuse values that cannot be directory names
        if incoming.existing is None:
            self._create_table(schema, incoming.column)
            schema = self.schema() or schema
        return schema, receiving

    # -- commit records (not atomic with the data: see the module docstring) -----------------

    @property
    def _records_dir(self) -> Path:
        return self.warehouse / SPARK_COMMITS_DIR / self.table

    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]:
        """This table's commit records (of ``uow_id`` only, if given), by (token,
        committed_at); ``[]`` when there are none (nothing is created by looking)."""
        directory = self._records_dir
        if not directory.is_dir():
            return []
        records = []
        for path in sorted(directory.glob("*.json")):
            try:
                record = CommitRecord.from_dict(json.loads(path.read_text()))
            except FileNotFoundError:
                continue
            if uow_id is None or record.uow_id == uow_id:
                records.append(record)
        return sorted(records, key=lambda r: r.sort_key)

    def _check_fence(self, owner: WriteStamp) -> None:
        """Ownership, then fencing: best-effort here (read before the job, not under a lock)."""
        records = self.commit_records()
        check_ledger_records(owner, records, self.spec)
        check_fence_records(owner, records, self.spec)

    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord:
        """See :meth:`BaseDestination.adopt`: an ``adopt`` record file (best-effort, as
        fencing is here: checked, then written, not under a lock)."""
        tokens = [r.token for r in self.commit_records()]
        check_adoption(stamp, max(tokens) if tokens else None, self.spec)
        record = CommitRecord.adoption(stamp, table=self.table, note=note, operator=operator)
        directory = self._records_dir
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{stamp.token:020d}-{uuid.uuid4().hex[:12]}.json"
        replace_durably(directory / name, record.to_json(), directory / f".{name}.tmp")
        return record

    def _write_record(
        self, owner: WriteStamp, mode: str, label: str, partition: PartitionSpec,
        rows_written: int, extra: dict[str, Any],
    ) -> CommitRecord:
        from twice.destinations.fingerprint import record_fingerprint

        schema = self.schema()
        assert schema is not None  # the data was just written
        count, checksum, algorithm, columns = record_fingerprint(self, schema, partition)
        record = CommitRecord.create(
            owner, table=self.table, slice=label, mode=mode, rows_written=rows_written,
            row_count=count, checksum=checksum, algorithm=algorithm, columns=columns,
            extra={"location": str(self.location), **extra},
        )
        directory = self._records_dir
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{owner.token:020d}-{uuid.uuid4().hex[:12]}.json"
        replace_durably(directory / name, record.to_json(), directory / f".{name}.tmp")
        return record

    def _staging_dirs(self) -> set[Path]:
        root = Path(self.location)
        if not root.is_dir():
            return set()
        return {p for p in root.iterdir() if p.name.startswith(".spark-staging")}

    def _remove_staging(self, before: set[Path]) -> None:
        """Remove the staging folders a failed job of ours left behind.

        Spark's job abort deletes them best-effort and asynchronously: a task cancelled late can
        leave one. They never hold visible data (partitions are swapped in only at job commit),
        but left alone they pile up. One writer per table (see the module docstring) makes every
        new staging folder ours. Looked at twice because a straggling task can still be writing.
        """
        for pause in (0.0, 0.5, 1.0):
            time.sleep(pause)
            for path in self._staging_dirs() - before:
                shutil.rmtree(path, ignore_errors=True)

    def _prepare(self, frame: DataFrame) -> DataFrame:
        """Seam: the incoming rows as Spark will write them. Returns ``frame`` unchanged;
        failure tests wrap it so that one task of the INSERT job raises mid-write."""
        return frame

    # -- reads ------------------------------------------------------------------------------

    def _frame(self, partition: PartitionSpec) -> tuple[DataFrame, Schema]:
        """The table (refreshed: another process may have written) filtered to the slice."""
        schema = self.schema()
        if schema is None:
            raise DestinationError(f"{self.spec}: table {self.table!r} does not exist")
        self.spark.catalog.refreshTable(self.table)
        frame = self.spark.table(self.table)
        if partition is not None:
            column = self._require_partition_column(schema)
            frame = frame.where(self._predicate(Slice.of(column, schema[column], partition)))
        return frame, schema

    @staticmethod
    def _predicate(slc: Slice) -> Column:
        from pyspark.sql import functions as F

        column = F.col(slc.column)
        if slc.is_range:
            return (column >= F.lit(slc.low)) & (column < F.lit(slc.high))
        return column == F.lit(slc.value)

    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Rows of the slice (all rows when ``partition`` is None), as Arrow."""
        with self._utc():
            frame, schema = self._frame(partition)
            names = list(schema) if columns is None else list(columns)
            require_columns(schema, names)
            result = frame.select(*names).toArrow()
        return to_arrow(result, target={n: schema[n] for n in names})

    def fingerprint_sums(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """(count, high sum, low sum) of ``twice-fp-v3``: the columns go to Spark's Python
        workers as Arrow (``mapInArrow``), which hash each batch with twice's vectorised
        function; Spark sums the batches. twice must be importable there."""
        from pyspark.sql import functions as F

        with self._utc():
            frame, schema = self._frame(partition)
            require_columns(schema, columns)
            types = tuple(schema[c] for c in columns)
            with warnings.catch_warnings():  # pyspark 4 warns about pandas 3 here
                warnings.filterwarnings("ignore", category=FutureWarning,
                                        message="PySpark does not yet fully support")
                sums = frame.select(*columns).mapInArrow(
                    partial(_v3_batch_sums, types), "n long, high long, low long")
            row = sums.agg(F.sum("n"), F.sum("high"), F.sum("low")).first()
        assert row is not None  # a global aggregate always yields one row
        return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)

    def fingerprint_sums_v2(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """(count, high sum, low sum) of twice-fp-v2 row hashes, aggregated inside Spark.

        Without float columns: one DataFrame aggregation (md5 in the JVM). With float columns:
        Spark's double-to-string is Java's (``4.9E-324``, ``1.9999999999999998E23``), not
        twice's shortest text, so Spark computes the other columns' text and hands the float
        values, exactly, to twice's Python function in its Python workers (``mapInArrow``),
        which hash each batch; Spark sums the batches. twice must be importable there.
        """
        from pyspark.sql import functions as F

        from twice.destinations.fingerprint import (
            LOW_BITS,
            LOW_MASK,
            UNIT_SEPARATOR,
            float_segments,
        )

        with self._utc():
            frame, schema = self._frame(partition)
            require_columns(schema, columns)
            typed = [(c, schema[c]) for c in columns]

            def encoded(run: list[tuple[str, ColumnType]]) -> Column:
                parts = [
                    F.when(F.col(c).isNull(), F.lit("N")).otherwise(
                        F.concat(F.lit("V"), _canonical_text(F.col(c), t))
                    )
                    for c, t in run
                ]
                return F.concat_ws(UNIT_SEPARATOR, *parts)

            if any(t.kind == "float" for _, t in typed):
                runs = float_segments(typed)
                values = [
                    (F.col(run[0][0]).cast("double") if is_float else encoded(run)).alias(f"v{i}")
                    for i, (is_float, run) in enumerate(runs)
                ]
                with warnings.catch_warnings():  # pyspark 4 warns about pandas 3 here
                    warnings.filterwarnings("ignore", category=FutureWarning,
                                            message="PySpark does not yet fully support")
                    sums = frame.select(*values).mapInArrow(
                        partial(_float_batch_sums, tuple(is_float for is_float, _ in runs)),
                        "n long, high long, low long",
                    )
                row = sums.agg(F.sum("n"), F.sum("high"), F.sum("low")).first()
            else:
                text = encoded(typed)
                hashed = F.conv(F.substring(F.md5(text), 1, 15), 16, 10).cast("bigint")
                row = frame.select(hashed.alias("h")).agg(
                    F.count(F.lit(1)),
                    F.sum(F.shiftright(F.col("h"), LOW_BITS)),
                    F.sum(F.col("h").bitwiseAND(F.lit(LOW_MASK))),
                ).first()
        assert row is not None  # a global aggregate always yields one row
        return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)

    def null_counts(self, partition: PartitionSpec, columns: Sequence[str]) -> dict[str, int]:
        from pyspark.sql import functions as F

        with self._utc():
            frame, schema = self._frame(partition)
            require_columns(schema, columns)
            if not columns:
                return {}
            row = frame.agg(*[
                F.sum(F.when(F.col(c).isNull(), 1).otherwise(0)).alias(c) for c in columns
            ]).first()
        assert row is not None
        return {c: int(row[c] or 0) for c in columns}

    def row_count(self, partition: PartitionSpec = None) -> int:
        with self._utc():
            frame, _ = self._frame(partition)
            return int(frame.count())

    # -- helpers ----------------------------------------------------------------------------

    def _count_in(self, column: str, values: Sequence[Any]) -> int:
        if not values:
            return 0
        from pyspark.sql import functions as F

        self.spark.catalog.refreshTable(self.table)
        frame = self.spark.table(self.table).where(F.col(column).isin(list(values)))
        return int(frame.count())



def _canonical_text(column: Column, ctype: ColumnType) -> Column:
    """Spark expression for the canonical text of a non-null value (see twice.columns)."""
    from pyspark.sql import functions as F

    kind = ctype.kind
    if kind == "timestamp":
        return F.date_format(column, _TIMESTAMP_TEXT)
    if kind == "timestamptz":  # session time zone pinned to UTC by the caller
        return F.concat(F.date_format(column, _TIMESTAMP_TEXT), F.lit("Z"))
    if kind == "binary":
        return F.lower(F.hex(column))
    if kind in ("integer", "boolean", "string", "date", "decimal"):
        return column.cast("string")  # decimals: plain notation, exactly `scale` digits
    raise SchemaError(f"{ctype} values have no canonical text in Spark SQL (floats go through "
                      "twice's Python function, see fingerprint_sums)")


def _v3_batch_sums(types: tuple[ColumnType, ...], batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body (runs in Spark's Python workers): see fingerprint_sums."""
    from twice.destinations.fingerprint import v3_batch_sums

    yield from v3_batch_sums(types, batches)


def _float_batch_sums(floats: tuple[bool, ...], batches: Iterator[pa.RecordBatch]
                      ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body (runs in Spark's Python workers): see fingerprint_sums."""
    from twice.destinations.fingerprint import batch_sums

    yield from batch_sums(batches, floats)


def _local_path(location: str) -> Path:
    """``file:/abs/path`` (Spark's spelling, possibly %-escaped) as a local path."""
    text = unquote(location.removeprefix("file:"))
    return Path("/" + text.lstrip("/")).absolute()


def _distinct(table: pa.Table, column: str) -> list[Any]:
    import pyarrow.compute as pc

    return [v for v in pc.unique(table.column(column)).to_pylist() if v is not None]


def open_destination(spec: DestinationSpec) -> SparkDestination:
    """Open ``spark:///abs/warehouse[?partition_column=day&overwrite=static|dynamic
    &master=local[2]]#table`` (``?table=NAME`` may replace ``#table``)."""
    require("pyspark", extra="spark", who=WHO)  # found before anything runs (check_spec)
    options = dict(spec.options)
    overwrite = options.pop("overwrite", "static")
    master = options.pop("master", DEFAULT_MASTER) or DEFAULT_MASTER
    table = options.pop("table", "")
    if options:
        raise DestinationSpecError(f"spark destination: unknown options {sorted(options)}")
    if table and spec.fragment and table != spec.fragment:
        raise DestinationSpecError(
            f"spark destination names two tables: table={table!r} and #{spec.fragment}"
        )
    table = table or spec.fragment
    if not table:
        raise DestinationSpecError(
            "spark destination names no table: add '#table' or '?table=NAME'")
    validate_identifier(table, "table name")
    check_mode(overwrite)
    warehouse = Path(spec.file_path()).expanduser().absolute()
    return SparkDestination(
        warehouse, table, spec=f"spark://{warehouse}{canonical_query(spec, overwrite)}#{table}",
        partition_column=spec.partition_column, key_columns=spec.key_columns,
        overwrite=overwrite, master=master,
    )
