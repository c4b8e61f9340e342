"""What ``twice init NAME`` writes: a pipeline in the recommended style, sample input, a test.

The generated ``pipeline.py`` is the pattern of docs/guides/first-pipeline.md in one task:
input keyed by the interval (one CSV per day, found from ``ctx.interval``), the write owned by
twice (the task returns a PyArrow table; ``write="replace"`` replaces the day's partition of a
DuckDB table, with a commit record and a fingerprint), ``safe_repeat=True`` and a retry policy
that retries one declared transient error only. ``test_pipeline.py`` runs it twice over the
first two sample days through the real CLI and checks the table holds each input row once.

Templates are plain text with ``<<name>>`` placeholders (the generated code is full of braces,
so ``str.format`` would not do); :func:`render` fills them.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from twice.errors import InputError

# The pipeline name becomes a directory, an environment variable prefix and part of job ids.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
SAMPLE_DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
RANGE_START, RANGE_END = "2026-11-01", "2026-11-04"  # --end is exclusive: the sample days
TEST_END = "2026-11-03"  # the generated test runs the first two days

PIPELINE = '''\
"""<<name>>: one CSV of orders per day -> DuckDB, each day's partition replaced.

Safe to run twice: each run reads only its interval's file, and twice replaces that day's
partition of the ``orders`` table in one transaction, with a commit record and a fingerprint.
From the directory that holds <<name>>/:

    twice run <<name>>/pipeline.py --start <<start>> --end <<end>> --deadline none
    python -m pytest -q <<name>>

The warehouse is $<<env>>/warehouse.duckdb (default: ./<<name>>-work).
Guide: docs/guides/first-pipeline.md in the twice repository.
"""

from __future__ import annotations

import csv
import hashlib
import os
from datetime import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from twice import Interval, Pipeline, RetryPolicy, Schedule, TaskContext

DATA = Path(__file__).resolve().parent / "data"
WORKDIR = Path(os.environ.get("<<env>>", "<<name>>-work")).resolve()
WORKDIR.mkdir(parents=True, exist_ok=True)

pipeline = Pipeline("<<name>>", schedule=Schedule.daily("UTC"), deadline=time(6, 0))


class SourceUnavailableError(ConnectionError):
    """The source did not answer: the one error worth another try."""


def source_file(interval: Interval) -> Path:
    """The only input the interval reads (never "today's" file)."""
    return DATA / f"orders-{interval.start:%Y-%m-%d}.csv"


def source_version(interval: Interval) -> str:
    """A hash of the input: a corrected file is a new unit of work."""
    return hashlib.sha256(source_file(interval).read_bytes()).hexdigest()[:16]


@pipeline.task(
    destination=f"duckdb://{WORKDIR / 'warehouse.duckdb'}?partition_column=day#orders",
    write="replace",  # twice replaces the day's partition with the returned rows
    safe_repeat=True,  # no effect besides that replace (no emails, no remote jobs)
    retry=RetryPolicy(max_attempts=3, initial_delay=1.0, transient=(SourceUnavailableError,)),
    input_partition="orders-{start:%Y-%m-%d}.csv",
    input_version=source_version,
)
def orders(ctx: TaskContext) -> pa.Table:
    """The interval's orders, exactly as in its file."""
    with source_file(ctx.interval).open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return pa.table({
        "day": pa.array([ctx.interval.start.date()] * len(rows), pa.date32()),
        "order_id": pa.array([row["order_id"] for row in rows], pa.string()),
        "customer": pa.array([row["customer"] for row in rows], pa.string()),
        "amount": pa.array([Decimal(row["amount"]) for row in rows], pa.decimal128(12, 2)),
    })
'''

TEST = '''\
"""Run the pipeline twice over two days: the table must hold each input row exactly once."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
DAYS = ("<<start>>", "<<test_end_day>>")
RANGE = ["--start", "<<start>>", "--end", "<<test_end>>", "--deadline", "none"]  # two days


def twice(*args: str, workdir: Path) -> None:
    env = {**os.environ, "<<env>>": str(workdir)}
    ledger = ["--ledger", str(workdir / "ledger.db")]
    done = subprocess.run([sys.executable, "-m", "twice", *args, *ledger], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def table(workdir: Path) -> list[tuple[str, str, str, Decimal]]:
    with duckdb.connect(str(workdir / "warehouse.duckdb"), read_only=True) as db:
        return sorted(db.execute(
            "SELECT strftime(day, '%Y-%m-%d'), order_id, customer, amount FROM orders"
        ).fetchall())


def expected() -> list[tuple[str, str, str, Decimal]]:
    rows = []
    for day in DAYS:
        with (HERE / "data" / f"orders-{day}.csv").open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                rows.append((day, row["order_id"], row["customer"], Decimal(row["amount"])))
    return sorted(rows)


def test_running_twice_writes_each_row_once(tmp_path: Path) -> None:
    pipeline = str(HERE / "pipeline.py")
    twice("run", pipeline, *RANGE, workdir=tmp_path)
    first = table(tmp_path)
    twice("run", pipeline, *RANGE, "--force", workdir=tmp_path)  # really executes again
    second = table(tmp_path)
    assert second == first == expected()
    assert len(set(second)) == len(second)  # no duplicates
'''

SAMPLE = {
    "2026-11-01": "order_id,customer,amount\nA-1001,acme,120.00\nA-1002,globex,75.50\n"
                  "A-1003,acme,19.99\n",
    "2026-11-02": "order_id,customer,amount\nA-1004,initech,240.00\nA-1005,globex,310.25\n",
    "2026-11-03": "order_id,customer,amount\nA-1006,acme,42.00\nA-1007,umbrella,8.75\n",
}

README = '''\
# <<name>>

A daily twice pipeline: `data/orders-YYYY-MM-DD.csv` -> DuckDB table `orders`, each day's
partition replaced (safe to run twice). From the directory that holds `<<name>>/`:

```bash
twice run <<name>>/pipeline.py --start <<start>> --end <<end>> --deadline none
twice status
python -m pytest -q <<name>>
```

The warehouse is `$<<env>>/warehouse.duckdb` (default `./<<name>>-work`); the ledger is
`$TWICE_LEDGER` or `./twice-ledger.db` unless you pass `--ledger`. Add a day's CSV to `data/`
and run that day. The twice guide "Your first pipeline" (docs/guides/first-pipeline.md)
explains every line.
'''


@dataclass(frozen=True)
class Scaffold:
    """What ``twice init`` created: the directory, the pipeline name and the files written."""

    directory: Path
    name: str
    files: tuple[Path, ...]

    @property
    def env(self) -> str:
        return env_name(self.name)


def env_name(name: str) -> str:
    """The environment variable naming the pipeline's work directory."""
    return f"{name.upper()}_WORKDIR"


def check_name(target: str) -> str:
    """The pipeline name: the last part of ``target``, a Python identifier (<= 64 characters,
    not a keyword), because it names a directory, a pipeline and an environment variable."""
    name = Path(target).name
    if not NAME_PATTERN.fullmatch(name) or keyword.iskeyword(name):
        raise InputError(
            f"NAME: {target!r} is not a usable pipeline name; use a Python identifier of at most "
            "64 ASCII letters, digits and '_', not starting with a digit (e.g. acme_orders)"
        )
    return name


def render(template: str, name: str) -> str:
    """Fill a template's placeholders for the pipeline ``name``."""
    values = {"name": name, "env": env_name(name), "start": RANGE_START, "end": RANGE_END,
              "test_end": TEST_END, "test_end_day": SAMPLE_DAYS[1]}
    for key, value in values.items():
        template = template.replace(f"<<{key}>>", value)
    return template


def files_for(name: str) -> dict[str, str]:
    """Relative path -> content of every file ``twice init`` writes."""
    files = {
        "pipeline.py": render(PIPELINE, name),
        "test_pipeline.py": render(TEST, name),
        "README.md": render(README, name),
    }
    for day in SAMPLE_DAYS:
        files[f"data/orders-{day}.csv"] = SAMPLE[day]
    return files


def scaffold(target: str) -> Scaffold:
    """Create ``target`` (a new or empty directory) holding a new pipeline; refuse (InputError
    naming the path) a name that is not an identifier or a path that exists and is not an
    empty directory. Nothing is written when it refuses."""
    name = check_name(target)
    directory = Path(target)
    if directory.exists() or directory.is_symlink():
        if not directory.is_dir():
            raise InputError(f"NAME: {target} already exists and is not a directory; "
                             "choose another name")
        if any(directory.iterdir()):
            raise InputError(f"NAME: {target} already exists and is not empty; twice init "
                             "never overwrites files: choose another name or remove it")
    written = []
    try:
        for relative, content in files_for(name).items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8", newline="\n") as handle:
                handle.write(content)
            written.append(path)
    except OSError as exc:
        raise InputError(f"NAME: cannot create {target}: {exc.strerror or exc}") from exc
    return Scaffold(directory, name, tuple(written))
