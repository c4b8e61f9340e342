"""Issue 19: a password in a PostgreSQL destination URL is never stored or printed.

A real pipeline writes to PostgreSQL as a throwaway role whose password is distinctive (the
test server's own ``twice``/``twice`` would be found everywhere). ``twice run`` and
``twice backfill`` run in child processes, with no PG* variables, so the rows can only have
landed with the password from the URL. Then nothing twice keeps or prints holds it: the
SQLite ledger file's bytes, the destination's ``twice_commits`` rows, and the output of
``explain``, ``status``, ``handover``, ``update``, ``report --html``, ``verify`` and
``fingerprint``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PIPELINE = '''
from datetime import date

import pyarrow as pa

from twice import AcceptanceCriteria, Pipeline, RetryPolicy, Schedule, TaskContext
from twice import open_destination

RAW = "{raw}"
OUT = "{out}"

pipeline = Pipeline("secrets", schedule=Schedule.daily("UTC"))


@pipeline.task(destination=RAW, safe_repeat=True,
               retry=RetryPolicy(max_attempts=2, initial_delay=0.01, max_delay=0.01))
def extract(ctx: TaskContext) -> dict[str, int]:
    """Rows written by the task itself through ctx.destination."""
    day = ctx.interval.start.date()
    table = pa.table({{"day": pa.array([day] * 3, pa.date32()),
                      "n": pa.array([1, 2, 3], pa.int64())}})
    with open_destination(ctx.destination) as dest:
        dest.replace_partition(table, ctx.interval)
    return {{"rows": 3}}


@pipeline.task(depends_on="extract", destination=OUT, write="replace", safe_repeat=True,
               acceptance=AcceptanceCriteria(min_rows=1, max_rejected_rows=None,
                                             required_non_null=("doubled",)))
def load(ctx: TaskContext) -> pa.Table:
    """Rows returned and landed by twice (write="replace")."""
    with open_destination(RAW) as raw:
        rows = raw.read_partition(ctx.interval)
    return rows.append_column("doubled", pa.compute.multiply(rows.column("n"), 2))
'''


def _admin_url() -> str:
    return os.environ.get("TWICE_TEST_POSTGRES_URL", "")


@pytest.fixture
def secret_db() -> Iterator[tuple[str, str]]:
    """(base URL with a throwaway role's password, the password): a fresh database it owns."""
    admin = _admin_url()
    if not admin:
        pytest.skip("TWICE_TEST_POSTGRES_URL is not set")
    import psycopg

    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError:
        if os.environ.get("CI"):
            raise
        pytest.skip("PostgreSQL not reachable at TWICE_TEST_POSTGRES_URL")
    tag = uuid.uuid4().hex[:10]
    role, database, password = f"twice_s_{tag}", f"twice_s_{tag}", f"Pw-{tag}-SeKrEt"
    with conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute(f'CREATE DATABASE "{database}" OWNER {role}')
    host = admin.split("@", 1)[1].rsplit("/", 1)[0]
    try:
        yield f"postgresql://{role}:{password}@{host}/{database}", password
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def _twice(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGPASSFILE"] = str(cwd / "no-such-pgpass")  # only the URL can authenticate
    env.pop("TWICE_LEDGER", None)
    return subprocess.run(
        [sys.executable, "-m", "twice", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )


def test_password_in_destination_url_is_never_stored_or_printed(
    secret_db: tuple[str, str], tmp_path: Path
) -> None:
    base, password = secret_db
    raw = f"{base}?partition_column=day#public.raw"
    out = f"{base}?partition_column=day&connect_timeout=5#public.daily"
    pipeline_file = tmp_path / "pipeline_secrets.py"
    pipeline_file.write_text(textwrap.dedent(PIPELINE.format(raw=raw, out=out)))
    ledger_file = tmp_path / "ledger.db"
    ledger = f"sqlite:///{ledger_file}"
    printed: list[str] = []

    def twice(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        done = _twice(*args, cwd=tmp_path)
        printed.extend([done.stdout, done.stderr])  # not the arguments: those hold it
        if done.returncode not in ok:
            pytest.fail(f"twice {args[0]} exited {done.returncode}:\n{done.stdout}\n"
                        f"{done.stderr}")
        return done

    twice("run", str(pipeline_file), "--interval", "2026-11-30", "--ledger", ledger)
    twice("run", str(pipeline_file), "--interval", "2026-11-30", "--ledger", ledger, "--json")
    twice("backfill", str(pipeline_file), "--start", "2026-11-29", "--end", "2026-12-02",
          "--ledger", ledger, "--force")
    twice("backfill", str(pipeline_file), "--start", "2026-11-29", "--end", "2026-12-02",
          "--ledger", ledger, "--json")

    # The rows are there: twice opened the destination with the real credentials.
    import psycopg

    with psycopg.connect(base) as conn:
        days = conn.execute("SELECT count(*), count(DISTINCT day) FROM public.daily").fetchone()
        assert days == (9, 3)
        commits = conn.execute("SELECT * FROM public.twice_commits").fetchall()
    assert commits, "stamped writes commit records"
    assert password not in repr(commits)

    # Nothing the ledger holds, in any table or page of the file, has the password.
    for kept in [ledger_file, *tmp_path.glob("ledger.db-*")]:
        assert password.encode() not in kept.read_bytes(), f"{kept.name} holds the password"
    with sqlite3.connect(ledger_file) as db:
        uow_ids = [row[0] for row in db.execute("SELECT uow_id FROM twice_units_of_work")]
    assert len(uow_ids) == 6

    for uow_id in uow_ids[:2]:
        twice("explain", uow_id, "--ledger", ledger)
        twice("explain", uow_id, "--ledger", ledger, "--json")
    twice("status", "--ledger", ledger, "--pipeline-file", str(pipeline_file))
    twice("status", "--ledger", ledger, "--json")
    twice("handover", "--ledger", ledger, "--pipeline-file", str(pipeline_file))
    twice("update", "--ledger", ledger)
    html = tmp_path / "report.html"
    twice("report", "--html", str(html), "--ledger", ledger)
    twice("report", "--ledger", ledger, "--json")
    assert password not in html.read_text(encoding="utf-8")
    # The ledger has no password, so verify connects with the pipeline's (or PGPASSWORD's).
    blind = twice("verify", "--ledger", ledger, ok=(1,))
    assert "CANNOT VERIFY" in blind.stdout
    verified = twice("verify", "--ledger", ledger, "--pipeline-file", str(pipeline_file))
    assert "verified 6/6 partitions match the ledger" in verified.stdout
    only = twice("verify", "--ledger", ledger, "--destination", out)  # as the user wrote it
    assert "verified 3/3 partitions match the ledger" in only.stdout
    fingerprinted = twice("fingerprint", out, "--partition", "2026-11-30")
    assert "rows       3" in fingerprinted.stdout

    assert printed and all(password not in text for text in printed), "\n".join(
        text for text in printed if password in text
    )
    # The public identity, not the secret, is what twice shows: the user name stays.
    explained = json.loads(_twice("explain", uow_ids[0], "--ledger", ledger, "--json",
                                  cwd=tmp_path).stdout)
    assert "@" in json.dumps(explained) and password not in json.dumps(explained)


@pytest.mark.parametrize("form", ["user:password@host", "?password="])
def test_password_in_a_postgresql_ledger_url_is_never_stored_or_printed(
    secret_db: tuple[str, str], tmp_path: Path, form: str
) -> None:
    """The ledger itself on PostgreSQL, its URL with the password (as libpq takes it: in the
    user part, or as a query parameter): same rule."""
    base, password = secret_db
    ledger = base if form == "user:password@host" else (
        base.replace(f":{password}@", "@") + f"?password={password}")
    spec = f"{base}?partition_column=day#public.raw"
    pipeline_file = tmp_path / "pipeline_secrets.py"
    pipeline_file.write_text(textwrap.dedent(PIPELINE.format(raw=spec, out=spec + "_out")))
    printed: list[str] = []
    for args in (
        ["run", str(pipeline_file), "--interval", "2026-11-30", "--ledger", ledger],
        ["backfill", str(pipeline_file), "--start", "2026-11-29", "--end", "2026-12-01",
         "--ledger", ledger, "--force", "--json"],
        ["status", "--ledger", ledger], ["update", "--ledger", ledger],
        ["handover", "--ledger", ledger], ["report", "--ledger", ledger, "--json"],
        ["report", "--html", str(tmp_path / "r.html"), "--ledger", ledger],
    ):
        done = _twice(*args, cwd=tmp_path)
        printed.extend([done.stdout, done.stderr])
        if done.returncode != 0:
            pytest.fail(f"twice {args[0]} exited {done.returncode}:\n{done.stdout}\n"
                        f"{done.stderr}")
    assert all(password not in text for text in printed), "\n".join(
        text for text in printed if password in text
    )
    assert password not in (tmp_path / "r.html").read_text(encoding="utf-8")
    import psycopg

    with psycopg.connect(base) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )]
        assert "twice_units_of_work" in tables
        for table in tables:
            dump = conn.execute(f'SELECT * FROM public."{table}"').fetchall()
            assert password not in repr(dump), table


@pytest.mark.parametrize("destination", [
    "duckdb:rel.duckdb?partition_column=day&password=Pw-R3fused#t",  # refused: unknown option
    "sqlite:rel.db?partition_column=day&password=Pw-R3fused#t",
    "iceberg:///{tmp}/ice?partition_column=day&catalog_uri=postgresql://etl:Pw-R3fused@"
    "127.0.0.1:9/cat#ns.t",  # refused: the catalog's password belongs in ?password=
])
def test_a_refused_destination_leaves_its_password_nowhere(tmp_path: Path,
                                                          destination: str) -> None:
    """A refused spec is bad input, found before the ledger opens: nothing is recorded, and
    the password is in no output and no file (also for a relative file spec and a URL inside
    a query value)."""
    pipeline_file = tmp_path / "dyn.py"
    pipeline_file.write_text(textwrap.dedent(f"""
        import pyarrow as pa
        from twice import Pipeline, Schedule
        pipeline = Pipeline("p", schedule=Schedule.daily("UTC"))
        @pipeline.task(destination={destination.format(tmp=tmp_path)!r}, write="replace",
                       safe_repeat=True)
        def t(ctx):
            return pa.table({{"day": pa.array([ctx.interval.start.date()]), "x": [1]}})
    """))
    done = _twice("run", str(pipeline_file), "--interval", "2026-11-01", "--deadline", "none",
                  "--ledger", str(tmp_path / "l.db"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout  # refused as bad input
    assert "Pw-R3fused" not in done.stdout + done.stderr
    assert not list(tmp_path.glob("l.db*"))
    # the library's executor has no such check: it records the unit, then the attempt meets
    # the refusal; what it records is the public identity
    script = ("import sys; from twice.define.load import load_pipeline; from twice import "
              "Executor; from twice.ledger import Ledger; from datetime import date\n"
              "p = load_pipeline(sys.argv[1])\n"
              "with Ledger.open(sys.argv[2]) as led:\n"
              "    r = Executor(p, led).run(p.schedule.intervals(date(2026, 11, 1), "
              "date(2026, 11, 2)))\n"
              "    print(r.counts(), len(led.units()))\n")
    done = subprocess.run([sys.executable, "-c", script, str(pipeline_file),
                           str(tmp_path / "lib.db")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "{'failed-permanent': 1} 1", done.stdout + done.stderr
    assert "Pw-R3fused" not in done.stdout + done.stderr
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or b"Pw-R3fused" not in path.read_bytes() or path == pipeline_file


def test_an_error_whose_text_ignores_its_args_and_an_operators_note_are_stored_masked(
    tmp_path: Path,
) -> None:
    """Found by a probe: an exception class with its own ``__str__`` (pydantic's
    ValidationError echoes the input, a DSN among it) kept its password through the in-place
    masking of its args, into the ledger and every report; and an operator's note pasted
    with a connection string was stored and shown in clear."""
    pipeline_file = tmp_path / "leaky.py"
    pipeline_file.write_text(textwrap.dedent("""
        from twice import Pipeline, Schedule

        class ValidationError(Exception):
            def __str__(self):
                return "1 validation error: input_value='postgresql://gina:Sup3rSecretG@db/x'"

        pipeline = Pipeline("leaky", schedule=Schedule.daily("UTC"))

        @pipeline.task
        def fails(ctx):
            raise ValidationError()

        @pipeline.task(timeout=0.2)
        def slow(ctx):
            import time
            time.sleep(1)
    """))
    from twice.ledger import Ledger

    ledger = tmp_path / "l.db"
    shown = [_twice("run", str(pipeline_file), "--interval", "2026-11-01", "--deadline",
                    "none", "--ledger", str(ledger), *extra, cwd=tmp_path)
             for extra in ((), ("--json",))]
    assert "1 validation error" in shown[0].stdout  # the error is shown, masked
    with Ledger.open(str(ledger)) as opened:
        slow = next(u.uow_id for u in opened.units() if u.task == "slow")
    shown.append(_twice("resolve", slow, "--as", "failed", "--ledger", str(ledger),
                        "--note", "checked postgresql://op:NoteLeak3@h/db: nothing landed",
                        cwd=tmp_path))
    assert shown[-1].returncode == 0, shown[-1].stderr
    for command in (("status",), ("status", "--json"), ("explain", slow), ("update",),
                    ("handover",)):
        shown.append(_twice(*command, "--ledger", str(ledger), cwd=tmp_path))
    for done in shown:
        assert "Sup3rSecretG" not in done.stdout + done.stderr
        assert "NoteLeak3" not in done.stdout + done.stderr
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("l.db*"))
    assert b"validation error" in stored and b"nothing landed" in stored
    assert b"Sup3rSecretG" not in stored and b"NoteLeak3" not in stored
