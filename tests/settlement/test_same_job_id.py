"""``safe_repeat="same-job-id"``: a side effect whose receiver deduplicates by ``ctx.job_id``.

Issue 36, scenario 5: a notify task killed mid-attempt stayed unknown until a person ran
``twice resolve``, so a month backfill under SIGKILL never finished without an operator. A task
that declares its receiver deduplicates by the job id (an API's Idempotency-Key, BigQuery's
client-chosen job id) is settled by sending again under the SAME job id; a deliberate rerun
still takes a new generation (a new id).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.executor.helpers import ManualClock, day, outcomes
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, PipelineError, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.errors import OutcomeUnknownError
from twice.ledger import Ledger

POLICY = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter="none")


class Receiver:
    """Accepts each job id once, as an API with an Idempotency-Key does; keeps every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.accepted: Counter[str] = Counter()

    def send(self, job_id: str) -> None:
        self.calls.append(job_id)
        if job_id not in self.accepted:
            self.accepted[job_id] += 1


def notify_pipeline(receiver: Receiver, lose_first: bool, safe_repeat: object) -> Pipeline:
    pipeline = Pipeline("alerts", schedule=Schedule.daily("UTC"))
    lost: list[str] = []

    @pipeline.task(name="notify", safe_repeat=safe_repeat, retry=POLICY, timeout=30)
    def notify(ctx: TaskContext) -> None:
        receiver.send(ctx.job_id)
        if lose_first and not lost:
            lost.append(ctx.job_id)
            raise OutcomeUnknownError("the receiver's answer was lost")

    return pipeline


def test_an_unknown_send_is_settled_by_sending_again_under_the_same_job_id(
    tmp_path: Path,
) -> None:
    receiver = Receiver()
    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    pipeline = notify_pipeline(receiver, lose_first=True, safe_repeat="same-job-id")
    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())

    notify = result.unit("notify")
    assert result.ok, notify.reason
    assert outcomes(ledger, notify.uow_id) == ["failed-transient", "succeeded"]
    assert len(receiver.calls) == 2 and len(set(receiver.calls)) == 1  # same id twice
    assert list(receiver.accepted.values()) == [1]  # accepted once
    assert not ledger.resolutions(notify.uow_id)  # no operator


def test_without_the_declaration_the_unknown_send_waits_for_an_operator(tmp_path: Path) -> None:
    """The control: a plain side effect (safe_repeat=False) is not sent again."""
    receiver = Receiver()
    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    pipeline = notify_pipeline(receiver, lose_first=True, safe_repeat=False)
    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())
    assert result.unit("notify").outcome == "unknown-needs-reconcile"
    assert len(receiver.calls) == 1


def test_a_deliberate_rerun_takes_a_new_job_id(tmp_path: Path) -> None:
    """--force is a new generation: a new job id, which the receiver accepts as a new effect
    (the rerun was asked for); the earlier id is never sent again."""
    receiver = Receiver()
    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    pipeline = notify_pipeline(receiver, lose_first=False, safe_repeat="same-job-id")
    assert Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).ok
    clock.advance(60)
    rerun = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                     force=["notify"]).run(day()).unit("notify")
    assert rerun.outcome == "succeeded"
    assert len(receiver.calls) == 2 and len(set(receiver.calls)) == 2  # a new job id
    assert [a.generation for a in ledger.attempts(rerun.uow_id)] == [1, 2]


@pytest.mark.parametrize("value", ["yes", "same_job_id", 1, None])
def test_other_values_are_refused_naming_the_field(value: object) -> None:
    pipeline = Pipeline("alerts", schedule=Schedule.daily("UTC"))
    with pytest.raises(PipelineError, match="safe_repeat must be True, False or 'same-job-id'"):
        pipeline.task(name="notify", safe_repeat=value)(lambda ctx: None)


# -- the chaos month: SIGKILL every 1.5-4 s, restarted until it finishes -------------------------

CHAOS_PIPELINE = textwrap.dedent('''
    """A month of four owned SQLite tables and a notify whose receiver dedups by job id."""
    import os
    import sqlite3
    import time

    import pyarrow as pa

    from twice.core.policy import RetryPolicy
    from twice.define.pipeline import Pipeline
    from twice.define.schedule import Schedule
    from twice.destinations import open_destination

    WORK = os.environ["CHAOS_WORK"]
    WH = f"sqlite:///{WORK}/wh.db?partition_column=day#"
    RETRY = RetryPolicy(max_attempts=5, initial_delay=0.0, jitter="none")
    pipeline = Pipeline("chaos", schedule=Schedule.daily("UTC"))


    def source(day):
        return [{"day": day, "id": n, "value": (day.toordinal() * 7 + n) % 97}
                for n in range(1, 4 + day.day % 5)]


    def read(table, ctx):
        with open_destination(WH + table) as dest:
            return dest.read_partition(ctx.interval).to_pylist()


    @pipeline.task(destination=WH + "raw", write="replace", safe_repeat=True, retry=RETRY,
                   timeout=60)
    def raw(ctx):
        time.sleep(0.03)
        return pa.Table.from_pylist(source(ctx.interval.start.date()))


    @pipeline.task(depends_on=["raw"], destination=WH + "doubled", write="replace",
                   safe_repeat=True, retry=RETRY, timeout=60)
    def doubled(ctx):
        time.sleep(0.03)
        return pa.Table.from_pylist([{**r, "value": r["value"] * 2} for r in read("raw", ctx)])


    @pipeline.task(depends_on=["raw"], destination=WH + "odd", write="replace",
                   safe_repeat=True, retry=RETRY, timeout=60)
    def odd(ctx):
        time.sleep(0.03)
        rows = [r for r in read("raw", ctx) if r["value"] % 2]
        return pa.Table.from_pylist(rows, schema=pa.schema(
            [("day", pa.date32()), ("id", pa.int64()), ("value", pa.int64())]))


    @pipeline.task(depends_on=["doubled", "odd"], destination=WH + "daily", write="replace",
                   safe_repeat=True, retry=RETRY, timeout=60)
    def daily(ctx):
        time.sleep(0.03)
        total = sum(r["value"] for r in read("doubled", ctx)) + len(read("odd", ctx))
        return pa.table({"day": [ctx.interval.start.date()], "total": [total]})


    @pipeline.task(depends_on=["daily"], safe_repeat="same-job-id", retry=RETRY, timeout=60)
    def notify(ctx):
        con = sqlite3.connect(f"{WORK}/receiver.db", timeout=60)
        with con:
            con.execute("INSERT INTO calls VALUES (?, ?)", (ctx.job_id, ctx.interval.label))
            con.execute("INSERT OR IGNORE INTO accepted VALUES (?, ?)",
                        (ctx.job_id, ctx.interval.label))
        con.close()
        time.sleep(0.05)  # a kill here: delivered, never acknowledged
''')


def _expected(day_value: object) -> tuple[list[tuple[int, int]], int]:
    """The month's rows, computed here independently of the pipeline: raw (id, value) pairs
    and the daily total."""
    import datetime as dt

    assert isinstance(day_value, dt.date)
    raw = [(n, (day_value.toordinal() * 7 + n) % 97) for n in range(1, 4 + day_value.day % 5)]
    total = sum(v * 2 for _, v in raw) + sum(1 for _, v in raw if v % 2)
    return raw, total


def _progress(work: Path) -> int:
    """Events the ledger has recorded so far (0 before it exists)."""
    path = work / "ledger.db"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=10) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM twice_events").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_a_month_backfill_under_sigkill_finishes_with_no_operator(tmp_path: Path) -> None:
    import datetime as dt

    (tmp_path / "pipeline.py").write_text(CHAOS_PIPELINE)
    receiver = sqlite3.connect(tmp_path / "receiver.db")
    with receiver:
        receiver.execute("CREATE TABLE calls (job_id TEXT, day TEXT)")
        receiver.execute("CREATE TABLE accepted (job_id TEXT PRIMARY KEY, day TEXT)")
    env = {**os.environ, "CHAOS_WORK": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "twice", "backfill", str(tmp_path / "pipeline.py"),
               "--start", "2026-10-01", "--end", "2026-10-31",  # 30 days, the end excluded
               "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}", "--deadline", "none",
               "--lease-ttl", "5"]
    rng = random.Random(36)
    kills, last, stretch, seen = 0, None, 1.0, _progress(tmp_path)
    for _ in range(60):
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = child.communicate(timeout=rng.uniform(1.5, 4.0) * stretch)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.communicate()
            kills += 1
            # a loaded machine (CI's parallel workers) may not even start the command in the
            # window: a kill that left no new record stretches the next window, so the test
            # measures convergence under SIGKILL, not the machine's speed
            now = _progress(tmp_path)
            stretch = 1.0 if now > seen else min(stretch * 1.5, 8.0)
            seen = max(seen, now)
            continue
        last = (child.returncode, out)
        break
    assert last is not None, "the backfill never finished in 60 restarts"
    assert kills >= 2, f"only {kills} kill(s) landed: the month ran too fast to test"
    code, out = last
    assert code == 0, out
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    assert not any(ledger.resolutions(u.uow_id) for u in ledger.units())  # no operator step
    # each day's effect accepted once by the receiver, under one job id
    with receiver:
        accepted = receiver.execute("SELECT day, COUNT(*) FROM accepted GROUP BY day").fetchall()
        calls = receiver.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    assert len(accepted) == 30 and all(count == 1 for _, count in accepted), accepted
    assert calls >= 30
    # every partition complete, against rows computed independently
    wh = sqlite3.connect(tmp_path / "wh.db")
    for offset in range(30):
        day_value = dt.date(2026, 10, 1) + dt.timedelta(days=offset)
        raw, total = _expected(day_value)
        text = day_value.isoformat()
        got = sorted(wh.execute("SELECT id, value FROM raw WHERE day = ?", (text,)).fetchall())
        assert got == raw, (text, got)
        daily = wh.execute("SELECT total FROM daily WHERE day = ?", (text,)).fetchall()
        assert daily == [(total,)], (text, daily)
