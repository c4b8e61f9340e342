"""Fingerprints: versioned row count + checksum of each destination partition.

Versions of one partition are numbered under a lock on it, so concurrent writers never take
the same version; the differences between versions are derived (``FingerprintDiff``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Select, func, select

from twice.ledger import attempts as attempt_rows
from twice.ledger import units
from twice.ledger.checks import count, text
from twice.ledger.engine import lock_key_ahead
from twice.ledger.errors import LedgerError
from twice.ledger.journal import append_entry
from twice.ledger.prepared import rows_where, run_ahead
from twice.ledger.records import FingerprintDiff, FingerprintRecord
from twice.ledger.rows import FINGERPRINT, encode_names, first
from twice.ledger.schema import fingerprints
from twice.ledger.session import Session


class FingerprintStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self, destination: str, partition: str, row_count: int, checksum: int | str, *,
        uow_id: str | None, attempt: int | None, columns: Sequence[str] | None,
        algorithm: str | None, schema: str | None,
        after: Callable[[FingerprintRecord | None], None] | None = None,
    ) -> FingerprintRecord:
        destination = text(destination, "destination")
        partition = text(partition, "partition", allow_empty=True)
        row_count = count(row_count, "row_count", minimum=0)
        if isinstance(checksum, bool) or not isinstance(checksum, int | str) or checksum == "":
            raise LedgerError(f"checksum must be an integer or non-empty text, got {checksum!r}")
        checksum_text = str(checksum)
        if attempt is not None and uow_id is None:
            raise LedgerError("a fingerprint's attempt needs its uow_id")
        if schema is not None:
            schema = text(schema, "schema", allow_empty=True)
        if algorithm is not None:
            algorithm = text(algorithm, "algorithm")
        column_names: tuple[str, ...] | None = None
        if columns is not None:
            if isinstance(columns, str):
                raise LedgerError("columns must be a sequence of column names, not one string")
            column_names = tuple(text(name, "column name") for name in columns)
        if attempt is not None:
            attempt = count(attempt, "attempt", minimum=1)
        with self._session.write() as conn:
            now = self._session.now()
            # the partition's lock, then its unit and attempt (its finish locks both next: read
            # once) and the partition's latest version, read once the lock is held: one round
            # trip on PostgreSQL (prepared.run_ahead)
            latest: list[FingerprintRecord | None] = []
            run_ahead(conn, [
                lock_key_ahead(conn, "fingerprint", f"{destination}\x1f{partition}"),
                None if uow_id is None else units.find_ahead(conn, uow_id, lock=True),
                None if uow_id is None or attempt is None
                else attempt_rows.locked_ahead(conn, uow_id, attempt),
                (_LATEST, {"destination": destination, "partition": partition},
                 lambda ran: latest.append(None if (row := ran.first()) is None
                                           else FINGERPRINT(row))),
            ])
            if uow_id is not None:  # what was just read: raises if the unit or attempt is not
                units.require(conn, uow_id, lock=True)
                if attempt is not None:
                    attempt_rows.locked(conn, uow_id, attempt)
            previous = latest[0]
            if after is not None:
                after(previous)
            version = 1 if previous is None else previous.version + 1
            row = append_entry(
                conn, fingerprints,
                {"destination": destination, "partition": partition, "version": version,
                 "row_count": row_count, "checksum": checksum_text, "uow_id": uow_id,
                 "attempt": attempt, "columns": encode_names(column_names),
                 "algorithm": algorithm, "schema_signature": schema, "recorded_at": now},
                kind="fingerprint",
                summary=(
                    f"fingerprint {destination}/{partition} v{version}: {row_count} rows, "
                    f"checksum {checksum_text}"
                ),
                data={"destination": destination, "partition": partition, "version": version},
            )
        return FINGERPRINT(row)

    def versions(self, destination: str, partition: str) -> list[FingerprintRecord]:
        return self._all(_of(destination, partition).order_by(fingerprints.c.version))

    def latest(self, destination: str, partition: str) -> FingerprintRecord | None:
        with self._session.read() as conn:
            return first(conn, _LATEST, FINGERPRINT,
                         params={"destination": destination, "partition": partition})

    def latest_of_each(self, destination: str | None) -> list[FingerprintRecord]:
        newest = select(
            fingerprints.c.destination,
            fingerprints.c.partition,
            func.max(fingerprints.c.version).label("version"),
        ).group_by(fingerprints.c.destination, fingerprints.c.partition)
        if destination is not None:
            newest = newest.where(fingerprints.c.destination == destination)
        latest = newest.subquery()
        query = (
            select(fingerprints)
            .join(
                latest,
                (fingerprints.c.destination == latest.c.destination)
                & (fingerprints.c.partition == latest.c.partition)
                & (fingerprints.c.version == latest.c.version),
            )
            .order_by(fingerprints.c.destination, fingerprints.c.partition)
        )
        return self._all(query)

    def diff(
        self, destination: str, partition: str, version: int | None
    ) -> FingerprintDiff | None:
        versions = {record.version: record for record in self.versions(destination, partition)}
        if not versions:
            return None
        wanted = max(versions) if version is None else version
        if wanted not in versions:
            return None
        return FingerprintDiff(before=versions.get(wanted - 1), after=versions[wanted])

    def _all(self, query: Select[tuple[object, ...]]) -> list[FingerprintRecord]:
        with self._session.read() as conn:
            return [FINGERPRINT(row) for row in conn.execute(query).mappings()]


# the statement a unit's finish runs, built once (see twice.ledger.prepared)
_LATEST = rows_where(fingerprints, "destination", "partition", order=("-version",), limit=1)


def _of(destination: str, partition: str) -> Select[tuple[object, ...]]:
    return select(fingerprints).where(
        fingerprints.c.destination == destination, fingerprints.c.partition == partition
    )
