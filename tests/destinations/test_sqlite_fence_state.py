"""The ledger owner a stamped write reads is the rule's, on every SQL engine; and SQLite's own
statement for a stamped write's fencing read gives what the shared one gives:
the slot's newest token and the table's ledger owner (the newest adoption, else the first
record naming a ledger), over any mix of records (issue 38: the shared statement, a union
ranked in temporary B-trees, was a stamped write's slowest read after its COMMIT).

Both are checked against :func:`twice.destinations.commits.ledger_owner` over every record,
the rule itself, so neither statement is its own reference.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date
from pathlib import Path

import pytest
from dest_helpers import day_interval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twice.destinations import commits, open_destination
from twice.destinations.base import COMMIT_COLUMNS, SqlDestination
from twice.destinations.commits import (
    ADOPT_MODE,
    LEDGER_KEY,
    CommitRecord,
    ForeignLedgerError,
    WriteStamp,
)

RECORD = st.fixed_dictionaries({
    "table_name": st.sampled_from(["t", "other"]),
    "mode": st.sampled_from(["replace", "append", ADOPT_MODE]),
    "fence_key": st.sampled_from(["p/t/a", "p/t/b"]),
    "token": st.integers(1, 12),
    "committed_at": st.sampled_from([f"2026-01-0{d}T00:00:00+00:00" for d in range(1, 6)]),
    # a ledger named, an empty one (a record from before ledgers had an identity), or none
    "ledger": st.sampled_from(["L1", "L2", "", None]),
})


def row(spec: dict[str, object]) -> tuple[object, ...]:
    extra = {} if spec["ledger"] is None else {LEDGER_KEY: spec["ledger"], "rows_deleted": 0}
    values = {
        "table_name": spec["table_name"], "slice": "s", "mode": spec["mode"], "uow_id": "u",
        "fence_key": spec["fence_key"], "generation": 1, "attempt": 1, "token": spec["token"],
        "input_version": "v", "rows_written": 1, "row_count": 1, "checksum": "c",
        "algorithm": "twice-fp-v3", "columns": "[]", "committed_at": spec["committed_at"],
        "extra": json.dumps(extra, sort_keys=True),
    }
    return tuple(values[name] for name, _ in COMMIT_COLUMNS)


def order(owner: CommitRecord | None) -> tuple[object, ...] | None:
    return None if owner is None else (owner.mode, owner.token, owner.committed_at, owner.ledger)


def owners(records: list[CommitRecord]) -> set[tuple[object, ...] | None]:
    """Every record the rule may pick: the rule's own pick and those tied with it on what it
    orders by (two ledgers' adoptions of one token at one instant: either)."""
    picked = commits.ledger_owner(records)
    if picked is None:
        return {None}
    if picked.mode == ADOPT_MODE:
        return {order(r) for r in records if r.ledger and r.mode == ADOPT_MODE
                and r.sort_key == picked.sort_key}
    return {order(r) for r in records if r.ledger
            and (r.committed_at, r.token) == (picked.committed_at, picked.token)}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(RECORD, max_size=12))
def test_sqlites_fencing_read_is_the_shared_one(tmp_path: Path,
                                                records: list[dict[str, object]]) -> None:
    path = tmp_path / "w.db"
    path.unlink(missing_ok=True)
    stamp = WriteStamp(uow_id="u", fence_key="p/t/a", generation=1, attempt=1, token=99,
                       ledger="L1", ledger_at="sqlite:///l")
    with open_destination(f"sqlite:///{path}?partition_column=day#t") as dest:
        with dest._transaction() as tx:  # type: ignore[attr-defined]
            dest._create_commits_table(tx)  # type: ignore[attr-defined]
            marks = ", ".join("?" for _ in COMMIT_COLUMNS)
            tx.executemany(f"INSERT INTO twice_commits VALUES ({marks})",
                           [row(spec) for spec in records])
            mine = dest._fence_state(stamp)  # type: ignore[attr-defined]
            shared = SqlDestination._fence_state(dest, stamp)  # type: ignore[arg-type]
    ours = [CommitRecord.from_row(row(spec)) for spec in records if spec["table_name"] == "t"]
    newest = max((r.token for r in ours if r.fence_key == stamp.fence_key), default=None)
    allowed = owners(ours)
    assert mine[0] == shared[0] == newest
    assert order(mine[1]) in allowed
    assert order(shared[1]) in allowed


def _stamp(ledger: str, token: int) -> WriteStamp:
    return WriteStamp(uow_id=f"u{token}", fence_key="p/t/2026-01-01", generation=1, attempt=1,
                      token=token, ledger=ledger, ledger_at="" if not ledger else "sqlite:///l")


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", pytest.param(
    "postgresql", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("claims_nothing", ["no ledger key", "an empty ledger"])
def test_a_record_naming_no_ledger_does_not_free_a_claimed_table(
        tmp_path: Path, request: pytest.FixtureRequest, engine: str,
        claims_nothing: str) -> None:
    """A table claimed by ledger L1 then holding a record that names no ledger (an adoption
    written before ledgers had an identity, or an empty ledger key) still belongs to L1: the
    owner read took that record for the owner, which names none, and let ledger L2 write
    (the read every SQL engine shares)."""
    if engine == "postgresql":
        spec = f"{request.getfixturevalue('postgres_url')}?partition_column=day#t"
    else:
        suffix = "db" if engine == "sqlite" else "duckdb"
        spec = f"{engine}:///{tmp_path / f'w.{suffix}'}?partition_column=day#t"
    rows = [{"day": date(2026, 1, 1), "x": 1}]
    with open_destination(spec) as dest:
        dest.replace_partition(rows, day_interval(date(2026, 1, 1)), stamp=_stamp("L1", 1))
        stray = CommitRecord.adoption(_stamp("", 2), table="t", note="old", operator="op")
        if claims_nothing == "an empty ledger":
            stray = dataclasses.replace(stray, extra={**stray.extra, LEDGER_KEY: ""})
        with dest._transaction() as tx:  # type: ignore[attr-defined]
            dest._insert_record(tx, stray)  # type: ignore[attr-defined]
        with pytest.raises(ForeignLedgerError):
            dest.replace_partition(rows, day_interval(date(2026, 1, 1)), stamp=_stamp("L2", 3))
