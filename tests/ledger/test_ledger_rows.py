"""Rows to records: the mapping derived from each record's fields, and ``LedgerReader``."""

from __future__ import annotations

import inspect
from dataclasses import fields
from datetime import UTC, datetime, timedelta

from twice.ledger import Ledger, LedgerReader
from twice.ledger.reader import LedgerReader as ReaderProtocol
from twice.ledger.rows import (
    DECISION,
    FINGERPRINT,
    INTERMEDIATE,
    TIMELINE_EVENT,
    UNIT,
    RowMapper,
    converter_for,
    decode_detail,
    encode_detail,
    encode_names,
)
from twice.ledger.schema import decisions, fingerprints, intermediates, units

AT = datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_every_mapped_field_comes_from_a_column_of_its_table() -> None:
    for mapper, table in ((UNIT, units), (FINGERPRINT, fingerprints), (DECISION, decisions),
                          (INTERMEDIATE, intermediates)):
        assert {column for _, column, _ in mapper.plan} <= set(table.c.keys())
        assert [name for name, _, _ in mapper.plan] == [f.name for f in fields(mapper.record)]


def test_converters_follow_the_field_types() -> None:
    assert converter_for(int) is None and converter_for(str | None) is None
    row = {"seq": 1, "destination": "d", "partition": "p", "version": 2, "row_count": 3,
           "checksum": "9", "recorded_at": AT, "uow_id": None, "attempt": None,
           "columns": encode_names(["a", "b"]), "algorithm": None, "schema_signature": "s"}
    record = FINGERPRINT(row)
    assert record.columns == ("a", "b") and record.schema == "s" and record.recorded_at == AT
    assert FINGERPRINT({**row, "columns": None}).columns is None
    unit = UNIT({"uow_id": "u", "pipeline": "p", "task": "t",
                 "interval_start": "2024-05-01T00:00:00+02:00",
                 "interval_end": "2024-05-02T00:00:00+02:00", "input_partition": "",
                 "input_version": "", "transform_version": "v", "destination": "d",
                 "created_at": AT})
    assert unit.interval_start.utcoffset() == timedelta(hours=2)  # kept as given, not UTC


def test_given_fields_and_renamed_columns() -> None:
    event = TIMELINE_EVENT({"seq": 4, "at": AT, "kind": "error", "uow_id": "u",
                            "summary": "s", "attempt": None, "data": encode_detail({"x": 1})},
                           record="the record")
    assert event.detail == {"x": 1} and event.record == "the record"
    assert decode_detail(None) == {} and decode_detail("[1]") == {"value": [1]}
    assert isinstance(TIMELINE_EVENT, RowMapper)


def test_ledger_answers_every_reader_method() -> None:
    assert LedgerReader is ReaderProtocol
    for name, member in vars(ReaderProtocol).items():
        if name.startswith("_"):
            continue
        assert hasattr(Ledger, name), name
        if inspect.isfunction(member):
            wanted = list(inspect.signature(member).parameters)
            assert list(inspect.signature(getattr(Ledger, name)).parameters) == wanted, name
