"""Child processes of the Iceberg crash and race tests (run as a script, never collected).

``crash SPEC LEDGER POINT``: the crash writer of tests/reliability (``crash_writer.run``: the
executor writes version "new" of three days) with ONE kill point armed; at it the child prints
``at:POINT`` and sleeps until the parent's SIGKILL. The points wrap methods that exist already
(this process only):

* ``after-delete``: the delete is staged, the append not yet (``_after_delete``);
* ``before-commit``: data files written, the catalog not yet updated (``_before_commit``);
* ``metadata-written``: the new metadata file is written, the catalog's pointer not yet
  swapped (inside ``SqlCatalog.commit_table``, after ``_write_metadata``);
* ``after-commit``: the catalog commit returned, twice not yet (``commit_transaction``);
* ``before-ledger-commit`` / ``after-ledger-commit``: around ``Ledger.finish_attempt``.

``race ...``: see tests/reliability/table_format_child.py (the pause is before the catalog
commit).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def arm(spec: str, point: str) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Transaction
    from tests.reliability import crash_writer as cw

    from twice.destinations.iceberg import IcebergDestination
    from twice.ledger import Ledger

    cw._ARMED[point] = 1
    where = {
        "after-delete": (IcebergDestination, "_after_delete", "before"),
        "before-commit": (IcebergDestination, "_before_commit", "before"),
        "metadata-written": (SqlCatalog, "_write_metadata", "after"),
        "after-commit": (Transaction, "commit_transaction", "after"),
        "before-ledger-commit": (Ledger, "finish_attempt", "before"),
        "after-ledger-commit": (Ledger, "finish_attempt", "after"),
    }
    owner, name, when = where[point]
    cw._around(owner, name, **{when: point})
    if point == "metadata-written":  # a staticmethod: keep it one
        setattr(SqlCatalog, name, staticmethod(getattr(SqlCatalog, name)))


if __name__ == "__main__":
    from tests.reliability.table_format_child import main

    main(arm)
