"""``twice verify`` catches any value changed behind twice's back, not only keys and counts.

Issue 18: multiplying every float ``amount`` of one day by 100 left ``twice verify`` reporting
that all partitions match (floats were left out), and on a destination with ``key_columns`` only
the keys were fingerprinted, so a backfill whose values all changed printed "checksum unchanged"
and values edited by hand passed ``twice verify``. End to end: ``twice backfill`` records, an
edit made directly in the engine (or in the Parquet files), ``twice verify`` judges.
"""

from __future__ import annotations

import pyarrow.compute as pc
from fp_cli import (
    D1,
    D2,
    backfill,
    invoke,
    scale_amount,
    unit_line,
    verify_lines,
    write_pipeline,
)


def _ledger(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_a_float_changed_by_hand_fails_verify(engine: str, engines, tmp_path) -> None:
    target = engines.target(engine)
    pipeline, ledger = write_pipeline(tmp_path, target.spec), _ledger(tmp_path)
    assert backfill(pipeline, ledger).exit_code == 0
    clean = invoke("verify", "--ledger", ledger)
    assert clean.exit_code == 0, clean.output
    target.edit(D1, sql=f"UPDATE {{t}} SET amount = amount * 100 WHERE day = "
                        f"{target.day_literal(D1)}", change=scale_amount(100.0))
    result = invoke("verify", "--ledger", ledger)
    assert result.exit_code == 1, result.output
    lines = verify_lines(result)
    assert "MISMATCH: checksum" in lines[D1] and "row count" not in lines[D1]
    assert "changed behind twice's back" in lines[D1]
    assert " ok " in lines[D2]
    assert "verified 1/2 partitions match" in result.output
    assert "[twice-fp-v3 over amount, day, id, name]" in lines[D2]  # the columns are shown


def test_the_last_bit_of_one_float_fails_verify(engines, tmp_path) -> None:
    target = engines.target("duckdb")
    pipeline, ledger = write_pipeline(tmp_path, target.spec), _ledger(tmp_path)
    assert backfill(pipeline, ledger).exit_code == 0
    target.sql("UPDATE {t} SET amount = nextafter(amount, 1e9) "
               f"WHERE id = 4 AND day = DATE '{D2}'")
    result = invoke("verify", "--ledger", ledger, "--json")
    assert result.exit_code == 1
    assert '"matches": false' in result.output and '"algorithm": "twice-fp-v3"' in result.output


def test_a_non_key_value_changed_on_a_keyed_destination_fails_verify(engine: str, engines,
                                                                     tmp_path) -> None:
    target = engines.target(engine, key_columns=("day", "id"))
    mode = "replace" if engine == "parquet" else "upsert"  # Parquet has no upsert
    pipeline, ledger = write_pipeline(tmp_path, target.spec, mode=mode), _ledger(tmp_path)
    assert backfill(pipeline, ledger).exit_code == 0
    assert invoke("verify", "--ledger", ledger).exit_code == 0

    def rename(table):  # type: ignore[no-untyped-def]
        names = pc.if_else(pc.equal(table["id"], 3), "edited by hand", table["name"])
        return table.set_column(table.schema.get_field_index("name"), "name", names)

    target.edit(D2, sql=f"UPDATE {{t}} SET name = 'edited by hand' WHERE id = 3 AND day = "
                        f"{target.day_literal(D2)}", change=rename)
    result = invoke("verify", "--ledger", ledger)
    assert result.exit_code == 1, result.output
    lines = verify_lines(result)
    assert "MISMATCH: checksum" in lines[D2] and " ok " in lines[D1]
    assert "amount, day, id, name" in lines[D2]  # not only the keys


def test_a_backfill_that_changed_every_value_of_a_keyed_destination_says_so(
    engine: str, engines, tmp_path
) -> None:
    target = engines.target(engine, key_columns=("day", "id"))
    mode = "replace" if engine == "parquet" else "upsert"
    pipeline, ledger = write_pipeline(tmp_path, target.spec, mode=mode), _ledger(tmp_path)
    assert backfill(pipeline, ledger).exit_code == 0
    write_pipeline(tmp_path, target.spec, scale=3.0, mode=mode)  # same keys, new values
    changed = backfill(pipeline, ledger, "--force")
    assert changed.exit_code == 0, changed.output
    line = unit_line(changed.output, D1)
    assert "rows 10 -> 10, checksum CHANGED" in line, changed.output
    assert "2 changed" in changed.output
    assert invoke("verify", "--ledger", ledger).exit_code == 0  # the new values are recorded
    same = backfill(pipeline, ledger, "--force")
    assert "checksum unchanged" in unit_line(same.output, D1)


def test_fingerprint_command_lists_every_column(engines, tmp_path) -> None:
    target = engines.target("sqlite", key_columns=("day", "id"))
    pipeline, ledger = write_pipeline(tmp_path, target.spec), _ledger(tmp_path)
    assert backfill(pipeline, ledger).exit_code == 0
    shown = invoke("fingerprint", target.spec, "--partition", D1)
    assert shown.exit_code == 0, shown.output
    assert "columns    amount, day, id, name (4)" in shown.output
    assert "algorithm  twice-fp-v3" in shown.output
    named = invoke("fingerprint", target.spec, "--partition", D1, "--columns", "amount",
                   "--json")
    assert '"columns": ["amount"]' in named.output


def test_a_value_of_another_sqlite_storage_class_is_never_taken_for_the_recorded_one(
    tmp_path,
) -> None:
    """Found by a probe: SQLite keeps any value in any column, and reading them back
    converted what the type could not hold (0.9 in an integer column read as 0; the text
    'false', 2 or 0.5 in a boolean one as True; a blob in a text column, a text in a binary
    one), so those edits verified "ok"."""
    import sqlite3
    from datetime import date

    import pyarrow as pa

    from twice.destinations import DestinationError, open_destination
    from twice.destinations.fingerprint import fingerprint, verify

    day = date(2026, 11, 30)
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#t"
    table = pa.table({"day": pa.array([day], pa.date32()), "i": pa.array([0], pa.int64()),
                      "b": pa.array([True]), "s": pa.array(["a"]),
                      "x": pa.array([b"\x00"], pa.binary())})
    edits = ["i = 0.9", "b = 'false'", "b = 2", "b = 0.5", "s = X'61'", "x = char(0)"]
    for edit in edits:
        (tmp_path / "w.db").unlink(missing_ok=True)
        with open_destination(spec) as dest:
            dest.replace_partition(table, day)
            recorded = fingerprint(dest, day)
        with sqlite3.connect(tmp_path / "w.db") as conn:
            conn.execute(f"UPDATE t SET {edit}")
        conn.close()
        with open_destination(spec) as dest:
            try:
                assert not verify(dest, day, recorded).matches, edit
            except DestinationError as exc:  # cannot verify: also not "ok"
                assert "is not a stored" in str(exc), edit
