"""Commit records: who wrote a slice, committed atomically with the rows (the exactly-once core).

Every *owned* write (a write made while an attempt's :class:`WriteStamp` is active, or with an
explicit ``stamp=``) commits, in the same transaction as the data, one :class:`CommitRecord`:
the unit of work, job generation, attempt, lease (fencing) token and input version that wrote
it, and the fingerprint of the slice as committed. Where it lives: a twice-owned table
``twice_commits`` in the same database on SQLite, DuckDB and PostgreSQL; a ``_twice_commit.json``
file inside the swapped partition directory on Parquet. Spark cannot commit it atomically with
the data (documented there).

What it is for:

- **Reconcile from the destination.** An attempt whose outcome is unknown (killed, timed out,
  the ledger failed after the write) is settled by reading the commit record for that unit,
  generation and attempt: present means the write happened (with that fingerprint), absent
  means nothing twice owns was written, so a retry is safe. No user ``reconcile=`` is needed.
- **Fencing.** ``fence_key`` names the (pipeline, task, interval) slot a unit fills, whatever its
  versions. Inside the write transaction the destination refuses (:class:`FencedWriteError`,
  nothing written) a stamp whose ``token`` is lower than the highest token already committed for
  the same fence key: a worker paused past its lease writes nothing once the taker has written.
  Tokens come from one ledger-wide sequence (every lease acquisition takes the next), so they
  are comparable across units of the same slot (an old input version cannot overwrite a new one).
- **One ledger per destination.** A stamp names its ledger (``WriteStamp.ledger``, the
  ledger's identity) and so does every record it commits (``extra``). A destination belongs to
  the ledger of its newest ``adopt`` record, else of its first write that names a ledger
  (:func:`ledger_owner`); a write stamped by another ledger is refused in the same place as the
  fencing check, whatever its token (:func:`check_ledger`, :class:`ForeignLedgerError`): two
  ledgers' token sequences are not comparable. ``twice adopt`` moves a destination to another
  ledger with an ``adopt`` record under a token above every token present.
- **Append exactly once.** ``append`` with a stamp is a no-op when a commit record for the same
  unit and generation already exists in that table. Without a stamp ``append`` is a plain
  insert: a retry appends the rows again (not exactly-once).

How each engine keeps it
------------------------
Every write method takes ``stamp=`` (default :data:`ACTIVE`: read :func:`active_stamp`; an
explicit ``stamp=None`` writes unstamped, with no record and no fencing). A stamped write, in
ONE transaction with its rows: creates the commits table if missing, refuses an older token
for the same ``(table, fence_key)`` (equal tokens pass: the same lease writing again), writes
the rows, fingerprints the slice as it now is (same connection, so it sees the uncommitted
rows; ``twice-fp-v3`` over every column, as ``twice.destinations.fingerprint.fingerprint`` computes
it by default, the columns listed in the record; ``algorithm "none"`` and an empty checksum when the
slice cannot be fingerprinted, e.g. a PostgreSQL database that is not UTF8), lets the attempt's
admission decide on that slice (``twice.destinations.landing``: acceptance before landing; a
refusal rolls everything back) and inserts the record.
``CommitRecord.table`` is the table unquoted (``schema.table`` when the destination names a schema,
PostgreSQL always does), the dataset directory on Parquet, the table name on Spark.
``commit_records()`` returns them ordered by (token, committed_at).

- **SQLite**: ``twice_commits`` in the same database file; ``BEGIN IMMEDIATE`` serialises writers,
  so the fencing read cannot race.
- **DuckDB**: ``twice_commits`` in the destination table's schema (``main`` or ``schema.`` of
  ``#schema.table``). One process owns a DuckDB file; inside it, stamped writes to one file are
  serialised by a per-file lock (DuckDB's optimistic concurrency would not catch two appends).
- **PostgreSQL**: ``<schema>.twice_commits``, in the destination table's schema (the writer can
  create tables there; the records live and die with the data). The fencing read is made
  race-free with ``pg_advisory_xact_lock`` on (table, fence_key), in a READ COMMITTED
  transaction, so a second writer of the same slot waits and then sees the first one's record.
- **Parquet**: ``_twice_commit.json`` (:meth:`CommitRecord.to_json`) inside every partition
  directory a write swaps in, written into the staging directory before the swap, so it lands
  with the files; older records of that directory are carried into ``_twice_commits.jsonl``
  next to it (records are never dropped by twice: a static overwrite that empties a partition
  holding records leaves the directory with its records and no data files). A write that
  changes no partition directory (zero rows and nothing to empty) puts its record in
  ``<dataset>/_twice_commits.jsonl``. A stamped append is exactly once per partition.
  Fencing reads the slice's directories under the dataset's ``flock``. A write spanning several
  partitions commits each atomically, not all together: :meth:`commit_records` reports a record
  only once every partition it wrote carries it (otherwise it reads as absent, and the retry
  rewrites the slice).
- **Spark**: NOT atomic. The data commits first (Spark's job commit), then the record is written
  as a JSON file under ``<warehouse>/_twice_commits/<table>/``. A crash between the two leaves
  the data without its record: reconcile reads "absent" and the retry rewrites the slice, which
  ``replace_partition`` makes harmless. Fencing there is best-effort (checked before the job,
  not under a lock), and a stamped ``append`` is refused (it could not be exactly-once).
"""

from __future__ import annotations

import contextvars
import copy
import enum
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

from twice.destinations.errors import DestinationError
from twice.errors import ConflictError

COMMITS_TABLE = "twice_commits"
PARQUET_COMMIT_FILE = "_twice_commit.json"
PARQUET_HISTORY_FILE = "_twice_commits.jsonl"  # older records of a partition (and the dataset's)
SPARK_COMMITS_DIR = "_twice_commits"  # <warehouse>/_twice_commits/<table>/*.json
NO_FINGERPRINT = "none"  # CommitRecord.algorithm when the slice cannot be fingerprinted

# The twice_commits columns, in order, with their logical kinds (SQL engines).
COMMIT_COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("table_name", "string"), ("slice", "string"), ("mode", "string"), ("uow_id", "string"),
    ("fence_key", "string"), ("generation", "integer"), ("attempt", "integer"),
    ("token", "integer"), ("input_version", "string"), ("rows_written", "integer"),
    ("row_count", "integer"), ("checksum", "string"), ("algorithm", "string"),
    ("columns", "string"), ("committed_at", "string"), ("extra", "string"),
)


#: Bits of a unit marker that hold the attempt (the rest hold the generation).
ATTEMPT_BITS = 32


def unit_marker(stamp: WriteStamp) -> int:
    """The integer a table format keeps in its metadata for the unit of work's last stamped
    write (a Delta app transaction version, an Iceberg table property): it outlives the
    history that holds the commit record (expired snapshots, a cleaned-up log)."""
    return (stamp.generation << ATTEMPT_BITS) + stamp.attempt


def marker_generation(marker: int) -> int:
    """The generation a :func:`unit_marker` was written by."""
    return marker >> ATTEMPT_BITS


def marker_parts(marker: int) -> tuple[int, int]:
    """(generation, attempt) of a :func:`unit_marker`."""
    return marker >> ATTEMPT_BITS, marker & ((1 << ATTEMPT_BITS) - 1)


@dataclass(frozen=True)
class Appended:
    """A stamped append of this unit and generation found already committed. ``record`` is
    None when the table's history no longer holds it but the unit's marker says it is in."""

    record: CommitRecord | None


@dataclass(frozen=True)
class WriteStamp:
    """The identity an owned write commits with its rows (see the module docstring)."""

    uow_id: str
    fence_key: str  # "pipeline/task/interval-label": the slot, whatever the versions
    generation: int
    attempt: int
    token: int  # the lease's fencing token (ledger-wide sequence)
    input_version: str = ""
    #: When the attempt began, ISO-8601 by the ledger's clock: what a reconciler finds of an
    #: earlier attempt of the same number (another ledger, say) is not this attempt's.
    began_at: str = ""
    #: The identity of the ledger that handed out ``token`` (``Ledger.identity``): a
    #: destination belongs to one ledger (:func:`check_ledger`). Empty: a stamp made outside
    #: a ledger, which claims nothing and is not checked.
    ledger: str = ""
    #: That ledger's URL or path, password masked: named in a refusal, never compared.
    ledger_at: str = ""
    #: The run accepted schema changes (``--accept-schema-change``): a SQL destination's
    #: write under this stamp may add the output's new nullable columns to its table
    #: (``ALTER TABLE ... ADD COLUMN`` in the write's transaction); without it they are refused.
    add_columns: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The mode of a record that writes no rows and only makes its token the slice's newest: a
#: takeover's seal (``Destination.seal``), so an earlier holder, perhaps only paused, can no
#: longer commit. Its ``attempt`` is 0: it is no attempt's write.
FENCE_MODE = "fence"

#: The mode of a record that writes no rows and makes the destination belong to the record's
#: ledger (``twice adopt``): its token is above every token present, its ``fence_key`` empty.
ADOPT_MODE = "adopt"

#: ``CommitRecord.extra`` keys of the writing ledger's identity and masked location. In
#: ``extra`` because every engine already stores it (no column to add to existing
#: ``twice_commits`` tables, Delta logs or Iceberg summaries); read them with
#: :attr:`CommitRecord.ledger` and :attr:`CommitRecord.ledger_at`.
LEDGER_KEY = "twice_ledger"
LEDGER_AT_KEY = "twice_ledger_at"


@dataclass(frozen=True)
class CommitRecord:
    """One owned write as the destination committed it (rows and this record together)."""

    table: str  # the destination's qualified table (or the dataset directory for Parquet)
    slice: str  # the slice label written ("all rows" when unpartitioned)
    mode: str  # replace | upsert | append | fence (a seal, no rows) | adopt (no rows)
    uow_id: str
    fence_key: str
    generation: int
    attempt: int
    token: int
    input_version: str
    rows_written: int
    row_count: int  # the slice's fingerprint right after the write, inside the transaction
    checksum: str
    algorithm: str
    columns: tuple[str, ...] = ()
    committed_at: str = ""  # ISO-8601 UTC, the destination's clock
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field (``columns`` as a list, ``extra`` a deep copy), as ``asdict`` gives
        them but built directly: ``asdict`` copied each value through ``deepcopy`` (every
        owned write's attempt records this)."""
        return {"table": self.table, "slice": self.slice, "mode": self.mode,
                "uow_id": self.uow_id, "fence_key": self.fence_key,
                "generation": self.generation, "attempt": self.attempt, "token": self.token,
                "input_version": self.input_version, "rows_written": self.rows_written,
                "row_count": self.row_count, "checksum": self.checksum,
                "algorithm": self.algorithm, "columns": list(self.columns),
                "committed_at": self.committed_at, "extra": copy.deepcopy(self.extra)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommitRecord:
        return cls(
            table=str(data["table"]), slice=str(data["slice"]), mode=str(data["mode"]),
            uow_id=str(data["uow_id"]), fence_key=str(data["fence_key"]),
            generation=int(data["generation"]), attempt=int(data["attempt"]),
            token=int(data["token"]), input_version=str(data.get("input_version", "")),
            rows_written=int(data["rows_written"]), row_count=int(data["row_count"]),
            checksum=str(data["checksum"]), algorithm=str(data["algorithm"]),
            columns=tuple(data.get("columns") or ()),
            committed_at=str(data.get("committed_at", "")),
            extra=dict(data.get("extra") or {}),
        )

    @property
    def ledger(self) -> str:
        """The identity of the ledger that wrote this record ("" before ledgers had one)."""
        return str(self.extra.get(LEDGER_KEY) or "")

    @property
    def ledger_at(self) -> str:
        """Where that ledger was, password masked ("" when not recorded)."""
        return str(self.extra.get(LEDGER_AT_KEY) or "")

    def matches(self, stamp: WriteStamp) -> bool:
        """Whether this record was written under ``stamp`` (same unit, generation, attempt)."""
        return (self.uow_id, self.generation, self.attempt) == (
            stamp.uow_id, stamp.generation, stamp.attempt
        )

    @classmethod
    def create(
        cls, stamp: WriteStamp, *, table: str, slice: str, mode: str, rows_written: int,
        row_count: int, checksum: str, algorithm: str, columns: Sequence[str] = (),
        committed_at: str = "", extra: dict[str, Any] | None = None,
    ) -> CommitRecord:
        """The record of a write made under ``stamp`` (``committed_at`` defaults to now, UTC);
        the stamp's ledger goes into ``extra`` (:data:`LEDGER_KEY`)."""
        extra = dict(extra or {})
        if stamp.ledger:
            extra[LEDGER_KEY] = stamp.ledger
            extra[LEDGER_AT_KEY] = stamp.ledger_at
        return cls(
            table=table, slice=slice, mode=mode, uow_id=stamp.uow_id,
            fence_key=stamp.fence_key, generation=stamp.generation, attempt=stamp.attempt,
            token=stamp.token, input_version=stamp.input_version, rows_written=rows_written,
            row_count=row_count, checksum=checksum, algorithm=algorithm,
            columns=tuple(columns), committed_at=committed_at or utc_now_text(),
            extra=extra,
        )

    @classmethod
    def fence(cls, stamp: WriteStamp, *, table: str, committed_at: str = "") -> CommitRecord:
        """The record of a seal (``FENCE_MODE``): no rows, only ``stamp.token`` as the slice's
        newest (``Destination.seal``)."""
        return cls.create(stamp, table=table, slice="", mode=FENCE_MODE, rows_written=0,
                          row_count=0, checksum="", algorithm="none", committed_at=committed_at)

    @classmethod
    def adoption(cls, stamp: WriteStamp, *, table: str, note: str, operator: str,
                 committed_at: str = "") -> CommitRecord:
        """The record of ``twice adopt`` (``ADOPT_MODE``): no rows; from now on the destination
        belongs to ``stamp.ledger`` (:func:`ledger_owner`)."""
        return cls.create(stamp, table=table, slice="", mode=ADOPT_MODE, rows_written=0,
                          row_count=0, checksum="", algorithm="none", committed_at=committed_at,
                          extra={"note": note, "operator": operator})

    def to_row(self) -> tuple[Any, ...]:
        """The values of one ``twice_commits`` row, in :data:`COMMIT_COLUMNS` order."""
        return (
            self.table, self.slice, self.mode, self.uow_id, self.fence_key, self.generation,
            self.attempt, self.token, self.input_version, self.rows_written, self.row_count,
            self.checksum, self.algorithm, json.dumps(list(self.columns)), self.committed_at,
            json.dumps(self.extra, sort_keys=True),
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> CommitRecord:
        """Inverse of :meth:`to_row` (a row read back from ``twice_commits``)."""
        data = dict(zip((name for name, _ in COMMIT_COLUMNS), row, strict=True))
        data["table"] = data.pop("table_name")
        data["columns"] = json.loads(data["columns"] or "[]")
        data["extra"] = json.loads(data["extra"] or "{}")
        return cls.from_dict(data)

    @property
    def sort_key(self) -> tuple[int, str]:
        """The order :meth:`commit_records` returns records in."""
        return (self.token, self.committed_at)


class FencedWriteError(DestinationError, ConflictError):
    """A write carried an older fencing token than one already committed for its slot.

    Nothing was written: a newer lease holder (a takeover, or a newer run of the same slot)
    has committed this slice, so this writer's result is stale by definition.
    """

    def __init__(self, stamp: WriteStamp, newer: int, where: str,
                 reissued: Holder | None = None) -> None:
        self.stamp = stamp
        self.newer_token = newer
        self.reissued = reissued
        if reissued is not None:
            super().__init__(
                f"{where}: write refused: fencing token {stamp.token} of {stamp.uow_id} "
                f"(attempt {stamp.attempt}) was already committed for {stamp.fence_key} by "
                f"another attempt ({reissued[0]}, generation {reissued[1]}, attempt "
                f"{reissued[2]}): the ledger handed this token out a second time, so it is "
                "not the ledger that wrote this slice last (a copy restored from before that "
                "write, or another ledger); nothing was written. Use the ledger that wrote "
                "it (keep one ledger per destination)"
            )
            return
        super().__init__(
            f"{where}: write refused: fencing token {stamp.token} of {stamp.uow_id} (attempt "
            f"{stamp.attempt}) is older than token {newer} already committed for "
            f"{stamp.fence_key}; a newer lease holder wrote this slice, nothing was written "
            "(tokens come from one ledger's sequence: a destination written under another "
            "ledger refuses this one's writes, so keep one ledger per destination)"
        )


class ForeignLedgerError(FencedWriteError):
    """A write stamped by one ledger reached a destination that belongs to another.

    Nothing was written. Tokens of two ledgers are not comparable, so this is refused whatever
    the tokens say; ``twice adopt`` makes the destination belong to another ledger.
    """

    def __init__(self, stamp: WriteStamp, owner: CommitRecord, where: str) -> None:
        self.owner = owner.ledger
        DestinationError.__init__(
            self,
            f"{where}: write refused: this destination belongs to ledger {owner.ledger}"
            f"{_at(owner.ledger_at)} ({_claim(owner)}), and {stamp.uow_id} (attempt "
            f"{stamp.attempt}) was stamped by ledger {stamp.ledger}{_at(stamp.ledger_at)}; "
            "nothing was written. Run it with the ledger that owns the destination (a typo'd "
            "--ledger?), or, if this ledger is to own it from now on (a ledger restored from a "
            "backup, a move), adopt it: twice adopt DESTINATION --ledger URL --note TEXT"
        )
        self.stamp = stamp
        self.newer_token = owner.token
        self.reissued = None


def _at(location: str) -> str:
    return f" at {location}" if location else ""


def _claim(owner: CommitRecord) -> str:
    if owner.mode == ADOPT_MODE:
        return f"adopted {owner.committed_at}"
    return f"first written {owner.committed_at} by {owner.uow_id}"


def ledger_owner(records: Iterable[CommitRecord]) -> CommitRecord | None:
    """The record that makes a destination belong to its ledger: the newest adoption, else
    the first write that names a ledger. Records from before ledgers had an identity name
    none and claim nothing (the next identified write claims the destination). None: the
    destination belongs to no ledger yet."""
    identified = [r for r in records if r.ledger]
    adoptions = [r for r in identified if r.mode == ADOPT_MODE]
    if adoptions:
        return max(adoptions, key=lambda r: r.sort_key)
    if identified:
        return min(identified, key=lambda r: (r.committed_at, r.token))
    return None


def check_ledger(stamp: WriteStamp, owner: CommitRecord | None, where: str) -> None:
    """THE ownership rule, called by every engine inside the write transaction next to its
    fencing check: raise :class:`ForeignLedgerError` if the destination belongs
    (:func:`ledger_owner`: ``owner``) to a ledger other than the stamp's. A stamp naming no
    ledger, or a destination nobody owns yet, passes (the write then claims it)."""
    if owner is None or not stamp.ledger or owner.ledger == stamp.ledger:
        return
    raise ForeignLedgerError(stamp, owner, where)


def check_ledger_records(stamp: WriteStamp, records: Iterable[CommitRecord], where: str) -> None:
    """:func:`check_ledger` against ``records``: every record of the destination, all its
    slices (the file-based destinations keep their records as files, not in a table)."""
    if stamp.ledger:
        check_ledger(stamp, ledger_owner(records), where)


def check_adoption(stamp: WriteStamp, newest: int | None, where: str) -> None:
    """Refuse (:class:`FencedWriteError`) an adoption whose token is not above ``newest``, the
    highest token of any slice of the destination: a write landed since the token was
    chosen, so adopting again picks a higher one."""
    if newest is not None and newest >= stamp.token:
        raise FencedWriteError(stamp, newest, where)


def newest_token(records: Iterable[CommitRecord], fence_key: str) -> int | None:
    """The highest token committed for ``fence_key`` among ``records`` (None if none)."""
    tokens = [r.token for r in records if r.fence_key == fence_key]
    return max(tokens) if tokens else None


#: Who committed under a token: (unit of work id, job generation, attempt).
Holder: TypeAlias = tuple[str, int, int]


def holder_of(stamp: WriteStamp | CommitRecord) -> Holder:
    return (stamp.uow_id, stamp.generation, stamp.attempt)


def check_fence(stamp: WriteStamp, newest: int | None, where: str,
                holders: Callable[[int], Iterable[Holder]] | None = None) -> None:
    """Raise :class:`FencedWriteError` if ``newest`` (the highest committed token for the
    stamp's fence key) is greater than the stamp's. An equal token is the same lease, which a
    ledger hands one attempt (or one seal) only: so a record under the stamp's token by
    another unit, generation or attempt (``holders(token)``: who committed under ``token``,
    asked only when ``newest`` equals the stamp's) means the token was handed out twice, by a
    ledger restored from a copy older than that write or by another ledger, and the write is
    refused too (it would repeat what that attempt did, an append twice)."""
    if newest is None:
        return
    if int(newest) > stamp.token:
        raise FencedWriteError(stamp, int(newest), where)
    if int(newest) == stamp.token and holders is not None:
        for holder in holders(stamp.token):
            if holder != holder_of(stamp):
                raise FencedWriteError(stamp, int(newest), where, reissued=holder)


def check_fence_records(stamp: WriteStamp, records: Iterable[CommitRecord], where: str) -> None:
    """:func:`check_fence` against the newest of ``records`` for the stamp's fence key (the
    file-based destinations keep their records as files, not in a table)."""
    mine = [record for record in records if record.fence_key == stamp.fence_key]
    check_fence(stamp, newest_token(mine, stamp.fence_key), where,
                lambda token: [holder_of(r) for r in mine if r.token == token])


def utc_now_text() -> str:
    """Now as ISO-8601 UTC text with microseconds (``2026-12-04T10:00:00.000000Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Active(enum.Enum):
    STAMP = "the active stamp"

    def __repr__(self) -> str:
        return "ACTIVE"


ACTIVE: Final = _Active.STAMP
"""Default of every write method's ``stamp=``: use :func:`active_stamp` at call time."""

StampArg: TypeAlias = WriteStamp | _Active | None


def resolve_stamp(stamp: StampArg) -> WriteStamp | None:
    """A write method's ``stamp=`` argument as the stamp to write under (None: unstamped)."""
    if stamp is ACTIVE:
        return active_stamp()
    if stamp is None or isinstance(stamp, WriteStamp):
        return stamp
    raise TypeError(f"stamp must be a WriteStamp or None, got {type(stamp).__name__}")


_ACTIVE: contextvars.ContextVar[WriteStamp | None] = contextvars.ContextVar(
    "twice_write_stamp", default=None
)


def active_stamp() -> WriteStamp | None:
    """The stamp of the attempt running in this context, if any (read by the writers)."""
    return _ACTIVE.get()


@contextmanager
def stamped(stamp: WriteStamp | None) -> Iterator[None]:
    """Make ``stamp`` the active one for writes made in this context (and restore after)."""
    token = _ACTIVE.set(stamp)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
