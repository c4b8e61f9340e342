"""Per-interval input snapshots (issue 19, the Portuguese seed text): a source that overwrites
history is read once per unit; retries and reruns read the snapshot, and a changed source is a
new input version only when asked. Checked row by row against the source as it was."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from twice import Pipeline, RetryPolicy, Schedule, TaskContext
from twice.engine.executor import Executor
from twice.engine.snapshots import SnapshotError, latest, store_of
from twice.ledger import Ledger

SCHEDULE = Schedule.daily("UTC")
DAY = SCHEDULE.interval_for(datetime(2026, 11, 2, tzinfo=UTC))


class Source:
    """A mutable source: the rows it returns for a day can be rewritten at any time."""

    def __init__(self) -> None:
        self.rows = [{"id": 1, "amount": 10}, {"id": 2, "amount": 20}]
        self.reads = 0

    def read(self, interval: object) -> pa.Table:
        self.reads += 1
        return pa.Table.from_pylist([dict(row, day=DAY.start.date()) for row in self.rows])


def build(root: Path, source: Source, *, fail_first: int = 0) -> tuple[Pipeline, list[int]]:
    pipeline = Pipeline("snap", schedule=SCHEDULE)
    calls: list[int] = []

    @pipeline.task(destination=f"duckdb://{root / 'wh.duckdb'}?partition_column=day#out",
                   write="replace", snapshot=source.read, safe_repeat=True,
                   retry=RetryPolicy(max_attempts=3, initial_delay=0.0,
                                     transient=(ConnectionError,)))
    def load(ctx: TaskContext) -> pa.Table:
        calls.append(ctx.attempt)
        rows = ctx.snapshot.read()
        if len(calls) <= fail_first:
            source.rows = [{"id": 1, "amount": 999}]  # the source is rewritten meanwhile
            raise ConnectionError("the warehouse dropped the connection")
        return rows

    return pipeline, calls


def destination_rows(root: Path) -> list[tuple[int, int]]:
    with duckdb.connect(str(root / "wh.duckdb"), read_only=True) as con:
        return sorted(con.execute("SELECT id, amount FROM out").fetchall())


@pytest.fixture
def ledger(tmp_path: Path):
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as opened:
        yield opened


def run(pipeline: Pipeline, ledger: Ledger, root: Path, **options: object):
    return Executor(pipeline, ledger, sleep=lambda _s: None, snapshot_root=str(root / "snaps"),
                    **options).run(DAY)  # type: ignore[arg-type]


def test_a_retry_reads_the_snapshot_not_the_rewritten_source(tmp_path: Path,
                                                              ledger: Ledger) -> None:
    source = Source()
    original = sorted((r["id"], r["amount"]) for r in source.rows)
    pipeline, calls = build(tmp_path, source, fail_first=1)
    result = run(pipeline, ledger, tmp_path)
    unit = result.unit("load")
    assert unit.outcome == "succeeded" and calls == [1, 2]
    assert source.reads == 1  # read once, before the first attempt
    assert destination_rows(tmp_path) == original  # not the rewritten [(1, 999)]
    snap = latest(ledger, "snap", "load", DAY, tmp_path / "snaps")
    assert snap is not None and snap.version == 1 and snap.rows == 2
    seen = [o for o in ledger.observations(unit.uow_id) if o.state == "snapshot-read"]
    assert [o.attempt for o in seen] == [1, 2]
    assert {o.detail["checksum"] for o in seen} == {snap.checksum}


def test_a_forced_rerun_reads_the_same_snapshot(tmp_path: Path, ledger: Ledger) -> None:
    source = Source()
    original = sorted((r["id"], r["amount"]) for r in source.rows)
    pipeline, _ = build(tmp_path, source)
    first = run(pipeline, ledger, tmp_path).unit("load")
    source.rows = [{"id": 7, "amount": 70}]  # history rewritten after the run
    again = Executor(pipeline, ledger, sleep=lambda _s: None,
                     snapshot_root=str(tmp_path / "snaps"),
                     reruns={first.uow_id: first.total_attempts}).run(DAY).unit("load")
    assert again.uow_id == first.uow_id and again.outcome == "succeeded"
    assert ledger.current_generation(first.uow_id).generation == 2  # a real rerun
    assert source.reads == 1 and destination_rows(tmp_path) == original


def test_a_changed_source_is_a_new_input_version_only_when_asked(tmp_path: Path,
                                                                 ledger: Ledger) -> None:
    source = Source()
    pipeline, _ = build(tmp_path, source)
    first = run(pipeline, ledger, tmp_path).unit("load")
    source.rows = [{"id": 7, "amount": 70}]
    unchanged = run(pipeline, ledger, tmp_path).unit("load")
    assert unchanged.uow_id == first.uow_id and source.reads == 1  # not asked: not read
    refreshed = run(pipeline, ledger, tmp_path, refresh_snapshots=True).unit("load")
    assert source.reads == 2
    assert refreshed.uow_id != first.uow_id and refreshed.outcome == "succeeded"
    assert "snap:" in str(ledger.unit(refreshed.uow_id).input_version)
    assert destination_rows(tmp_path) == [(7, 70)]
    versions = ledger.fingerprints(store_of("snap", "load"), DAY.label)
    assert [v.version for v in versions] == [1, 2]
    # refreshing again with the same rows keeps the version and the unit
    same = run(pipeline, ledger, tmp_path, refresh_snapshots=True).unit("load")
    assert same.uow_id == refreshed.uow_id and source.reads == 3
    assert len(ledger.fingerprints(store_of("snap", "load"), DAY.label)) == 2


def test_a_snapshot_changed_on_disk_is_refused_not_read(tmp_path: Path,
                                                        ledger: Ledger) -> None:
    source = Source()
    pipeline, _ = build(tmp_path, source)
    first = run(pipeline, ledger, tmp_path).unit("load")
    snap = latest(ledger, "snap", "load", DAY, tmp_path / "snaps")
    assert snap is not None
    import pyarrow.parquet as pq

    tampered = pq.read_table(snap.path).to_pylist()
    tampered[0]["amount"] = 11
    pq.write_table(pa.Table.from_pylist(tampered), snap.path)
    with pytest.raises(SnapshotError, match="changed on disk"):
        snap.read()
    again = Executor(pipeline, ledger, sleep=lambda _s: None,
                     snapshot_root=str(tmp_path / "snaps"),
                     reruns={first.uow_id: first.total_attempts}).run(DAY).unit("load")
    assert again.outcome == "failed-permanent" and "changed on disk" in (again.error or "")
    assert destination_rows(tmp_path) == [(1, 10), (2, 20)]  # the stored output stays


def test_snapshot_must_be_callable() -> None:
    from twice import PipelineError

    pipeline = Pipeline("p", schedule=SCHEDULE)
    with pytest.raises(PipelineError, match="snapshot must be callable"):
        pipeline.task(name="t", snapshot="table")(lambda ctx: None)


def test_the_snapshot_travels_to_a_child_process(tmp_path: Path, ledger: Ledger) -> None:
    """isolation="process" pickles the context: the child reads the same verified file."""
    import pickle

    source = Source()
    pipeline, _ = build(tmp_path, source)
    run(pipeline, ledger, tmp_path)
    snap = latest(ledger, "snap", "load", DAY, tmp_path / "snaps")
    ctx = pipeline.context("load", DAY, snapshot=snap)
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy.snapshot == snap
    assert copy.snapshot.read().to_pylist() == snap.read().to_pylist()


def _take_in_child(args: tuple[str, str, str]) -> tuple[int, str]:
    """A separate process taking the first snapshot of the same unit."""
    from twice.engine import snapshots

    ledger_url, root, barrier_dir = args
    pipeline, _ = build(Path(root), Source())
    Path(barrier_dir, f"ready-{__import__('os').getpid()}").touch()
    while len(list(Path(barrier_dir).iterdir())) < 2:  # start together
        pass
    with Ledger.open(ledger_url) as child_ledger:
        view = snapshots.ensure(child_ledger, pipeline.get_task("load"), "snap", DAY,
                                root=str(Path(root) / "snaps"))
        return view.rows, view.checksum


def test_racing_processes_take_one_snapshot_identity(tmp_path: Path, ledger: Ledger) -> None:
    """Two processes that take the first snapshot at once agree on its rows, and the unit's
    identity is the same as if one had taken it (content, not version count, names it)."""
    import multiprocessing

    from twice.engine.executor import identify_unit
    from twice.engine.snapshots import input_version_suffix

    pipeline, _ = build(tmp_path, Source())
    before = identify_unit(pipeline, ledger, "load", DAY)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        taken = pool.map(_take_in_child, [(url, str(tmp_path), str(barrier))] * 2)
    assert taken[0] == taken[1]
    assert input_version_suffix(ledger, "snap", "load", DAY) == ""
    assert identify_unit(pipeline, ledger, "load", DAY).uow_id == before.uow_id
    assert Executor(pipeline, ledger, sleep=lambda _s: None,
                    snapshot_root=str(tmp_path / "snaps")).run(DAY).ok


PIPELINE_FILE = '''
import json
from pathlib import Path

import pyarrow as pa

from twice import Pipeline, Schedule

ROOT = Path(__file__).parent
pipeline = Pipeline("snapcli", schedule=Schedule.daily("UTC"))


def read_source(interval):
    rows = json.loads((ROOT / "source.json").read_text())
    return pa.Table.from_pylist([dict(r, day=interval.start.date()) for r in rows])


@pipeline.task(destination=f"duckdb://{ROOT / 'wh.duckdb'}?partition_column=day#out",
               write="replace", snapshot=read_source, safe_repeat=True)
def load(ctx):
    return ctx.snapshot.read()
'''


@pytest.mark.parametrize("command", ["run", "backfill"])
def test_cli_reads_the_source_again_only_with_refresh_snapshots(tmp_path: Path,
                                                                command: str) -> None:
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "pipe.py").write_text(PIPELINE_FILE)
    source = tmp_path / "source.json"
    source.write_text(json.dumps([{"id": 1, "amount": 10}]))
    env = {**os.environ, "TWICE_SNAPSHOT_ROOT": str(tmp_path / "snaps")}
    span = (["--interval", "2026-11-02"] if command == "run"
            else ["--start", "2026-11-02", "--end", "2026-11-03"])

    def twice(*extra: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "twice", command, str(tmp_path / "pipe.py"), *span,
             "--ledger", f"sqlite:///{tmp_path / 'l.db'}", "--deadline", "none", *extra],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    twice()
    assert destination_rows(tmp_path) == [(1, 10)]
    source.write_text(json.dumps([{"id": 1, "amount": 99}]))  # history rewritten
    twice()
    assert destination_rows(tmp_path) == [(1, 10)]  # not asked: the stored snapshot stands
    twice("--refresh-snapshots")
    assert destination_rows(tmp_path) == [(1, 99)]  # asked: a new input version ran
