"""A small pipeline of our own for the lifecycle tests: source files -> extract -> transform
-> notify (a side effect), on any destination engine, with an expectation computed without
twice.

- ``extract`` reads ``source/<day>.json`` (its input version is the file's sha256) and RETURNS
  the rows; twice replaces the day's slice of ``raw`` (an owned write).
- ``transform`` reads the day's ``raw`` slice through ``open_destination`` and writes
  ``amount * 10`` per id into ``scaled`` itself (an owned write made by task code).
- ``notify`` appends a line to ``notify.log``: an effect twice cannot see, not safe_repeat.

Every execution is counted in ``calls.log`` (one line per task call), so a test can say how
often each task really ran, across processes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

DAYS = [date(2026, 11, 23) + timedelta(days=i) for i in range(3)]
ENGINES = ("sqlite", "duckdb", "parquet", "postgresql")


def spec(engine: str, root: Path, table: str, postgres_url: str | None = None) -> str:
    """A partitioned destination ``table`` on ``engine`` under ``root``."""
    if engine == "sqlite":
        return f"sqlite://{root / 'wh.db'}?partition_column=day#{table}"
    if engine == "duckdb":
        return f"duckdb://{root / 'wh.duckdb'}?partition_column=day#{table}"
    if engine == "parquet":
        return f"parquet://{root / table}?partition_column=day"
    assert postgres_url is not None
    return f"{postgres_url}?partition_column=day#{table}"


def write_source(root: Path, day: date, rows: list[dict[str, int]]) -> None:
    folder = root / "source"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{day.isoformat()}.json").write_text(json.dumps(rows, sort_keys=True))


def default_rows(day: date, *, bump: int = 0) -> list[dict[str, int]]:
    return [{"id": i, "amount": day.day * 100 + i + bump} for i in range(1, 4)]


def count_calls(root: Path) -> dict[str, int]:
    path = root / "calls.log"
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            counts[line] = counts.get(line, 0) + 1
    return counts


def notified(root: Path) -> list[str]:
    path = root / "notify.log"
    return path.read_text().splitlines() if path.exists() else []


def expected_scaled(root: Path) -> list[tuple[str, int, int]]:
    """The ``scaled`` table a clean run of every source day gives, computed without twice."""
    rows = []
    for path in sorted((root / "source").glob("*.json")):
        for row in json.loads(path.read_text()):
            rows.append((path.stem, row["id"], row["amount"] * 10))
    return sorted(rows)


def table_rows(destination: str) -> list[tuple[str, int, int]]:
    from twice.destinations import open_destination

    with open_destination(destination) as dest:
        if dest.schema() is None:
            return []
        table = dest.read_partition(None, ["day", "id", "amount"])
    return sorted(
        (d.isoformat(), i, a) for d, i, a in zip(
            table.column("day").to_pylist(), table.column("id").to_pylist(),
            table.column("amount").to_pylist(), strict=True,
        )
    )


def build(root: Path, engine: str, postgres_url: str | None = None, *,
          hooks: dict[str, Any] | None = None) -> Pipeline:
    """The pipeline over ``root`` (see the module docstring). ``hooks`` maps a task name to a
    callable run inside the task (before its write) to inject faults."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from twice.destinations import open_destination

    hooks = hooks if hooks is not None else {}
    raw = spec(engine, root, "raw", postgres_url)
    scaled = spec(engine, root, "scaled", postgres_url)
    pipeline = Pipeline("lifecycle", schedule=Schedule.daily("UTC"))

    def source_file(interval: Interval) -> Path:
        return root / "source" / f"{interval.start.date().isoformat()}.json"

    def version(interval: Interval) -> str:
        return hashlib.sha256(source_file(interval).read_bytes()).hexdigest()[:16]

    def called(name: str) -> None:
        with (root / "calls.log").open("a") as log:
            log.write(name + "\n")

    @pipeline.task(destination=raw, write="replace", safe_repeat=True, input_version=version,
                   retry=RetryPolicy(max_attempts=2, transient=(ConnectionError,)))
    def extract(ctx: TaskContext) -> Any:
        called("extract")
        rows = json.loads(source_file(ctx.interval).read_text())
        if "extract" in hooks:
            hooks["extract"](ctx)
        return pa.table({
            "day": pa.array([ctx.interval.start.date()] * len(rows), pa.date32()),
            "id": pa.array([r["id"] for r in rows], pa.int64()),
            "amount": pa.array([r["amount"] for r in rows], pa.int64()),
        })

    @pipeline.task(depends_on=extract, destination=scaled, safe_repeat=True)
    def transform(ctx: TaskContext) -> int:
        called("transform")
        with open_destination(raw) as source:
            table = source.read_partition(ctx.interval)
        out = pa.table({
            "day": table.column("day"), "id": table.column("id"),
            "amount": pc.multiply(table.column("amount"), 10),
        })
        if "transform" in hooks:
            hooks["transform"](ctx)
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(out, ctx.interval)
        if "transform_after" in hooks:
            hooks["transform_after"](ctx)
        return out.num_rows

    @pipeline.task(depends_on=transform)
    def notify(ctx: TaskContext) -> None:
        called("notify")
        if "notify" in hooks:
            hooks["notify"](ctx)
        with (root / "notify.log").open("a") as log:
            log.write(f"{ctx.interval.start.date().isoformat()} {ctx.job_id}\n")

    return pipeline
