"""Connecting to the ledger database: URL resolution, SQLite durability, dialect differences.

Two engines are supported and both must be safe under real concurrency:

* SQLite (the embedded default): WAL so readers never block the writer, ``synchronous=FULL``
  so a commit survives power loss, a busy timeout so writers queue instead of failing, foreign
  keys on, and every write transaction opened with ``BEGIN IMMEDIATE`` so that a
  read-then-write (next attempt number, lease check) holds the write lock from its first read.
* PostgreSQL (shared by many workers) through psycopg 3: row locks serialise writers of the
  same unit of work, pool or partition only (``lock_key``; a unit's own row ``FOR NO KEY
  UPDATE``, which never blocks the foreign-key checks of concurrent inserts, so grouped
  transactions do not deadlock on them).
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Engine, Table, any_, bindparam, create_engine, event, false
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL, Connection, RootTransaction, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.pool import StaticPool

from twice.core.extras import require
from twice.core.secrets import redact, redact_url
from twice.ledger.errors import LedgerError
from twice.ledger.prepared import Ahead, inserting_new, prepare, run
from twice.ledger.schema import locks

DEFAULT_PATH = "twice-ledger.db"
ENV_VAR = "TWICE_LEDGER"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
POSTGRES_CONNECT_TIMEOUT_SECONDS = 5


def mask_url(url: str | URL) -> str:
    """The URL with any password replaced by ``***``, safe for messages and logs: the
    password of its user, and a password given as a query parameter (``?password=``), masked
    as ``twice.core.secrets.redact_url`` masks them."""
    text = url.render_as_string(hide_password=True) if isinstance(url, URL) else url
    return redact_url(text)


#: ``key=value`` words of a libpq connection string, which a file path never holds.
_LIBPQ_KEYWORDS = re.compile(r"(?:^|\s)(?:host|hostaddr|dbname|user|password|port|sslmode)=\S")


def resolve_url(url: str | os.PathLike[str] | None) -> URL:
    """Turn what a user typed into a SQLAlchemy URL for SQLite or PostgreSQL + psycopg 3.

    ``None`` means ``$TWICE_LEDGER`` or ``twice-ledger.db`` in the working directory; a string
    without ``://`` is a SQLite file path; ``postgres://``, ``postgresql://`` and other
    PostgreSQL drivers are normalised to ``postgresql+psycopg://`` (the one driver installed).
    """
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_PATH
    text = os.fspath(url).strip()
    if not text:
        raise LedgerError(
            "empty ledger URL: give sqlite:///path.db, a file path or postgresql://..."
        )
    if "://" not in text:
        if text == ":memory:":
            return make_url("sqlite://")
        if _LIBPQ_KEYWORDS.search(text):  # never a file named after a password
            raise LedgerError(
                f"ledger {redact(text)!r} looks like a libpq keyword string, not a file path: "
                "give a URL, postgresql://user:password@host/database"
            )
        return URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError) as exc:  # a bad port is a ValueError
        raise LedgerError(f"malformed ledger URL {mask_url(text)}: {exc}") from None
    backend = parsed.drivername.partition("+")[0]
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        return parsed.set(drivername="sqlite")
    raise LedgerError(
        f"unsupported ledger URL {mask_url(parsed)}: use sqlite:///path.db, a file path, "
        "or postgresql://user:password@host/database"
    )


def create_ledger_engine(
    url: URL,
    *,
    busy_timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS,
    read_only: bool = False,
    immutable: bool = False,
) -> Engine:
    """An engine configured for durable, concurrent ledger use on its dialect.

    ``busy_timeout``: how long a SQLite statement waits for another connection's lock before
    failing with "database is locked" (the ``Ledger`` then retries the whole transaction).
    ``read_only``: open without ever writing: SQLite in ``mode=ro`` (or ``immutable=1`` when
    ``immutable``, for a WAL file on a read-only file system whose ``-shm`` cannot be created),
    with no switch to WAL and plain deferred transactions; PostgreSQL sessions read-only.
    """
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url, busy_timeout=busy_timeout, read_only=read_only,
                              immutable=immutable)
    require("psycopg", extra="postgres", who="PostgreSQL ledgers")
    connect_args: dict[str, Any] = {"application_name": "twice-ledger"}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_SECONDS
    if read_only:
        connect_args["options"] = "-c default_transaction_read_only=on"
    engine = create_engine(url, connect_args=connect_args)
    _ping_after_idle(engine)
    return engine


#: A pooled PostgreSQL connection idle longer than this is pinged before use.
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_after_idle(engine: Engine) -> None:
    """Ping a pooled connection before use when it has been idle for a while (the server
    restarted, an idle timeout or a firewall cut it): a dead one is replaced at checkout.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout, a round trip per transaction: two
    of the thirty a backfill's unit makes. A connection checked in under a second ago is used
    as it is; if it died meanwhile, its first statement fails as a lost connection, a
    transient fault every ledger transaction is retried on (``twice.ledger.session``)."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _idle_from(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["twice_idle_from"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _alive(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_from = record.info.pop("twice_idle_from", None)
        if idle_from is None or time.monotonic() - idle_from < PING_AFTER_IDLE_SECONDS:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                raise DisconnectionError(f"ledger connection lost while idle: {exc}") from exc
            raise


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite ledger; None for PostgreSQL and in-memory databases."""
    if url.get_backend_name() != "sqlite" or is_in_memory(url):
        return None
    return Path(url.database or "")


def read_only_reason(url: URL) -> str | None:
    """Why an existing SQLite ledger file cannot be written here, or None if it can.

    ``access(2)`` answers for the file system too (``EROFS`` even for root); the folder must be
    writable as well, since SQLite creates the ``-wal`` and ``-shm`` files beside the ledger.
    """
    path = sqlite_path(url)
    if path is None or not path.is_file():
        return None
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return f"{path.parent} is on a read-only file system"
    except (OSError, AttributeError):  # pragma: no cover - statvfs missing (Windows)
        pass
    if not os.access(path, os.W_OK):
        return f"{path} is not writable"
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is not writable (SQLite needs its -wal and -shm files)"
    return None


def is_in_memory(url: URL) -> bool:
    """A SQLite database that lives only as long as the process (``sqlite://``, ``:memory:``)."""
    if url.get_backend_name() != "sqlite":
        return False
    return (url.database or "") in ("", ":memory:") or url.query.get("mode") == "memory"


def _refuse_foreign_database(path: Path, url: URL) -> None:
    """A SQLite file that already holds other tables is someone else's database, not a ledger.

    ``--ledger warehouse.db`` is a typo more often than a wish: twice must not add its tables
    to an application's database, nor switch it to WAL. Checked read-only, before the engine
    touches the file. (A PostgreSQL database is shared by design: the tables carry ``twice_``.)
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as conn:
            names = [row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )]
    except sqlite3.Error:
        return  # not a database, or damaged: opening it reports that with SQLite's words
    foreign = [name for name in names if not name.startswith("twice_")]
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise LedgerError(
            f"{mask_url(url)} is not a twice ledger: it already holds other tables ({shown}); "
            "give a new file for the ledger"
        )


def _read_only_url(url: URL, *, immutable: bool) -> URL:
    """``file:`` URI of the ledger opened read-only (SQLite's ``mode=ro`` or ``immutable=1``)."""
    uri = Path(url.database or "").absolute().as_uri()
    query = {"immutable": "1"} if immutable else {"mode": "ro"}
    return URL.create("sqlite", database=uri, query={**query, "uri": "true"})


def _sqlite_engine(url: URL, *, busy_timeout: float, read_only: bool, immutable: bool) -> Engine:
    database = url.database or ""
    in_memory = is_in_memory(url)
    if in_memory:
        # One shared connection, or every checkout would see a different empty database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        folder = Path(database).parent
        if not folder.is_dir():
            raise LedgerError(f"cannot open ledger {mask_url(url)}: folder {folder} does not exist")
        if read_only and not Path(database).is_file():
            raise LedgerError(
                f"cannot open ledger {mask_url(url)} read-only: no file {database}"
            )
        _refuse_foreign_database(Path(database), url)
        target = _read_only_url(url, immutable=immutable) if read_only else url
        engine = create_engine(target, connect_args={"timeout": busy_timeout})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module (it never begins before a SELECT), so the
        # "begin" hook below decides how each transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if read_only:
                cursor.execute("PRAGMA query_only = ON")
            elif not in_memory:
                _enter_wal(cursor, busy_timeout)
            if not read_only:
                cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    return engine


def begin(conn: Connection, *, read_only: bool) -> RootTransaction:
    """Begin ``conn``'s transaction; on SQLite, ``BEGIN DEFERRED`` to read and ``BEGIN
    IMMEDIATE`` to write (see the module docstring). Issued here, by the one place that
    starts the ledger's transactions (``Session``), rather than from an engine ``begin``
    listener: any connection event makes SQLAlchemy dispatch events around every statement."""
    transaction = conn.begin()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN DEFERRED" if read_only else "BEGIN IMMEDIATE")
    return transaction


def _enter_wal(cursor: Any, busy_timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS) -> None:
    """Switch the database to WAL, waiting out other processes' locks.

    SQLite answers "database is locked" at once, without calling the busy handler, when this
    needs an exclusive lock while another connection still writes in rollback mode: several
    processes opening a brand-new ledger together hit exactly that. So retry until the busy
    timeout, as a write would wait.
    """
    import sqlite3

    give_up = time.monotonic() + busy_timeout
    delay = 0.002
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() + delay > give_up:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def is_postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def one_of(conn: Connection, column: Any, values: Sequence[Any]) -> ColumnElement[bool]:
    """``column IN (values)`` for a batch read. On PostgreSQL it is ``column = ANY(:array)``:
    one parameter whatever the batch's size, so the statement's text is the same for every
    batch, where an ``IN`` list of hundreds of placeholders is parsed by psycopg on every
    execution (about 5 ms for 900 of them) and planned again by the server."""
    if is_postgres(conn):
        return column == any_(bindparam(None, list(values), type_=ARRAY(column.type)))
    return column.in_(values)  # type: ignore[no-any-return]


def insert_ignore(conn: Connection, table: Table, values: Mapping[str, Any]) -> bool:
    """INSERT the row unless its key exists; True if this call inserted it.

    On PostgreSQL a concurrent uncommitted insert of the same key makes this wait for that
    transaction, so exactly one of two racing callers gets True.
    """
    return run(conn, inserting_new(conn.dialect.name, table), values).first() is not None


def lock_key(conn: Connection, kind: str, name: str) -> None:
    """Serialise this transaction with every other one that locks the same (kind, name).

    SQLite needs nothing: write transactions start with BEGIN IMMEDIATE and so already exclude
    each other. PostgreSQL locks one row of ``twice_locks`` until commit, in one statement
    (``_LOCK_ROW``): the row is inserted, or, when it exists, locked by ``ON CONFLICT DO
    UPDATE ... WHERE false``, which locks the conflicting row and updates nothing. Earlier
    releases took the same row ``FOR NO KEY UPDATE`` after an insert; both locks conflict,
    so mixed releases still exclude each other.
    """
    if not is_postgres(conn):
        return
    run(conn, _LOCK_ROW, {"kind": kind, "name": name})


def lock_key_ahead(conn: Connection, kind: str, name: str) -> Ahead | None:
    """:func:`lock_key`'s statement, to run with others (``prepared.run_ahead``: the ones
    after it run once the lock is held). None on SQLite, which needs none."""
    if not is_postgres(conn):
        return None
    return _LOCK_ROW, {"kind": kind, "name": name}, None


_LOCK_ROW = prepare(
    pg_insert(locks).values(kind=bindparam("kind"), name=bindparam("name"))
    .on_conflict_do_update(index_elements=[locks.c.kind, locks.c.name],
                           set_={"kind": pg_insert(locks).excluded.kind}, where=false())
)
