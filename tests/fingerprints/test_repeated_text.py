"""Text and binary columns whose values repeat are hashed through a dictionary (each distinct
value once): the fingerprint must be the definition's, whatever the path. Checked against the
independent reference (``fp_reference.reference_v3``) on slices large enough to take the
dictionary path, with NULLs, empty strings, unicode and long values among the repeats, and on a
column of distinct values (the direct path)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from fp_reference import reference_v3
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.destinations import fingerprint as fp
from twice.destinations.columns import DICTIONARY_MIN, schema_of

VALUES = st.lists(
    st.one_of(st.none(), st.text(max_size=40), st.just(""), st.just("ü✓😀" * 20)),
    min_size=1, max_size=6,
)


def checksum(table: pa.Table) -> str:
    schema = schema_of(table)
    _, high, low = fp.arrow_sums(table, [(name, schema[name]) for name in table.column_names])
    return fp.checksum_from_sums(high, low)


@settings(max_examples=25, deadline=None)
@given(values=VALUES, rows=st.integers(DICTIONARY_MIN, 3 * DICTIONARY_MIN),
       seed=st.integers(0, 2**32 - 1))
def test_repeated_text_fingerprint_is_the_definition(values: list[str | None], rows: int,
                                                     seed: int) -> None:
    picks = np.random.default_rng(seed).integers(0, len(values), rows)
    names = [values[i] for i in picks]
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "name": pa.array(names, pa.string()),
                      "blob": pa.array([None if v is None else v.encode() for v in names],
                                       pa.binary())})
    expected = reference_v3(table.to_pylist(), table.schema)
    assert (table.num_rows, checksum(table)) == expected


def test_both_paths_hash_each_value_alike() -> None:
    repeated = pa.array(["a", None, "", "ü✓😀" * 20, "exactly8", "nine byte"] * 1000)
    distinct = pa.array([f"value-{i}" for i in range(6000)] + [None])
    for array in (repeated, distinct, pa.array([None] * 5000, pa.string())):
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)
        assert np.array_equal(fp._text_hashes(array)[valid], fp._byte_hashes(array)[valid])


@pytest.mark.parametrize("values", [["x"] * 5000, [f"v{i}" for i in range(5000)]])
def test_the_path_taken(values: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeats go through the dictionary, distinct values do not (the choice is the sample's)."""
    encoded: list[int] = []
    real = fp.pc.dictionary_encode
    monkeypatch.setattr(fp.pc, "dictionary_encode",
                        lambda array: encoded.append(len(array)) or real(array))
    fp._text_hashes(pa.array(values))
    assert bool(encoded) == (len(set(values)) == 1)
