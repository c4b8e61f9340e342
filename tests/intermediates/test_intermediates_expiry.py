"""Retention, garbage collection and the storage-vs-recompute trade-off, from measurements."""

from __future__ import annotations

from datetime import timedelta

import pytest

from twice.engine.intermediates import (
    CostModel,
    expire,
    format_bytes,
    materialize_or_reuse,
    tradeoff,
)
from twice.ledger import Ledger, LedgerError

from .conftest import Counter, HandClock, Store, make_unit, rows

RETENTION = timedelta(days=2)


def _run(ledger: Ledger, store: Store, compute: Counter, cost: CostModel | None = None):  # type: ignore[no-untyped-def]
    return materialize_or_reuse(
        ledger, "enriched", make_unit(), compute=compute, store=store.spec, owner="team-funds",
        retention=RETENTION, cost=cost,
    )


def test_expired_copy_is_recomputed_not_reused(ledger: Ledger, store: Store,
                                               clock: HandClock) -> None:
    compute = Counter()
    first = _run(ledger, store, compute)
    assert first.entry.expires_at == first.entry.created_at + RETENTION
    clock.advance(days=2, seconds=-1)
    assert _run(ledger, store, compute).action == "reused"
    clock.advance(seconds=1)
    late = _run(ledger, store, compute)
    assert late.action == "recomputed" and compute.calls == 2
    assert "retention" in late.reason
    # retention restarts with the new materialization
    assert late.entry.expires_at == clock.current + RETENTION


def test_expire_deletes_only_past_retention_and_records_it(ledger: Ledger, store: Store,
                                                           clock: HandClock) -> None:
    compute = Counter()
    first = _run(ledger, store, compute)
    assert expire(ledger) == []
    assert store.count() == len(rows())
    clock.advance(days=3)
    done = expire(ledger)
    assert [(e.version, e.rows_deleted, e.error) for e in done] == [
        (first.entry.version, len(rows()), None)
    ]
    assert store.count() == 0
    entry = ledger.intermediate("enriched", first.entry.version)
    assert entry is not None and entry.status == "expired"
    events = [e.action for e in ledger.intermediate_events("enriched")]
    assert events == ["materialized", "expired"]
    assert expire(ledger) == []  # nothing left to collect
    again = _run(ledger, store, compute)
    assert again.action == "recomputed" and "expired" in again.reason
    assert store.count() == len(rows())


def test_ledger_refuses_early_expiry_and_late_reuse(ledger: Ledger, store: Store,
                                                    clock: HandClock) -> None:
    first = _run(ledger, store, Counter())
    with pytest.raises(LedgerError, match="is kept until"):
        ledger.expire_intermediate("enriched", first.entry.version, reason="too early")
    clock.advance(days=3)
    with pytest.raises(LedgerError, match="retention ended"):
        ledger.record_intermediate_reuse("enriched", first.entry.version, verify_seconds=0.1,
                                         reason="late")


def test_tradeoff_comes_from_recorded_measurements(ledger: Ledger, store: Store) -> None:
    slow = Counter(sleep=0.3)
    _run(ledger, store, slow)
    outcome = _run(ledger, store, slow)
    assert outcome.reused and slow.calls == 1
    entry = outcome.entry
    assert entry.compute_seconds >= 0.3  # measured around compute(), which slept 0.3 s
    reuse = [e for e in ledger.intermediate_events("enriched") if e.action == "reused"]
    verify = reuse[0].detail["verify_seconds"]
    trade = outcome.tradeoff
    assert trade.saved_seconds_per_reuse == pytest.approx(entry.compute_seconds - verify)
    assert trade.saved_seconds_per_reuse > 0
    assert trade.reuse_count == entry.reuse_count == 1
    assert trade.bytes_stored == entry.bytes_stored > 0
    line = trade.line()
    assert f"stored {format_bytes(entry.bytes_stored)} for 2 days" in line
    assert f"each reuse saved {trade.saved_seconds_per_reuse:.1f} s of compute" in line
    assert "(1 reuse so far)" in line


def test_recommendation_follows_the_cost_parameters(ledger: Ledger, store: Store) -> None:
    _run(ledger, store, Counter(sleep=0.2))
    outcome = _run(ledger, store, Counter())
    entry = outcome.entry
    events = ledger.intermediate_events("enriched")
    compute_price = 3.6  # USD/hour: one second of compute costs 0.001 USD
    saved_usd = outcome.tradeoff.saved_seconds_per_reuse * compute_price / 3600
    gb_months = entry.bytes_stored / 1e9 * RETENTION.total_seconds() / (30 * 86400)
    break_even_price = saved_usd / gb_months  # storage price at which keeping just pays
    keep = tradeoff(entry, events, CostModel(storage_usd_per_gb_month=break_even_price * 0.5,
                                            compute_usd_per_hour=compute_price))
    drop = tradeoff(entry, events, CostModel(storage_usd_per_gb_month=break_even_price * 2,
                                            compute_usd_per_hour=compute_price))
    assert (keep.recommendation, drop.recommendation) == ("keep", "drop")
    assert keep.break_even_reuses == pytest.approx(0.5)
    assert drop.break_even_reuses == pytest.approx(2.0)
    # expecting more reuses than have happened can make keeping worth it
    hopeful = tradeoff(entry, events, CostModel(storage_usd_per_gb_month=break_even_price * 2,
                                               compute_usd_per_hour=compute_price,
                                               expected_reuses=3))
    assert hopeful.recommendation == "keep"


def test_cost_model_refuses_bad_prices() -> None:
    with pytest.raises(ValueError, match="compute_usd_per_hour"):
        CostModel(compute_usd_per_hour=float("nan"))
    with pytest.raises(ValueError, match="expected_reuses"):
        CostModel(expected_reuses=-1)
