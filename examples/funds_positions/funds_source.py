"""A small deterministic daily funds-position source: one CSV file per business date.

Seeded per date, so the same date always yields the same bytes (a rerun reads the same input)
and ``input_version`` (a hash of the file) changes only when the file really changes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import random
from datetime import date, timedelta
from pathlib import Path

FUNDS = ("FUND_A", "FUND_B", "FUND_C", "FUND_D")
ISINS = ("PTOTE5OE0007", "PTBCP0AM0015", "PTGAL0AM0009", "PTEDP0AM0009", "PTJMT0AE0001")
COLUMNS = ("fund_id", "isin", "quantity", "price")
# The date whose file carries one unparsable row (acceptance counts it as rejected).
BAD_ROW_DATE = date(2026, 11, 28)


def file_for(source_dir: Path, day: date) -> Path:
    """Where the positions of ``day`` live (the task's input partition)."""
    return Path(source_dir) / f"positions_{day:%Y-%m-%d}.csv"


def rows_for(day: date, seed: int = 7, revision: int = 0) -> list[dict[str, str]]:
    """The positions of ``day``; ``revision`` > 0 models a legitimate upstream correction."""
    rng = random.Random(f"{seed}:{day.isoformat()}:{revision}")
    rows = []
    for fund in FUNDS:
        for isin in ISINS:
            quantity = rng.randint(1, 5000) * 10
            price = rng.randint(500, 90000) / 100
            rows.append({"fund_id": fund, "isin": isin, "quantity": str(quantity),
                         "price": f"{price:.4f}"})
    if day == BAD_ROW_DATE:
        rows.append({"fund_id": "FUND_B", "isin": "PTXXX0000000", "quantity": "n/a",
                     "price": "1.0000"})
    return rows


def write_day(source_dir: Path, day: date, seed: int = 7, revision: int = 0) -> Path:
    """Write (or rewrite) one day's file; returns its path."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows_for(day, seed, revision))
    path = file_for(source_dir, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def build_source(source_dir: Path, start: date, days: int, seed: int = 7) -> list[Path]:
    """Write ``days`` consecutive daily files from ``start``."""
    return [write_day(source_dir, start + timedelta(days=i), seed) for i in range(days)]


def file_version(path: Path) -> str:
    """Input version of one file: the first 16 hex digits of its SHA-256 ("missing" if absent)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except FileNotFoundError:
        return "missing"
