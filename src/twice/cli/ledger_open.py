"""Opening the ledger a command names (``--ledger URL``, else ``$TWICE_LEDGER``, else
``twice-ledger.db``): the one place the CLI turns what was typed into a ledger, so a URL that
cannot name a ledger is bad input naming ``--ledger`` on every command, never a traceback.

``resolve_url`` accepts any URL SQLAlchemy can parse; whether its dialect can connect with it
(``sqlite://host/x.db`` cannot: an SQLite URL names a file, not a host) is only known when the
engine is created, as an ``sqlalchemy.exc.ArgumentError``. :func:`check_ledger_url` asks the
dialect first, without connecting; :func:`open_ledger` also catches that error from opening.
Messages name the ledger as :func:`twice.reports.source.describe` does (where the name came
from, never its password).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from twice.errors import InputError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from twice.ledger import Ledger

FORMS = ("use sqlite:///relative/path.db, sqlite:////absolute/path.db, a file path, or "
         "postgresql://user:password@host/database")


def invalid_ledger_url(url: str | None, error: Exception, *, sqlite: bool) -> InputError:
    """The bad-input error for a ledger URL the database driver refused (``error``)."""
    from twice.reports.source import describe

    # the driver's first words only: the rest of its message repeats the URL (with a
    # ?password= in clear) and lists forms that twice words itself
    what = str(error).splitlines()[0].partition(":")[0].strip() or type(error).__name__
    why = "an SQLite URL names a file, not a host, user or port; " if sqlite else ""
    return InputError(f"--ledger: {describe(url)} is not a usable ledger URL ({what}): "
                      f"{why}{FORMS}")


def check_ledger_url(url: str | None) -> URL:
    """The ledger URL ``url`` names, checked without connecting: ``InputError`` naming
    ``--ledger`` when it is malformed or its database driver refuses it."""
    from sqlalchemy.exc import ArgumentError

    from twice.ledger import LedgerError
    from twice.ledger.engine import resolve_url

    try:
        resolved = resolve_url(url)
    except LedgerError as exc:
        raise InputError(str(exc)) from None
    sqlite = resolved.get_backend_name() == "sqlite"
    try:
        resolved.get_dialect()().create_connect_args(resolved)
    except (ArgumentError, ValueError) as exc:
        raise invalid_ledger_url(url, exc, sqlite=sqlite) from None
    from twice.ledger.engine import sqlite_path

    path = sqlite_path(resolved)
    if path is not None and path.is_dir():  # SQLite would say only "cannot open": storage
        from twice.reports.source import describe

        raise InputError(f"--ledger: {describe(url)} is a directory; give the ledger's file "
                         "(e.g. DIRECTORY/twice-ledger.db)")
    return resolved


def open_ledger(url: str | None, *, durable: bool = False) -> Ledger:
    """``Ledger.open(url, durable=durable)`` for a command: a URL or ledger that cannot be
    used is ``InputError``; a server or storage that failed or refused the connection stays
    ``LedgerUnavailableError``/``LedgerStorageError`` (exit 1) (``durable``: the command
    records evidence, see ``Ledger.open``)."""
    from sqlalchemy.exc import ArgumentError

    from twice.ledger import Ledger, LedgerError, LedgerStorageError, LedgerUnavailableError

    resolved = check_ledger_url(url)
    try:
        return Ledger.open(url, durable=durable)
    except (LedgerUnavailableError, LedgerStorageError):
        raise  # a service that failed (exit 1), not bad input
    except LedgerError as exc:  # the ledger named cannot be used: nothing was done
        raise InputError(str(exc)) from exc
    except ArgumentError as exc:
        raise invalid_ledger_url(url, exc,
                                 sqlite=resolved.get_backend_name() == "sqlite") from None


#: The first bytes of files a report must never overwrite: databases and data files.
_DATA_MAGIC = ((0, b"SQLite format 3\x00"), (8, b"DUCK"), (0, b"PAR1"))


def check_report_output(path: Path, ledger_url: URL, option: str) -> None:
    """Refuse to write a report over the ledger it reads (``ledger_url``, as
    :func:`check_ledger_url` gave it) or its journal files, or over any database or Parquet
    file: a typo'd ``-o`` must never replace evidence with a page. ``InputError`` naming
    ``option``; an ordinary file (an earlier report) is replaced."""
    from twice.ledger.engine import sqlite_path

    target = path.expanduser().resolve()
    ledger = sqlite_path(ledger_url)
    if ledger is not None:
        base = ledger.expanduser().resolve()
        if target in {base, *(base.with_name(base.name + s) for s in ("-wal", "-shm",
                                                                       "-journal"))}:
            raise InputError(f"{option}: {path} is the ledger this report reads; write the "
                             "report to another file")
    if target.is_dir():
        raise InputError(f"{option}: {path} is a directory; name the file to write")
    if not target.is_file():
        return  # nothing there yet, or a terminal or pipe: nothing to read the kind of
    try:
        with target.open("rb") as existing:
            head = existing.read(16)
    except OSError:
        return  # unreadable: writing it says why
    if any(head[at:at + len(magic)] == magic for at, magic in _DATA_MAGIC):
        raise InputError(f"{option}: {path} is a database or data file, not a report; "
                         "write the report to another file")
