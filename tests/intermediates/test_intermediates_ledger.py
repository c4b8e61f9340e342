"""Ledger schema version 2: migrating a version-1 ledger keeps its data; PostgreSQL flow."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect

from twice.engine.intermediates import materialize_or_reuse
from twice.ledger import Ledger, migrations
from twice.ledger.engine import create_ledger_engine, resolve_url

from .conftest import Counter, HandClock, Store, make_unit

V2_TABLES = {"twice_intermediates", "twice_intermediate_events"}


def _tables(url: str) -> set[str]:
    engine = create_ledger_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def _snapshot(ledger: Ledger, uow_id: str) -> tuple[object, ...]:
    unit = make_unit()
    return (
        ledger.unit(uow_id),
        ledger.attempts(uow_id),
        ledger.fingerprints(unit.destination, "2026-11-05"),
        [(e.kind, e.summary) for e in ledger.timeline(uow_id)],
    )


def _migrate_version_1_ledger(url: str, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = HandClock()
    unit = make_unit()
    with monkeypatch.context() as pinned:  # this twice, as it was before schema version 2
        pinned.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:1])
        pinned.setattr(migrations, "LATEST_VERSION", 1)
        with Ledger.open(url, clock=clock) as old:
            old.record_unit(unit)
            old.begin_attempt(unit.uow_id, holder="worker-1")
            old.finish_attempt(unit.uow_id, 1, "succeeded")
            old.record_fingerprint(unit.destination, "2026-11-05", 50, "ab" * 8,
                                   uow_id=unit.uow_id, attempt=1, columns=["id"],
                                   algorithm="twice-fp-v1")
            assert old.schema_version == 1
            before = _snapshot(old, unit.uow_id)
    assert not V2_TABLES & _tables(url)
    with Ledger.open(url, clock=clock) as new:
        assert new.schema_version == migrations.LATEST_VERSION
        assert _snapshot(new, unit.uow_id) == before
        outcome = materialize_or_reuse(new, "enriched", unit, compute=Counter(),
                                       store=store.spec, owner="team", retention=timedelta(1))
        assert outcome.action == "materialized"
        assert materialize_or_reuse(new, "enriched", unit, compute=Counter(), store=store.spec,
                                    owner="team", retention=timedelta(1)).reused
        assert new.unit(unit.uow_id) == before[0]  # the existing unit is the producer
    assert V2_TABLES <= _tables(url)
    with Ledger.open(url) as reopened:  # reopening does not migrate again
        assert reopened.schema_version == migrations.LATEST_VERSION
        assert len(reopened.intermediate_events("enriched")) == 2


@pytest.fixture
def duck_store(tmp_path: Path) -> Store:
    path = tmp_path / "work.duckdb"
    return Store("duckdb", f"duckdb:///{path}?partition_column=day#enriched", path)


def test_sqlite_version_1_ledger_migrates_to_2_without_loss(
    tmp_path: Path, duck_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _migrate_version_1_ledger(f"sqlite:///{tmp_path / 'old.db'}", duck_store, monkeypatch)


@pytest.mark.postgres
def test_postgres_version_1_ledger_migrates_to_2_without_loss(
    postgres_url: str, duck_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _migrate_version_1_ledger(postgres_url, duck_store, monkeypatch)


@pytest.mark.postgres
def test_postgres_ledger_reuse_tamper_and_expiry(postgres_url: str, duck_store: Store) -> None:
    from twice.engine.intermediates import expire

    clock = HandClock()
    compute = Counter()
    with Ledger.open(postgres_url, clock=clock) as ledger:
        def run():  # type: ignore[no-untyped-def]
            return materialize_or_reuse(ledger, "enriched", make_unit(), compute=compute,
                                        store=duck_store.spec, owner="team",
                                        retention=timedelta(hours=1))
        assert run().action == "materialized"
        assert run().reused
        duck_store.sql("UPDATE enriched SET v = 'tampered' WHERE id = 1")
        refused = run()
        assert refused.action == "recomputed" and refused.refusal is not None
        assert compute.calls == 2
        clock.advance(hours=2)
        assert [e.rows_deleted for e in expire(ledger)] == [50]
        assert duck_store.count() == 0
        actions = [e.action for e in ledger.intermediate_events("enriched")]
        assert actions == ["materialized", "reused", "refused", "recomputed", "expired"]
        assert ledger.intermediates(status="expired")[0].reuse_count == 1

