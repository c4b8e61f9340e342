"""Aggregates recomputed from the replaced slice survive reruns; delta updates double count."""

from __future__ import annotations

import sqlite3
from datetime import date
from decimal import Decimal

import pyarrow as pa
import pytest

from twice.destinations import DestinationError, open_destination
from twice.destinations.aggregates import recompute_from_slice, summarize

DAY = date(2026, 11, 30)
TRADES = [
    {"id": 1, "day": DAY, "fund": "A", "amount": Decimal("10.00")},
    {"id": 2, "day": DAY, "fund": "A", "amount": Decimal("5.50")},
    {"id": 3, "day": DAY, "fund": "B", "amount": Decimal("1.25")},
]


def totals_of(dest) -> dict[str, object]:
    return {r["fund"]: (r["amount"], r["trades"]) for r in dest.read_partition(DAY).to_pylist()}


def test_delta_updates_double_count_on_rerun(engines) -> None:
    """The anti-pattern, run for real: adding the interval's delta again on a rerun."""
    conn = sqlite3.connect(engines.tmp / "delta.db")
    conn.execute("CREATE TABLE totals (fund TEXT PRIMARY KEY, amount_cents BIGINT)")
    for _run in range(2):  # the original run and one rerun of the same interval
        for fund in ("A", "B"):
            delta = sum(int(t["amount"] * 100) for t in TRADES if t["fund"] == fund)
            conn.execute(
                "INSERT INTO totals VALUES (?, ?) ON CONFLICT (fund) DO UPDATE "
                "SET amount_cents = amount_cents + excluded.amount_cents", (fund, delta))
    assert dict(conn.execute("SELECT fund, amount_cents FROM totals")) == {"A": 3100, "B": 250}
    # ...twice the true totals (1550 and 125).


def test_recompute_from_slice_is_idempotent(engine: str, engines) -> None:
    detail = open_destination(engines.spec(engine, "trades"))
    totals = open_destination(engines.spec(engine, "totals"))
    spec = {"amount": ("amount", "sum"), "trades": ("id", "count")}
    for _run in range(3):  # original run + two reruns of the same interval
        detail.replace_partition(TRADES, DAY)
        recompute_from_slice(detail, totals, DAY, group_by=["day", "fund"], aggregations=spec)
    assert totals_of(totals) == {"A": (Decimal("15.50"), 2), "B": (Decimal("1.25"), 1)}
    detail.replace_partition(TRADES[:1], DAY)  # corrected source: fund B had no trades
    recompute_from_slice(detail, totals, DAY, group_by=["day", "fund"], aggregations=spec)
    assert totals_of(totals) == {"A": (Decimal("10.00"), 1)}


def test_summarize_and_its_guards(engines) -> None:
    table = pa.Table.from_pylist(TRADES)
    out = summarize(table, ["fund"], {"n": ("id", "count"), "top": ("amount", "max")})
    assert out.column_names == ["fund", "n", "top"]
    with pytest.raises(DestinationError, match="function 'median'"):
        summarize(table, ["fund"], {"m": ("amount", "median")})
    detail = open_destination(engines.spec("sqlite", "trades"))
    totals = open_destination(engines.spec("sqlite", "totals"))
    with pytest.raises(DestinationError, match="must include the target's partition column"):
        recompute_from_slice(detail, totals, DAY, group_by=["fund"],
                             aggregations={"n": ("id", "count")})
