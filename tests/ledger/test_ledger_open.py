"""Opening a ledger: URLs, durability settings, migrations, version refusal, reopening."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.ledger import LATEST_VERSION, MIGRATIONS, Ledger, LedgerError, SchemaVersionError
from twice.ledger.engine import resolve_url

TABLES = {
    "twice_schema",
    "twice_units_of_work",
    "twice_events",
    "twice_attempts",
    "twice_observations",
    "twice_errors",
    "twice_nonfatal_errors",
    "twice_job_generations",
    "twice_fingerprints",
    "twice_decisions",
    "twice_leases",
    "twice_pool_holdings",
    "twice_locks",
}


def _sqlite_tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for (name,) in rows}


def test_migrations_are_ordered_steps_from_one() -> None:
    assert [step.version for step in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert LATEST_VERSION == MIGRATIONS[-1].version


def test_migration_from_empty_sqlite_creates_every_table(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        assert ledger.schema_version == LATEST_VERSION
        assert ledger.dialect == "sqlite"
    assert TABLES <= _sqlite_tables(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version, applied_at FROM twice_schema").fetchall()
    assert [version for version, _ in rows] == [step.version for step in MIGRATIONS]
    assert all(applied.endswith("+00:00") for _, applied in rows)


@pytest.mark.postgres
def test_migration_from_empty_postgres_creates_every_table(postgres_url: str) -> None:
    with Ledger.open(postgres_url) as ledger:
        assert ledger.schema_version == LATEST_VERSION
        assert ledger.dialect == "postgresql"
        assert ledger.url.startswith("postgresql+psycopg://")
        assert "***" in ledger.url
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert TABLES <= {name for (name,) in rows}


def test_sqlite_is_opened_durable_and_concurrent(tmp_path: Path) -> None:
    with Ledger.open(str(tmp_path / "durable.db")) as ledger:
        with ledger._engine.connect() as conn:  # inspecting the live connection settings
            pragma = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
    # synchronous 2 == FULL: a commit is on disk before it returns.
    expected = {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "busy_timeout": 30000}
    assert pragma == expected


def test_reopen_keeps_data(engine_url: str) -> None:
    clock = FakeClock()
    uow = make_uow()
    with Ledger.open(engine_url, clock=clock) as ledger:
        ledger.record_unit(uow)
        ledger.begin_attempt(uow.uow_id, holder="w1")
        ledger.finish_attempt(uow.uow_id, 1, "succeeded")
        ledger.record_fingerprint("warehouse.positions", "2026-11-05", 3, "42")
    with Ledger.open(engine_url, clock=clock) as ledger:
        assert ledger.schema_version == LATEST_VERSION
        assert [unit.uow_id for unit in ledger.units()] == [uow.uow_id]
        assert [a.outcome for a in ledger.attempts(uow.uow_id)] == ["succeeded"]
        latest = ledger.latest_fingerprint("warehouse.positions", "2026-11-05")
        assert latest is not None and latest.checksum == "42"


def _stamp_future_version(engine_url: str, version: int) -> None:
    sql = "INSERT INTO twice_schema (version, description, applied_at) VALUES ({}, 'future', '{}')"
    if engine_url.startswith("sqlite"):
        with sqlite3.connect(engine_url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql.format(version, "2030-01-01T00:00:00.000000+00:00"))
    else:
        with psycopg.connect(engine_url) as conn:
            conn.execute(sql.format(version, "2030-01-01T00:00:00+00:00"))


def test_newer_schema_is_refused(engine_url: str) -> None:
    Ledger.open(engine_url).close()
    _stamp_future_version(engine_url, 7)
    message = (
        rf"ledger schema version 7 is newer than this twice \(knows {LATEST_VERSION}\); "
        "upgrade twice"
    )
    with pytest.raises(SchemaVersionError, match=message):
        Ledger.open(engine_url)


def test_plain_path_and_sqlite_url_name_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "same.db"
    with Ledger.open(str(path)) as ledger:
        ledger.record_unit(make_uow())
    with Ledger.open(f"sqlite:///{path}") as ledger:
        assert len(ledger.units()) == 1


def test_path_objects_and_memory_databases_open(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "as-path.db") as ledger:
        ledger.record_unit(make_uow())
    assert (tmp_path / "as-path.db").exists()
    with Ledger.open(":memory:") as ledger:  # one shared connection: the data stays visible
        ledger.record_unit(make_uow())
        ledger.begin_attempt(make_uow().uow_id, holder="w1")
        assert len(ledger.attempts(make_uow().uow_id)) == 1


def test_default_is_twice_ledger_db_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWICE_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    Ledger.open().close()
    assert (tmp_path / "twice-ledger.db").exists()


def test_env_var_names_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWICE_LEDGER", str(tmp_path / "from-env.db"))
    with Ledger.open() as ledger:
        assert ledger.url.endswith("from-env.db")
    assert (tmp_path / "from-env.db").exists()


@pytest.mark.parametrize(
    "given",
    [
        "postgresql://u:pw@db.example/ledger",
        "postgres://u:pw@db.example/ledger",
        "postgresql+psycopg2://u:pw@db.example/ledger",
        "postgresql+psycopg://u:pw@db.example/ledger",
    ],
)
def test_postgres_urls_use_psycopg3(given: str) -> None:
    url = resolve_url(given)
    assert url.drivername == "postgresql+psycopg"
    assert (url.username, url.password, url.host, url.database) == (
        "u",
        "pw",
        "db.example",
        "ledger",
    )


def test_unsupported_and_malformed_urls_are_refused_without_password() -> None:
    with pytest.raises(LedgerError, match=r"unsupported ledger URL mysql://u:\*\*\*@h/db"):
        resolve_url("mysql://u:secret@h/db")
    with pytest.raises(LedgerError, match="malformed ledger URL") as caught:
        resolve_url("postgresql://u:secret@h:notaport/db")
    assert "secret" not in str(caught.value)
    with pytest.raises(LedgerError, match="empty ledger URL"):
        resolve_url("  ")


def test_unreachable_postgres_names_the_masked_url() -> None:
    with pytest.raises(LedgerError) as caught:
        Ledger.open("postgresql://twice:hunter2@127.0.0.1:1/nowhere")
    message = str(caught.value)
    assert "cannot open ledger postgresql+psycopg://twice:***@127.0.0.1:1/nowhere" in message
    assert "hunter2" not in message


def test_missing_folder_and_non_database_file_are_clear(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger.open(str(tmp_path / "no" / "such" / "ledger.db"))
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database file at all" * 100)
    with pytest.raises(LedgerError, match=f"cannot open ledger sqlite:///{junk}"):
        Ledger.open(str(junk))


def test_closed_ledger_refuses_work(sqlite_url: str) -> None:
    ledger = Ledger.open(sqlite_url)
    ledger.close()
    ledger.close()  # idempotent
    with pytest.raises(LedgerError, match="is closed"):
        ledger.units()


def test_concurrent_first_open_migrates_once(tmp_path: Path) -> None:
    """Threads opening a brand-new file at once: one migrates, the others see version 1."""
    from concurrent.futures import ThreadPoolExecutor

    url = f"sqlite:///{tmp_path / 'race.db'}"

    def open_and_version(_: int) -> int:
        with Ledger.open(url) as ledger:
            return ledger.schema_version

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(open_and_version, range(4))) == [LATEST_VERSION] * 4
    with sqlite3.connect(tmp_path / "race.db") as conn:
        assert conn.execute("SELECT count(*) FROM twice_schema").fetchone() == (len(MIGRATIONS),)


def test_opening_waits_for_a_rollback_mode_writer_instead_of_failing(tmp_path: Path) -> None:
    """Switching to WAL needs an exclusive lock and SQLite refuses it at once (no busy handler)
    while another connection writes in rollback mode, as when several processes open a new
    ledger together. Opening must wait for the lock like any write, not fail."""
    import threading

    path = tmp_path / "ledger.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE twice_other_writer (x INTEGER)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO twice_other_writer VALUES (1)")
    with sqlite3.connect(path, timeout=5, isolation_level=None) as plain:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            plain.execute("PRAGMA journal_mode = WAL")  # the refusal being worked around
    release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    release.start()
    try:
        with Ledger.open(f"sqlite:///{path}") as ledger:
            ledger.record_unit(make_uow())
    finally:
        release.join()
        other.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT count(*) FROM twice_other_writer").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM twice_units_of_work").fetchone() == (1,)


@pytest.mark.parametrize("url", ["sqlite://", ":memory:", "sqlite:///:memory:",
                                 "sqlite:///x?mode=memory"])
def test_durable_refuses_a_ledger_that_would_vanish(url: str) -> None:
    """Commands that execute work open with durable=True: their evidence must outlive them."""
    with pytest.raises(LedgerError, match="is in memory"):
        Ledger.open(url, durable=True)


def test_another_applications_sqlite_database_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "orders.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (7)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"not a twice ledger: it already holds other tables "
                                          r"\(orders\)"):
        Ledger.open(path)
    assert path.read_bytes() == before  # no ledger tables, and not switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orders.db"]
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # an empty SQLite file is fine to adopt
    with Ledger.open(empty) as ledger:
        assert ledger.schema_version == LATEST_VERSION
    with Ledger.open(empty) as ledger:  # and once it is a ledger it reopens
        assert ledger.units() == []


def _drop_table(url: str, table: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(f"DROP TABLE {table}")
    else:
        with psycopg.connect(url) as conn:
            conn.execute(f"DROP TABLE {table} CASCADE")


def test_a_ledger_missing_a_table_is_refused_when_opened(engine_url: str) -> None:
    """Found by a machinery-fault probe (issue 39): with ``twice_leases`` dropped the ledger
    opened, ``twice run`` failed on "no such table" and left its unit unknown on every rerun,
    and the report commands said nothing. A damaged ledger is refused when it is opened, for
    writing and for reading, naming the missing table; nothing is recreated silently (the
    evidence that table held is gone: restoring from a backup is the operator's call)."""
    Ledger.open(engine_url).close()
    _drop_table(engine_url, "twice_leases")
    message = (r"ledger .* is damaged: table twice_leases is missing \(schema version "
               rf"{LATEST_VERSION} has it\)")
    with pytest.raises(LedgerError, match=message):
        Ledger.open(engine_url)
    with pytest.raises(LedgerError, match=message):
        Ledger.open(engine_url, read_only=True)


@pytest.mark.parametrize("command", ["status", "update", "verify", "handover"])
def test_the_report_commands_refuse_a_damaged_ledger(tmp_path: Path, command: str) -> None:
    """They exited 0 on a ledger missing ``twice_leases``, reading what was left."""
    from click.testing import CliRunner

    from twice.cli import cli

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url).close()
    _drop_table(url, "twice_leases")
    result = CliRunner().invoke(cli, [command, "--ledger", url])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit), result.output
    assert "is damaged: table twice_leases is missing" in result.output
    assert "Traceback" not in result.output
