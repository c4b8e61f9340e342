"""Fingerprints recorded by ``twice-fp-v1`` still verify, over their own columns, and are
reported as older; an algorithm twice does not know, or a record without its columns, is
reported as not verifiable (exit 1), never as a match.

A v1 record is what twice recorded before v2: on a destination with ``key_columns``, the
checksum of the key columns only (computed here by the documented definition, independently).
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pyarrow as pa
import pytest
from fp_cli import D1, invoke
from fp_reference import reference

from twice.core.interval import Interval
from twice.destinations import DestinationError, open_destination
from twice.destinations.fingerprint import Fingerprint, recompute, verify
from twice.ledger import Ledger

DAY = date(2026, 11, 23)
SPAN = Interval(datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 24, tzinfo=UTC))
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()),
                    ("amount", pa.float64())])
ROWS = [{"day": DAY, "id": i, "name": f"n{i}", "amount": i * 0.5} for i in range(5)]
KEYS = ["day", "id"]


def _setup(engines, engine: str, tmp_path, algorithm: str = "twice-fp-v1",  # type: ignore[no-untyped-def]
           columns: list[str] | None = KEYS) -> tuple[object, str]:
    target = engines.target(engine, key_columns=tuple(KEYS))
    with open_destination(target.spec) as dest:
        dest.replace_partition(pa.Table.from_pylist(ROWS, schema=SCHEMA), SPAN, stamp=None)
    count, checksum = reference(ROWS, SCHEMA, KEYS)  # twice-fp-v1: the key columns only
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(ledger_url) as ledger:
        ledger.record_fingerprint(target.spec, SPAN.label, count, checksum, columns=columns,
                                  algorithm=algorithm)
    return target, ledger_url


def test_a_v1_record_still_verifies_and_is_reported_as_older(engine: str, engines,
                                                             tmp_path) -> None:
    target, ledger = _setup(engines, engine, tmp_path)
    result = invoke("verify", "--ledger", ledger)
    assert result.exit_code == 0, result.output
    assert "[twice-fp-v1 over day, id]" in result.output
    assert "older algorithm twice-fp-v1: covers only day, id" in result.output
    assert "1 recorded with an older algorithm" in result.output
    target.edit(D1, sql="UPDATE {t} SET id = id + 100 WHERE id = 2",
                change=lambda t: t.set_column(t.schema.get_field_index("id"), "id", pa.array(
                    [v + 100 if v == 2 else v for v in t["id"].to_pylist()], pa.int64())))
    changed = invoke("verify", "--ledger", ledger)
    assert changed.exit_code == 1 and "MISMATCH: checksum" in changed.output


def test_recompute_uses_the_recorded_definition(engines, tmp_path) -> None:
    target, _ = _setup(engines, "duckdb", tmp_path)
    v1 = Fingerprint(*reference(ROWS, SCHEMA, KEYS), columns=tuple(KEYS),
                     algorithm="twice-fp-v1")
    with open_destination(target.spec) as dest:
        again = recompute(dest, SPAN, v1)
        assert again == v1 and again.older
        result = verify(dest, SPAN, v1)
        assert result.matches and "covers only day, id" in result.note
        v2 = verify(dest, SPAN, Fingerprint(*reference(ROWS, SCHEMA), columns=tuple(
            sorted(SCHEMA.names)), algorithm="twice-fp-v2"))
        assert v2.matches and "older algorithm twice-fp-v2" in v2.note
        with pytest.raises(DestinationError, match="float columns"):
            recompute(dest, SPAN, Fingerprint(1, "0" * 16, ("amount",), "twice-fp-v1"))


@pytest.mark.parametrize(("algorithm", "columns", "message"), [
    ("twice-fp-v9", KEYS, "cannot recompute"),
    ("twice-fp-v1", None, "does not list its columns"),
])
def test_records_twice_cannot_recompute_are_not_verified(engines, tmp_path, algorithm: str,
                                                         columns: list[str] | None,
                                                         message: str) -> None:
    _, ledger = _setup(engines, "sqlite", tmp_path, algorithm, columns)
    result = invoke("verify", "--ledger", ledger)
    assert result.exit_code == 1
    assert "CANNOT VERIFY" in result.output and message in result.output
