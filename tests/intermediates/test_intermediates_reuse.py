"""materialize_or_reuse on real SQLite and DuckDB stores: reuse, new versions, tampering."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twice.destinations import open_destination
from twice.destinations.fingerprint import fingerprint
from twice.engine.intermediates import (
    Computed,
    IntermediateError,
    intermediate_version,
    materialize_or_reuse,
)
from twice.ledger import Ledger

from .conftest import INTERVAL, Counter, Store, make_unit, rows

WEEK = timedelta(days=7)


def _run(ledger: Ledger, store: Store, compute: Counter, **kwargs: object):  # type: ignore[no-untyped-def]
    unit = kwargs.pop("unit", make_unit())
    return materialize_or_reuse(
        ledger, "enriched", unit, compute=compute, store=store.spec, owner="team-funds",
        retention=WEEK, **kwargs,  # type: ignore[arg-type]
    )


def _current_fingerprint(store: Store):  # type: ignore[no-untyped-def]
    dest = open_destination(store.spec)
    try:
        return fingerprint(dest, INTERVAL, ["day", "id", "v"])  # every column
    finally:
        dest.close()


def test_version_is_a_hash_of_the_unit_identity() -> None:
    base = intermediate_version(make_unit())
    assert base == intermediate_version(make_unit())
    assert len({base, intermediate_version(make_unit(transform="t2")),
                intermediate_version(make_unit(input_version="v2"))}) == 3


def test_same_version_is_reused_with_fingerprint_evidence(ledger: Ledger, store: Store) -> None:
    compute = Counter()
    first = _run(ledger, store, compute)
    second = _run(ledger, store, compute)
    third = _run(ledger, store, compute)
    assert (first.action, second.action, third.action) == ("materialized", "reused", "reused")
    assert compute.calls == 1
    entry = ledger.intermediate("enriched", first.entry.version)
    assert entry is not None and entry.reuse_count == 2 and entry.owner == "team-funds"
    # the recorded fingerprint is what the store actually holds, computed independently here
    stored = _current_fingerprint(store)
    assert (entry.row_count, entry.checksum) == (stored.row_count, stored.checksum)
    assert store.count() == len(rows())
    reuses = [e for e in ledger.intermediate_events("enriched") if e.action == "reused"]
    assert len(reuses) == 2
    for event in reuses:
        assert event.detail["current"]["checksum"] == stored.checksum
        assert event.detail["recorded"]["checksum"] == entry.checksum
        assert event.detail["verify_seconds"] >= 0


def test_new_transform_version_recomputes_and_supersedes(ledger: Ledger, store: Store) -> None:
    compute_v1, compute_v2 = Counter(), Counter(lambda: rows(40, "y"))
    old = _run(ledger, store, compute_v1)
    new = _run(ledger, store, compute_v2, unit=make_unit(transform="t2"))
    assert new.action == "materialized" and compute_v2.calls == 1
    assert new.entry.version != old.entry.version
    assert "transform_version 't1' -> 't2'" in new.reason
    superseded = ledger.intermediate("enriched", old.entry.version)
    assert superseded is not None and superseded.status == "superseded"
    assert store.count() == 40
    # going back to t1 cannot reuse the superseded copy: its slice holds t2's rows now
    back = _run(ledger, store, compute_v1)
    assert back.action == "recomputed" and compute_v1.calls == 2
    assert "superseded" in back.reason
    assert store.count() == len(rows())
    assert ledger.intermediate("enriched", new.entry.version).status == "superseded"  # type: ignore[union-attr]


TAMPERING = {
    "update": "UPDATE enriched SET v = 'changed' WHERE id = 7",
    "delete": "DELETE FROM enriched WHERE id = 3",
    "insert": "INSERT INTO enriched (day, id, v) VALUES ('2026-11-05', 999, 'extra')",
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_tampered_copy_is_refused_and_recomputed(ledger: Ledger, store: Store, how: str) -> None:
    compute = Counter()
    first = _run(ledger, store, compute)
    original = _current_fingerprint(store)
    store.sql(TAMPERING[how])
    tampered = _current_fingerprint(store)
    assert tampered != original
    outcome = _run(ledger, store, compute)
    assert outcome.action == "recomputed" and not outcome.reused
    assert compute.calls == 2
    assert outcome.refusal is not None and "fingerprint mismatch" in outcome.refusal
    refusals = [e for e in ledger.intermediate_events("enriched") if e.action == "refused"]
    assert len(refusals) == 1
    assert refusals[0].detail["recorded"]["checksum"] == original.checksum
    assert refusals[0].detail["current"]["checksum"] == tampered.checksum
    assert refusals[0].detail["current"]["row_count"] == tampered.row_count
    # the recompute restored the data; the entry was never counted as reused
    assert _current_fingerprint(store) == original
    entry = ledger.intermediate("enriched", first.entry.version)
    assert entry is not None and entry.reuse_count == 0 and entry.materializations == 2
    assert _run(ledger, store, compute).action == "reused"


def test_dropped_table_is_refused_not_reused(ledger: Ledger, store: Store) -> None:
    compute = Counter()
    _run(ledger, store, compute)
    store.sql("DROP TABLE enriched")
    outcome = _run(ledger, store, compute)
    assert outcome.action == "recomputed" and compute.calls == 2
    assert outcome.refusal is not None and "cannot be verified" in outcome.refusal
    assert store.count() == len(rows())


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(victim=st.integers(0, 49), change=st.sampled_from(["value", "delete", "duplicate_id"]))
def test_any_modification_is_never_silently_reused(
    ledger: Ledger, store: Store, victim: int, change: str
) -> None:
    """Invariant: after any change to the stored rows, the next call does not reuse them."""
    compute = Counter()
    _run(ledger, store, compute)  # materialized, or reused/recomputed from an earlier example
    _run(ledger, store, compute)  # now certainly intact -> reused
    before = compute.calls
    if change == "value":
        store.sql(f"UPDATE enriched SET v = v || '!' WHERE id = {victim}")
    elif change == "delete":
        store.sql(f"DELETE FROM enriched WHERE id = {victim}")
    else:
        store.sql(f"UPDATE enriched SET id = {(victim + 1) % 50 + 1000} WHERE id = {victim}")
    outcome = _run(ledger, store, compute)
    assert not outcome.reused
    assert compute.calls == before + 1


def test_store_elsewhere_is_refused(ledger: Ledger, store: Store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    compute = Counter()
    _run(ledger, store, compute)
    other = Store(store.engine, store.spec.replace("work.", "other."),
                  tmp_path / f"other.{store.engine}")
    outcome = _run(ledger, other, compute)
    assert outcome.action == "recomputed" and outcome.refusal is not None
    assert "stored at" in outcome.refusal and other.count() == len(rows())


def test_bytes_scanned_reported_by_compute_is_recorded(ledger: Ledger, store: Store) -> None:
    outcome = _run(ledger, store, Counter(lambda: Computed(rows(), bytes_scanned=5_000_000)))
    assert outcome.entry.bytes_scanned == 5_000_000
    assert "5.0 MB scanned" in outcome.tradeoff.line()


@pytest.mark.parametrize(("field", "kwargs"), [
    ("owner", {"owner": ""}),
    ("retention", {"retention": timedelta(0)}),
    ("name", {"name": " "}),
])
def test_bad_arguments_name_the_field(ledger: Ledger, store: Store, field: str,
                                      kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"owner": "team", "retention": WEEK, "name": "enriched"}
    args.update(kwargs)
    with pytest.raises(IntermediateError, match=field):
        materialize_or_reuse(ledger, args.pop("name"), make_unit(), compute=Counter(),  # type: ignore[arg-type]
                             store=store.spec, **args)  # type: ignore[arg-type]
