"""Start real ``twice worker`` processes and read what they and the database recorded."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest

from tests.workers.pipelines.twice_w_side import prepare
from twice.cli.app import COMMANDS
from twice.ledger import Ledger

HERE = Path(__file__).resolve().parent
PIPELINES = HERE / "pipelines"
ROOT = HERE.parents[1]


def command() -> list[str]:
    """``python3 -m twice.cli worker`` once registered; the runner script before that."""
    if "worker" in COMMANDS:
        return [sys.executable, "-m", "twice.cli", "worker"]
    return [sys.executable, str(HERE / "worker_main.py")]


@dataclass
class WorkerProc:
    name: str
    proc: subprocess.Popen[str]

    def finish(self, timeout: float = 60) -> tuple[int, dict[str, Any]]:
        """Exit code and the JSON report (the process must have been started with --json)."""
        out, err = self.proc.communicate(timeout=timeout)
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            raise AssertionError(
                f"worker {self.name} exited {self.proc.returncode}: stdout {out!r} stderr {err}"
            ) from None
        return self.proc.returncode, report


def start(pipeline: str, ledger_url: str, db_url: str, name: str, *args: str,
          env: dict[str, str] | None = None) -> WorkerProc:
    environment = {
        **os.environ, "TWICE_W_DB": db_url, "PYTHONPATH": str(ROOT / "src"),
        **(env or {}),
    }
    proc = subprocess.Popen(
        [*command(), str(PIPELINES / pipeline), "--ledger", ledger_url, "--name", name,
         "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
        cwd=ROOT,
    )
    return WorkerProc(name, proc)


def rows(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql, params).fetchall())


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A new PostgreSQL database with the ledger and side tables, dropped afterwards."""
    admin = os.environ.get("TWICE_TEST_POSTGRES_URL")
    if not admin:
        missing("TWICE_TEST_POSTGRES_URL is not set")
    name = f"twice_w_{uuid.uuid4().hex[:12]}"
    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        missing(f"PostgreSQL not reachable at {admin}: {exc}")
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{admin.rpartition('/')[0]}/{name}"
    try:
        with Ledger.open(url) as ledger:
            assert ledger.dialect == "postgresql"
        prepare(url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def missing(why: str) -> NoReturn:
    """Skip locally, fail under CI: the multi-worker tests must really run there."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)
