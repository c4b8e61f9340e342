"""A PostgreSQL server that refuses the connection (issue 37): ledger or destination, every
command names the database and the user, masks only the password, and exits 1, the code
``docs/reference/cli.md`` gives a service that failed (it exited 2, as bad input, from the
commands that open an existing ledger; and blamed the server's reachability for a database that
does not exist, masking the database's name when it equalled the password).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from tests.conftest import DEFAULT_ADMIN_URL

REPO = Path(__file__).resolve().parents[2]


def _server() -> tuple[str, str, str, int]:
    """(user, password, host, port) of the tests' server; skipped without one."""
    import psycopg

    admin = os.environ.get("TWICE_TEST_POSTGRES_URL", DEFAULT_ADMIN_URL)
    try:
        psycopg.connect(admin, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL not reachable at {admin}")
    parts = urlsplit(admin)
    return parts.username or "", parts.password or "", parts.hostname or "", parts.port or 5432


def _url(user: str, password: str, host: str, port: int, database: str) -> str:
    return urlunsplit(("postgresql", f"{user}:{password}@{host}:{port}", f"/{database}", "", ""))


def twice(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TWICE_", "PG"))}
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["COLUMNS"] = "400"
    return subprocess.run([sys.executable, "-m", "twice", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("command", [["status"], ["update"], ["handover"], ["explain", "x"],
                                     ["run", "PIPELINE", "--interval", "2026-11-01",
                                      "--deadline", "none"]])
def test_a_missing_ledger_database_is_named_with_its_user_and_exits_1(
        command: list[str], tmp_path: Path) -> None:
    user, password, host, port = _server()
    missing = f"twice_missing_{uuid.uuid4().hex[:8]}"
    pipeline = tmp_path / "p.py"
    pipeline.write_text("from twice import Pipeline, Schedule\n"
                        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
                        "@pipeline.task()\ndef t(ctx):\n    pass\n")
    args = [str(pipeline) if word == "PIPELINE" else word for word in command]
    done = twice(*args, "--ledger", _url(user, password, host, port, missing), cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert f"database {missing}, user {user}" in said, said
    assert "the database does not exist" in said and f"createdb -h {host}" in said, said
    assert "pg_isready" not in said  # the server answered: it is not the server's reachability
    assert f"{user}:***@" in said and f"{user}:{password}@" not in said
    assert "Traceback" not in said


def test_a_database_named_like_the_password_is_shown_and_the_password_is_not(
        tmp_path: Path) -> None:
    """The README's development URL, ``twice:twice@.../twice``: the server's message names the
    database; only the URL's password field is masked, not every word equal to it."""
    user, _, host, port = _server()
    word = f"twice_pw_{uuid.uuid4().hex[:8]}"  # a wrong password, also the database's name
    done = twice("status", "--ledger", _url(user, word, host, port, word), cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "password authentication failed" in said and f"database {word}, user {user}" in said
    assert f"{user}:***@{host}:{port}/{word}" in said and f":{word}@" not in said


def test_a_missing_destination_database_is_named_and_exits_1(tmp_path: Path) -> None:
    user, password, host, port = _server()
    missing = f"twice_missing_{uuid.uuid4().hex[:8]}"
    spec = (_url(user, password, host, port, missing)
            + "?partition_column=day&keep_previous=7#public.t")  # diff reads kept versions
    for args in (["fingerprint", spec, "--partition", "2026-11-02"],
                 ["diff", spec, "--partition", "2026-11-02", "--from", "1", "--to", "2",
                  "--key-columns", "id"]):
        done = twice(*args, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 1, said
        assert f"cannot connect to database {missing} as user {user} on {host}:{port}" in said
        assert f'database "{missing}" does not exist' in said
        assert f":{password}@" not in said and "Traceback" not in said


def test_the_ledger_scrubs_a_password_but_keeps_a_name_equal_to_it() -> None:
    from sqlalchemy import create_engine

    from twice.ledger.session import Session

    session = Session(create_engine("postgresql+psycopg://etl:s3cret@h:1/wh"), label="x",
                      clock=lambda: None)  # type: ignore[arg-type,return-value]
    session.password = "s3cret"
    assert session.scrub('auth "s3cret" for postgresql://etl:s3cret@h/wh') == (
        'auth "***" for postgresql://etl:***@h/wh')
    named = Session(create_engine("postgresql+psycopg://twice:twice@h:1/twice"), label="x",
                    clock=lambda: None)  # type: ignore[arg-type,return-value]
    named.password = "twice"
    assert named.scrub('database "twice" does not exist; postgresql://twice:twice@h/twice') == (
        'database "twice" does not exist; postgresql://twice:***@h/twice')
