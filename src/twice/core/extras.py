"""Optional modules, imported in one place: ``require(module, extra=..., who=...)``.

``pip install twice`` brings what the embedded default needs (SQLite ledger; DuckDB, SQLite
and Parquet destinations; the CLI; ``twice demo``). Every integration is an extra
(``twice[postgres]``, ``[spark]``, ``[bigquery]``, ``[delta]``, ``[iceberg]``, ``[dbt]``,
``[airflow]``, ``[lineage]``; see pyproject.toml), and its package is imported only through
:func:`require`, at the moment it is used: a missing one is one line naming the extra
(``postgresql:// destinations need the postgres extra: pip install 'twice[postgres]'``), a
``MissingExtraError`` the CLI maps to an exit code, never a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from twice.errors import MissingExtraError


def require(module: str, *, extra: str | None, who: str, package: str | None = None) -> ModuleType:
    """Import ``module``, or raise ``MissingExtraError`` saying that ``who`` (a plural subject:
    ``"postgresql:// destinations"``) needs ``extra``; ``package``: what to install when no
    extra of twice carries the module (``extra=None``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or module
        install = f"'twice[{extra}]'" if extra else (package or module.split(".")[0])
        needs = f"the {extra} extra" if extra else install
        detail = "" if missing.split(".")[0] == module.split(".")[0] else f" ({exc})"
        raise MissingExtraError(f"{who} need {needs}: pip install {install}{detail}",
                                module=module, extra=extra) from exc


def available(module: str) -> bool:
    """Whether ``module`` can be imported (it is imported to find out)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
