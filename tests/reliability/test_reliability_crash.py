"""Crash consistency: a writer process is SIGKILLed before, between and after the delete, the
insert, the ledger commit, and inside the Parquet commit, at named kill points and at random
times. After every kill each partition holds exactly the old or the new version (rows and
fingerprint compared with both), the ledger claims success only for partitions that hold the
new version, and a rerun converges to the state of a clean run.

The kill points are wrappers the child installs around methods that already exist (the
destinations' ``_after_delete`` / ``_before_swap`` / ``_between_renames`` seams, the engines'
``_insert_arrow``, ``parquet._exchange``, ``Ledger.finish_attempt``), see ``crash_writer``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import crash_writer as cw
from tests.reliability.conftest import record, scale
from twice.destinations import open_destination
from twice.destinations.fingerprint import Fingerprint, fingerprint
from twice.ledger import Ledger

CHILD = Path(cw.__file__)
ROOT = CHILD.parents[2]
SUITE = "crash consistency"
WORKERS = 3


@dataclass(frozen=True)
class Trial:
    point: str  # a kill point, or "random" (SIGKILL after a random delay)
    hit: int = 1  # which occurrence of the point (1 = first day's write)
    fallback: bool = False  # Parquet: the two-rename commit instead of renameat2
    delay: float = 0.0
    other_holder: bool = False  # rerun under another worker after the lease expired


class Target:
    """Fresh destinations and ledgers of one engine, and the clean-run reference state."""

    def __init__(self, engine: str, tmp: Path, pg_url: str | None) -> None:
        self.engine, self.tmp, self.pg_url = engine, tmp, pg_url
        self.clean_old: dict[str, Fingerprint] = {}
        self.clean_new: dict[str, Fingerprint] = {}

    def fresh(self) -> tuple[str, str]:
        """A new (destination spec, ledger URL) pair nobody else uses."""
        name = f"t_{uuid.uuid4().hex[:10]}"
        query = "?partition_column=day"
        folder = self.tmp / name
        folder.mkdir()
        ledger = f"sqlite:///{folder / 'ledger.db'}"
        if self.engine == "sqlite":
            return f"sqlite://{folder}/w.db{query}#{name}", ledger
        if self.engine == "duckdb":
            return f"duckdb://{folder}/w.duckdb{query}#{name}", ledger
        if self.engine == "postgresql":
            assert self.pg_url is not None
            return f"{self.pg_url}{query}#public.{name}", ledger
        return f"parquet://{folder}/ds{query}", ledger

    def reference(self) -> None:
        """Clean runs, no faults: the fingerprints of the old and of the new version."""
        spec, ledger = self.fresh()
        assert cw.run(spec, ledger, "old").ok
        self.clean_old = fingerprints(spec)
        assert cw.run(spec, ledger, "new").ok
        self.clean_new = fingerprints(spec)
        assert set(self.clean_old) == set(self.clean_new) == set(labels())
        assert all(self.clean_old[d] != self.clean_new[d] for d in labels())


def labels() -> list[str]:
    return [cw.day(i).isoformat() for i in range(cw.DAYS)]


def fingerprints(spec: str) -> dict[str, Fingerprint]:
    with open_destination(spec) as dest:
        return {cw.day(i).isoformat(): fingerprint(dest, cw.day(i), ["id", "amount", "note"])
                for i in range(cw.DAYS)}


def partition_rows(spec: str) -> dict[str, list[str]]:
    with open_destination(spec) as dest:
        return {cw.day(i).isoformat(): cw._canonical(dest.read_partition(cw.day(i)).to_pylist())
                for i in range(cw.DAYS)}


def expected(version: str) -> dict[str, list[str]]:
    return {cw.day(i).isoformat(): cw._canonical(cw.rows_for(version, cw.day(i)))
            for i in range(cw.DAYS)}


def leftovers(spec: str) -> list[str]:
    if not spec.startswith("parquet:"):
        return []
    root = Path(spec.removeprefix("parquet://").split("?")[0])
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".twice-"))


class Zygote:
    """A pre-imported ``crash_writer --zygote`` process forking writers on request."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(CHILD), "--zygote"], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )
        self._lock = threading.Lock()

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
        if not answer:
            pytest.fail("the crash-writer zygote died")
        reply: dict[str, Any] = json.loads(answer)
        return reply

    def start(self, argv: list[str], out: Path) -> int:
        return int(self._ask({"argv": argv, "out": str(out)})["pid"])

    def wait(self, pid: int) -> int:
        return int(self._ask({"wait": pid})["code"])

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


class Lines:
    """The lines a writer prints to its output file, read as they appear."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seen = 0

    def next(self, timeout: float) -> str:
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            lines = self._path.read_text().splitlines(keepends=True) if self._path.exists() else []
            if len(lines) > self._seen and lines[self._seen].endswith("\n"):
                self._seen += 1
                return lines[self._seen - 1].strip()
            time.sleep(0.005)
        return "<timeout>"

    def rest(self) -> str:
        return self._path.read_text() if self._path.exists() else ""


def writer_args(spec: str, ledger: str, trial: Trial) -> list[str]:
    args = ["--dest", spec, "--ledger", ledger, "--version", "new",
            "--point", "none" if trial.point == "random" else trial.point,
            "--hit", str(trial.hit), "--lease-ttl", "1.0" if trial.other_holder else "30"]
    return [*args, "--fallback"] if trial.fallback else args


def kill_writer(zygote: Zygote, spec: str, ledger: str, trial: Trial, out: Path) -> str:
    """Start a writer, SIGKILL it at the trial's point; return what it last said."""
    pid = zygote.start(writer_args(spec, ledger, trial), out)
    lines = Lines(out)
    said = ""
    try:
        wanted = "ready" if trial.point == "random" else f"at:{trial.point}"
        said = lines.next(60)
        if said == "ready" and wanted != "ready":
            said = lines.next(60)
        if said == wanted and trial.point == "random":
            time.sleep(trial.delay)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        code = zygote.wait(pid)
    if said != wanted:
        pytest.fail(f"writer did not reach {wanted}: said {said!r}, exit {code}: {lines.rest()}")
    if code == -signal.SIGKILL:
        return said
    rest = lines.rest()
    assert trial.point == "random", f"writer ended by itself ({code}) at a kill point: {rest}"
    assert code == 0 and "done succeeded" in rest, rest  # it finished before the kill
    return "finished"


def check_after_kill(target: Target, spec: str, ledger_url: str) -> dict[str, int]:
    """Old or new per partition (rows and fingerprint); success claimed only for new ones."""
    old, new = expected("old"), expected("new")
    rows, prints = partition_rows(spec), fingerprints(spec)
    figures = {"rows_compared": 0, "mismatches": 0, "partitions_old": 0, "partitions_new": 0}
    pipeline = cw.build_pipeline(spec, "new")
    with Ledger.open(ledger_url) as ledger:
        for offset, label in enumerate(labels()):
            figures["rows_compared"] += len(rows[label])
            is_new = rows[label] == new[label]
            is_old = rows[label] == old[label]
            fp = prints[label]
            if not (is_new and fp == target.clean_new[label]) and not (
                is_old and fp == target.clean_old[label]
            ):
                figures["mismatches"] += 1
                pytest.fail(f"{label}: neither the old nor the new version ({fp})")
            figures["partitions_new" if is_new else "partitions_old"] += 1
            uow = pipeline.unit_of_work("write", cw.intervals()[offset]).uow_id
            claimed = [a.number for a in ledger.attempts(uow) if a.outcome == "succeeded"]
            if claimed and not is_new:
                figures["mismatches"] += 1
                pytest.fail(f"{label}: ledger claims attempt {claimed} succeeded, partition old")
    return figures


def rerun_and_converge(target: Target, spec: str, ledger_url: str, trial: Trial) -> int:
    """Rerun (same worker name, or another one once the lease expired); compare with clean."""
    holder = cw.HOLDER
    if trial.other_holder:
        time.sleep(1.1)  # the killed writer's 1 s lease must expire before a takeover
        holder = "rerun-worker"
    result = cw.run(spec, ledger_url, "new", holder=holder)
    assert result.ok, [(u.outcome, u.reason) for u in result.units]
    assert partition_rows(spec) == expected("new")
    assert fingerprints(spec) == target.clean_new
    assert leftovers(spec) == []
    pipeline = cw.build_pipeline(spec, "new")
    with Ledger.open(ledger_url) as ledger:
        for interval in cw.intervals():
            uow = pipeline.unit_of_work("write", interval).uow_id
            attempts = ledger.attempts(uow)
            assert attempts[-1].outcome == "succeeded"
            assert not [a for a in attempts if a.outcome in ("running", "unknown")]
    return sum(len(v) for v in expected("new").values())


def one_trial(target: Target, zygotes: queue.Queue[Zygote], trial: Trial) -> dict[str, int]:
    spec, ledger_url = target.fresh()
    assert cw.run(spec, ledger_url, "old").ok
    zygote = zygotes.get()
    try:
        said = kill_writer(zygote, spec, ledger_url, trial, target.tmp / f"{uuid.uuid4().hex}.out")
    finally:
        zygotes.put(zygote)
    figures = check_after_kill(target, spec, ledger_url)
    figures["rows_compared"] += rerun_and_converge(target, spec, ledger_url, trial)
    figures["trials"] = 1
    figures["faults"] = 1 if said != "finished" else 0
    figures["kills_at_points"] = 1 if trial.point != "random" else 0
    return figures


def trials_for(engine: str, rng: random.Random, run_seconds: float) -> list[Trial]:
    points = cw.PARQUET_POINTS if engine == "parquet" else cw.SQL_POINTS
    trials: list[Trial] = []
    for _ in range(scale()):
        for point in points:
            hit = rng.randint(1, cw.DAYS)
            if point == "between-renames":
                trials.append(Trial(point, hit, fallback=True))
            elif point == "before-swap" and engine == "parquet":
                trials.append(Trial(point, hit))
                trials.append(Trial(point, rng.randint(1, cw.DAYS), fallback=True))
            else:
                trials.append(Trial(point, hit))
        for n in range(3):
            trials.append(Trial("random", delay=rng.uniform(0, run_seconds),
                                other_holder=n % 2 == 1))
    return trials


def run_parallel(fn: Callable[[Trial], dict[str, int]], trials: list[Trial]) -> dict[str, int]:
    totals: dict[str, int] = {}
    with ThreadPoolExecutor(WORKERS) as pool:
        for figures in pool.map(fn, trials):
            for key, value in figures.items():
                totals[key] = totals.get(key, 0) + value
    return totals


def measure_run_seconds(target: Target, zygote: Zygote) -> float:
    """Wall time of the writer's work after 'ready' in a clean run (bounds the random kills)."""
    spec, ledger_url = target.fresh()
    assert cw.run(spec, ledger_url, "old").ok
    out = target.tmp / "measure.out"
    pid = zygote.start(["--dest", spec, "--ledger", ledger_url, "--version", "new"], out)
    lines = Lines(out)
    assert lines.next(60) == "ready"
    started = time.monotonic()
    assert lines.next(120).startswith("done succeeded"), lines.rest()
    elapsed = time.monotonic() - started
    assert zygote.wait(pid) == 0
    return max(0.05, elapsed)


@pytest.fixture(scope="module")
def zygotes() -> Iterator[queue.Queue[Zygote]]:
    started = [Zygote() for _ in range(WORKERS)]
    pool: queue.Queue[Zygote] = queue.Queue()
    for zygote in started:
        pool.put(zygote)
    yield pool
    for zygote in started:
        zygote.close()


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "parquet"])
def test_kill_nine_keeps_old_or_new_and_rerun_converges(
    engine: str, tmp_path: Path, zygotes: queue.Queue[Zygote]
) -> None:
    _crash_suite(engine, tmp_path, None, zygotes)


@pytest.mark.postgres
def test_kill_nine_postgresql(
    tmp_path: Path, postgres_url: str, zygotes: queue.Queue[Zygote]
) -> None:
    _crash_suite("postgresql", tmp_path, postgres_url, zygotes)


def _crash_suite(
    engine: str, tmp_path: Path, pg_url: str | None, zygotes: queue.Queue[Zygote]
) -> None:
    rng = random.Random(f"crash-{engine}-{os.environ.get('TWICE_RELIABILITY_SEED', '7')}")
    target = Target(engine, tmp_path, pg_url)
    target.reference()
    zygote = zygotes.get()
    try:
        run_seconds = measure_run_seconds(target, zygote)
    finally:
        zygotes.put(zygote)
    trials = trials_for(engine, rng, run_seconds)
    totals = run_parallel(lambda trial: one_trial(target, zygotes, trial), trials)
    record(f"{SUITE} ({engine})", **totals)
    assert totals["mismatches"] == 0
    assert totals["trials"] == len(trials)
    # the named points really interrupted writes: some partitions were left old, some new
    assert totals["partitions_old"] > 0 and totals["partitions_new"] > 0
