"""Arrow arrays that start inside their buffers (a slice, as ``batches_sums`` cuts every batch
past its first ``_BATCH_ROWS`` rows) hash as their values, equal to the independent reference
(``fp_reference.reference_v3``). Found by a probe: a string's offsets were read from the
wrong place in every slice but the first, so a PostgreSQL partition of more than 131,072 short
rows (read as one CSV batch) had a wrong checksum, and an edit past that row went unseen."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from fp_reference import reference_v3

from twice.destinations import fingerprint as fp
from twice.destinations.columns import schema_of

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("b", pa.large_binary()),
                    ("d", pa.decimal128(12, 2))])


def _rows(n: int, edited: int | None = None) -> list[dict[str, object]]:
    return [{"id": i, "s": "EDITED" if i == edited else f"name-{i}", "b": f"{i:x}".encode(),
             "d": Decimal(i) / 100} for i in range(n)]


def _sums(batches: list[pa.RecordBatch | pa.Table]) -> str:
    schema = schema_of(pa.Table.from_batches([b for b in batches if isinstance(b, pa.RecordBatch)])
                       if isinstance(batches[0], pa.RecordBatch) else batches[0])
    _, high, low = fp.batches_sums(batches, [(name, schema[name]) for name in sorted(SCHEMA.names)])
    return fp.checksum_from_sums(high, low)


def _sorted(table: pa.Table) -> pa.Table:
    return table.select(sorted(table.column_names))


def test_a_batch_longer_than_one_slice_hashes_as_its_rows() -> None:
    rows = _rows(fp._BATCH_ROWS + 1000)
    table = _sorted(pa.Table.from_pylist(rows, schema=SCHEMA))
    [batch] = table.combine_chunks().to_batches()
    assert _sums([batch]) == _sums([table]) == reference_v3(rows, SCHEMA)[1]
    edited = _rows(fp._BATCH_ROWS + 1000, edited=fp._BATCH_ROWS + 500)
    [changed] = _sorted(pa.Table.from_pylist(edited, schema=SCHEMA)).combine_chunks().to_batches()
    assert _sums([changed]) == reference_v3(edited, SCHEMA)[1] != _sums([batch])


@pytest.mark.parametrize("offset", [1, 7, 1000])
def test_a_sliced_array_hashes_as_its_own_values(offset: int) -> None:
    rows = _rows(3000)
    whole = _sorted(pa.Table.from_pylist(rows, schema=SCHEMA)).combine_chunks()
    part = whole.slice(offset, 500)
    [batch] = part.to_batches()
    expected = reference_v3(rows[offset:offset + 500], SCHEMA)[1]
    copied = _sorted(pa.Table.from_pylist(rows[offset:offset + 500], schema=SCHEMA))
    assert _sums([batch]) == _sums([copied]) == expected


def test_a_large_partition_of_short_rows_is_equal_on_every_engine_and_edits_show(engines
                                                                                  ) -> None:
    """The probe's case end to end: 140,000 short rows, which PostgreSQL reads as one CSV
    batch, fingerprint alike on every engine; one string edited past row 131,072 fails
    verify there."""
    from datetime import date

    from twice.destinations import open_destination
    from twice.destinations.fingerprint import fingerprint, verify

    day = date(2026, 11, 30)
    table = pa.table({"day": pa.array([day] * 140_000, pa.date32()),
                      "id": pa.array(range(140_000), pa.int64()),
                      "s": pa.array([f"n-{i}" for i in range(140_000)], pa.string())})
    prints = {}
    targets = {engine: engines.target(engine) for engine in ("sqlite", "postgresql")}
    for engine, target in targets.items():
        dest = open_destination(target.spec)
        dest.replace_partition(table, day)
        prints[engine] = fingerprint(dest, day)
        dest.close()
    assert prints["sqlite"] == prints["postgresql"]
    targets["postgresql"].sql("UPDATE {t} SET s = 'EDITED' WHERE id = 139999")
    with open_destination(targets["postgresql"].spec) as dest:
        assert not verify(dest, day, prints["postgresql"]).matches
