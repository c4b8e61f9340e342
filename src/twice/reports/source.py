"""Where a report's evidence comes from: an existing ledger, never one created by asking.

``Ledger.open`` creates (and migrates) a database that is not there yet, which is right for a
worker and wrong for a report: a typo in ``--ledger`` would produce an empty, reassuring report.
So reports refuse a missing SQLite file, or one that is not a twice ledger, before opening it,
with a message naming the ledger and where its name came from.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from twice.core.secrets import redact
from twice.reports.gather import DeadlineSpec, Evidence, ReportError, gather

if TYPE_CHECKING:
    from twice.ledger import LedgerReader

LEDGER_TABLE = "twice_schema"


def describe(url: str | None) -> str:
    """Name the ledger as the user would recognise it, including where the name came from
    (never with its password: ``twice.core.secrets``)."""
    from twice.core.secrets import public_spec

    # redact too: a libpq keyword string ("host=h password=pw") is not a URL, but is masked
    if url is not None:
        return redact(public_spec(url))
    from_env = os.environ.get("TWICE_LEDGER")
    if from_env:
        return f"{redact(public_spec(from_env))} (from $TWICE_LEDGER)"
    return "twice-ledger.db (the default; set --ledger or $TWICE_LEDGER)"


def _check_sqlite_file(database: str, shown: str) -> None:
    path = Path(database)
    if not path.exists():
        raise ReportError(f"ledger not found: {shown} (no file {redact(str(path))})")
    if not path.is_file():
        raise ReportError(f"ledger {shown} is not a file: {path}")
    try:
        found = _has_ledger_table(path, "mode=ro")
    except sqlite3.OperationalError:
        # A WAL ledger on a read-only file system: mode=ro needs a -shm file it cannot create.
        try:
            found = _has_ledger_table(path, "immutable=1")
        except sqlite3.DatabaseError as exc:
            raise _unreadable(exc, path, shown) from None
    except sqlite3.DatabaseError as exc:
        raise _unreadable(exc, path, shown) from None
    if not found:
        raise ReportError(
            f"{shown} is not a twice ledger (it has no {LEDGER_TABLE} table); "
            "point --ledger at the database the runs wrote"
        )


def _unreadable(exc: sqlite3.DatabaseError, path: Path, shown: str) -> Exception:
    """A file the report cannot read: bad input when it is not a database at all (another
    file named by mistake), a damaged ledger (a failed service, exit 1) when SQLite says the
    file is corrupt: the same classification as the ledger's own (``twice.ledger.faults``)."""
    from twice.ledger.errors import LedgerDamagedError
    from twice.ledger.faults import advice, classify

    fault = classify(exc)
    if fault is not None and fault.corrupt:
        return LedgerDamagedError(f"cannot read ledger {shown}: {fault.cause}; "
                                  + advice(fault, dialect="sqlite", path=str(path)))
    return ReportError(f"cannot read ledger {shown}: {exc}")


def _has_ledger_table(path: Path, mode: str) -> bool:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?{mode}", uri=True)
    try:
        return conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (LEDGER_TABLE,)
        ).fetchone() is not None
    finally:
        conn.close()


def load_evidence(
    url: str | None,
    *,
    as_of: datetime | None = None,
    pipeline: str | None = None,
    deadline: DeadlineSpec = None,
    max_observation_age: timedelta | None = None,
) -> Evidence:
    """Open the ledger at ``url`` (None: ``$TWICE_LEDGER`` or ``twice-ledger.db``) and gather it.

    Raises ``ReportError`` for a missing, unreadable or foreign ledger, or when ``pipeline``
    names no recorded unit of work (most likely a typo, which an empty report would hide).
    """
    from twice.ledger import Ledger, LedgerError, LedgerStorageError, LedgerUnavailableError
    from twice.ledger.engine import resolve_url

    shown = describe(url)
    try:
        resolved = resolve_url(url)
        if resolved.get_backend_name() == "sqlite" and resolved.database not in (None, "",
                                                                                   ":memory:"):
            _check_sqlite_file(resolved.database, shown)
        with Ledger.open(url, read_only=True) as ledger:  # a report writes nothing
            require_pipeline(ledger, pipeline, shown)
            return gather(ledger, as_of=as_of, pipeline=pipeline, deadline=deadline,
                          max_observation_age=max_observation_age)
    except (LedgerUnavailableError, LedgerStorageError):
        raise  # a service that failed (exit 1), not a bad report request
    except LedgerError as exc:
        raise ReportError(f"ledger {shown}: {exc}") from None


def require_pipeline(ledger: LedgerReader, pipeline: str | None, shown: str) -> None:
    """Refuse a ``pipeline`` the ledger recorded nothing of (most likely a typo)."""
    if pipeline is not None and not ledger.units(pipeline=pipeline):
        names = sorted({unit.pipeline for unit in ledger.units()})
        known = ", ".join(names) if names else "none"
        raise ReportError(
            f"ledger {shown} has no units of work for pipeline {pipeline!r} "
            f"(pipelines recorded: {known})"
        )


def parse_instant_option(text: str | None, option: str) -> datetime | None:
    """An ISO-8601 instant with an offset from the command line, or None when not given."""
    if text is None:
        return None
    from twice.core.timescale import TimeValueError, parse_instant

    try:
        return parse_instant(text.strip())
    except TimeValueError as exc:
        raise ReportError(f"{option}: {exc}") from None
