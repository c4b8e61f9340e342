"""Write the small Parquet dataset the README's ``twice estimate`` commands read.

Hive-partitioned by ``business_date`` (three days, 2,000 movements each, seeded), so that the
estimate shows what projection and partition filters save. Run again to rebuild it; the output
is the same every time.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
DAYS = [date(2026, 11, 28) + timedelta(days=n) for n in range(3)]


def build(root: Path = HERE / "data") -> Path:
    rng = random.Random(20261130)
    for day in DAYS:
        rows = 2_000
        table = pa.table({
            "movement_id": pa.array([f"{day:%Y%m%d}-{n:05d}" for n in range(rows)]),
            "fund_id": pa.array([f"F{rng.randrange(40):03d}" for _ in range(rows)]),
            "isin": pa.array([f"XS{rng.randrange(10**10):010d}" for _ in range(rows)]),
            "amount": pa.array([round(rng.uniform(-1e6, 1e6), 2) for _ in range(rows)]),
            "note": pa.array([f"settlement batch {rng.randrange(10**6)}" for _ in range(rows)]),
        })
        folder = root / f"business_date={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / "part-0.parquet")
    return root


if __name__ == "__main__":
    print(build())
