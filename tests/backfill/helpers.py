"""Shared helpers: the funds_positions example on a real DuckDB warehouse + SQLite ledger."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from twice.core.interval import Interval

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "funds_positions" / "pipeline.py"
START = date(2026, 11, 23)


def example() -> ModuleType:
    """The example module, loaded once the way ``twice demo`` loads it."""
    from twice.cli.demo_cmd import load_example

    return load_example()


def make_workdir(root: Path, days: int = 3) -> Path:
    example().source.build_source(root / "source", START, days)
    return root


def intervals(days: int = 3, first: int = 0) -> list[Interval]:
    pipeline = example().build_pipeline("unused")
    return pipeline.schedule.intervals(START + timedelta(days=first),
                                       START + timedelta(days=first + days))


def contents(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every fingerprinted table, sorted (the warehouse's full contents)."""
    import duckdb

    path = root / "warehouse.duckdb"
    if not path.exists():
        return {}
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall())
                for t in example().TABLES if t in tables}
    finally:
        con.close()


def fingerprints(root: Path, spans: list[Interval]) -> dict[tuple[str, str], tuple[int, str]]:
    from twice.destinations import open_destination
    from twice.destinations.fingerprint import fingerprint

    out = {}
    for table in example().TABLES:
        with open_destination(example().destination(root / "warehouse.duckdb", table)) as dest:
            if dest.schema() is None:
                continue
            for span in spans:
                fp = fingerprint(dest, span)
                out[(table, span.label)] = (fp.row_count, fp.checksum)
    return out


def duplicates(root: Path) -> int:
    from twice.cli.demo_cmd import duplicate_rows

    return duplicate_rows(root / "warehouse.duckdb")
