"""Lifecycle faults: the story pipeline (source files -> extract -> transform -> notify, see
``tests/lifecycle/story.py``) rerun, backfilled and driven by workers while real processes are
SIGKILLed, SIGSTOPped past their lease, or lose the ledger right after their write; on SQLite,
DuckDB, Parquet and PostgreSQL (PostgreSQL trials keep their ledger in PostgreSQL too). The
children are forked by ``lifecycle_child.py`` (a fork server: a real process in milliseconds).

Fault points (seeded random trials, ``TWICE_RELIABILITY_TRIALS`` times as many; consecutive
trials take consecutive fault points, so the CI-size run covers each of them):

1. ``rerun kill``: after a clean run a day's source changes (or a ``--force`` backfill), a child
   runs the rerun (``Executor.run``, ``run_backfill`` or a ``Worker``) and is SIGKILLed at a
   random moment, inside a write or just after it; a fresh holder finishes (run, backfill or
   worker) after the lease expired.
2. ``kill no reconcile``: the first run of the owned-write tasks (no ``reconcile=``) is killed
   before the write, inside it, after it before the ledger records it, or at a random moment;
   the next run settles every unit from the destination's commit record.
3. ``zombie``: a child is SIGSTOPped inside its attempt (before its write, or after it before
   twice recorded it), its lease expires and another holder runs a newer version of the day or
   takes the same unit over; after SIGCONT a write not yet made is fenced (nothing written,
   ``FencedWriteError`` recorded) and a write made before the pause is not recorded as the
   partition's latest version.
4. ``ledger failure``: ``Ledger.finish_attempt`` of a task's successful attempt raises
   ``OperationalError`` before recording it, after recording it, or the process is killed
   there; the next run settles it from the commit record.
5. ``backfill after run``: run, then backfills with unchanged inputs, forced backfills,
   another run and a worker: nothing executes again but what was forced, and ``notify`` (not
   ``safe_repeat``) is held.
6. ``source change``: random days change (new rows, the same rows in new bytes, back to an
   earlier version) between ``Executor.run``, ``run_backfill``, ``Worker`` and two worker
   processes racing: exactly the changed units execute, dependents only when their input rows
   changed.

After every trial: one more run and one more backfill execute nothing; ``scaled`` and ``raw``
are compared row by row with tables computed from the source files without twice; task
executions (``calls.log``) are compared with the count the scenario implies (from what the
faulted process committed: the commit records it left in the destinations); no attempt is left
``running`` or ``unknown``; ``notify`` ran exactly once per day; no child printed a traceback.
Two controls prove the checks bite (a zombie without fencing, a recovery blind to commit
records), and what the trials found is kept as deterministic tests at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.lifecycle.story import (
    DAYS,
    ENGINES,
    build,
    count_calls,
    default_rows,
    expected_scaled,
    notified,
    spec,
    table_rows,
    write_source,
)
from tests.reliability.conftest import record, scale
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.drivers.backfill import BackfillResult, run_backfill
from twice.drivers.worker import Worker, WorkerReport
from twice.engine.executor import Executor, RunResult
from twice.ledger import Ledger

CHILD = Path(__file__).with_name("lifecycle_child.py")
REPO = CHILD.parents[2]
SCHEDULE = Schedule.daily("UTC")
INTERVALS = [SCHEDULE.interval_for(day) for day in DAYS]
ALL = list(range(len(DAYS)))
TASKS = ("extract", "transform", "notify")
OWNED = {"extract": "raw", "transform": "scaled"}
TTL = 1.0  # the children's lease: a killed or paused holder's units free up after this
WORKERS = 3  # trials of one test run concurrently
SETTLED = {"succeeded", "held", "skipped"}  # what a unit may end as in a trial

# How long the children's operations take after "ready" (seconds, measured on the 2-core CI
# machine; a random kill lands uniformly in [0, span]; one that comes too late kills nothing
# and the trial counts no fault).
SPAN = {"sqlite": 0.6, "duckdb": 0.8, "parquet": 0.4, "postgresql": 0.8}

FAULTS = {
    "rerun-kill": "rerun kill",
    "kill-no-reconcile": "kill no reconcile",
    "zombie": "zombie",
    "ledger-failure": "ledger failure",
    "backfill-after-run": "backfill after run",
    "source-change": "source change",
}
TRIALS = {"rerun-kill": 4, "kill-no-reconcile": 4, "zombie": 3, "ledger-failure": 3,
          "backfill-after-run": 2, "source-change": 2}


# -- the fork server ------------------------------------------------------------------------


class Zygote:
    """``lifecycle_child.py --zygote``: forks a child per request (milliseconds, not the
    second a fresh interpreter takes to import PyArrow and the engines)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self._proc = subprocess.Popen(
            [sys.executable, str(CHILD), "--zygote"], cwd=REPO, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self._lock = threading.Lock()

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
        if not answer:
            pytest.fail("the lifecycle zygote died")
        reply: dict[str, Any] = json.loads(answer)
        return reply

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


class Child:
    """One forked child: its output lines, its exit, the signals the parent sends it."""

    def __init__(self, zygote: Zygote, request: dict[str, Any]) -> None:
        self.zygote = zygote
        self.holder: str = request["holder"]
        self.out, self.err = Path(request["out"]), Path(request["err"])
        self.pid = int(zygote.ask({"start": request})["pid"])
        self.code: int | None = None

    def lines(self) -> list[str]:
        text = self.out.read_text() if self.out.exists() else ""
        return [line for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def said(self, prefix: str) -> str | None:
        return next((line.strip() for line in self.lines() if line.startswith(prefix)), None)

    def poll(self) -> int | None:
        if self.code is None:
            code = self.zygote.ask({"poll": self.pid})["code"]
            if code is not None:
                assert code != "gone", f"child {self.pid} was reaped elsewhere"
                self.code = int(code)
        return self.code

    def wait_for(self, prefix: str, timeout: float = 60.0) -> str | None:
        """The first output line starting with ``prefix``; None if the child ended without."""
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            line = self.said(prefix)
            if line is not None:
                return line
            if self.poll() is not None:
                return self.said(prefix)
            time.sleep(0.005)
        raise AssertionError(f"child {self.holder} never said {prefix!r}: {self.text()}")

    def wait(self, timeout: float = 120.0) -> int:
        limit = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > limit:
                raise AssertionError(f"child {self.holder} did not end: {self.text()}")
            time.sleep(0.01)
        assert self.code is not None
        return self.code

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def stopped(self) -> bool:
        """Whether every thread of the child is stopped (SIGSTOP reached them all)."""
        with contextlib.suppress(OSError):
            states = [stat.read_text().rsplit(")", 1)[1].split()[0]
                      for stat in Path(f"/proc/{self.pid}/task").glob("*/stat")]
            return bool(states) and all(state == "T" for state in states)
        return False

    def done(self) -> list[dict[str, Any]]:
        line = self.said("done ")
        assert line is not None, f"child {self.holder} did not finish: {self.text()}"
        units: list[dict[str, Any]] = json.loads(line.removeprefix("done "))
        return units

    def stderr(self) -> str:
        return self.err.read_text() if self.err.exists() else ""

    def text(self) -> str:
        out = self.out.read_text() if self.out.exists() else ""
        return f"exit {self.code}; stdout: {out[-2000:]}; stderr: {self.stderr()[-4000:]}"

    def cleanup(self) -> None:
        if self.poll() is None:
            self.signal(signal.SIGKILL)
            self.signal(signal.SIGCONT)
            self.wait(30)


# -- one trial's world ----------------------------------------------------------------------


def day_of(label: str) -> str:
    return label[:10]


class Story:
    """A work folder (sources, destinations, ledger, logs) for one trial, and its books: the
    executions expected so far, the figures, the problems found."""

    def __init__(self, folder: Path, engine: str, pg: str | None, zygote: Zygote,
                 rng: random.Random, serial: int, label: str = "", rotation: int = 0) -> None:
        self.root, self.engine, self.pg, self.zygote, self.rng = folder, engine, pg, zygote, rng
        self.label = label  # how to find the trial again: its seed and number
        self._turn = serial + rotation  # see pick()
        folder.mkdir(parents=True)
        for day in DAYS:
            write_source(folder, day, default_rows(day))
        self.ledger_url = pg if engine == "postgresql" else f"sqlite:///{folder / 'ledger.db'}"
        assert self.ledger_url is not None
        self.ledger = Ledger.open(self.ledger_url)
        self.expected: Counter[str] = Counter()
        self.figures: Counter[str] = Counter(trials=1)
        self.problems: list[str] = []
        self.children: list[Child] = []
        self._bumps = itertools.count(100 * serial + 1)
        self._names = itertools.count(1)
        self._seen: dict[int, list[str]] = {}  # every version each day's source has had
        self.history: list[str] = []
        self.controls: list[str] = []  # passed to every child (see lifecycle_child)

    def pick(self, options: Sequence[str]) -> str:
        """The fault point of this trial: consecutive trials of a test take consecutive
        options (from a seeded start), so even the CI-size run covers every point."""
        return options[self._turn % len(options)]

    # -- the pipeline and its drivers -------------------------------------------------------

    def pipeline(self) -> Pipeline:
        return build(self.root, self.engine, self.pg)

    def run(self, days: Sequence[int] = ALL, holder: str = "parent") -> RunResult:
        self.history.append(f"run {list(days)} as {holder}")
        return Executor(self.pipeline(), self.ledger, holder=holder).run(
            [INTERVALS[d] for d in days])

    def backfill(self, days: Sequence[int] = ALL, *, force: bool = False,
                 tasks: list[str] | None = None, holder: str = "parent") -> BackfillResult:
        self.history.append(f"backfill {list(days)} force={force} tasks={tasks} as {holder}")
        return run_backfill(self.pipeline(), self.ledger, [INTERVALS[d] for d in days],
                            force=force, tasks=tasks, holder=holder)

    def worker(self, days: Sequence[int] = ALL, name: str = "worker") -> WorkerReport:
        self.history.append(f"worker {list(days)} as {name}")
        return Worker(self.pipeline(), self.ledger, [INTERVALS[d] for d in days], name=name,
                      poll=0.05).run()

    def drive(self, driver: str, days: Sequence[int] = ALL,
              holder: str = "parent") -> dict[tuple[str, str], str]:
        """Run ``days`` with ``driver`` (``run``, ``backfill`` or ``worker``) in this process;
        (task, day) -> how each unit ended (a backfill's skipped and a worker's done-elsewhere
        read as succeeded)."""
        if driver == "run":
            return outcomes_of(self.run(days, holder=holder).units)
        if driver == "backfill":
            found = outcomes_of(self.backfill(days, holder=holder).runs)
            return {k: "succeeded" if v == "skipped" else v for k, v in found.items()}
        report = self.worker(days, name=holder)
        return {(u.task, u.interval.start.date().isoformat()):
                u.outcome if u.settlement == "ran" else
                "succeeded" if u.settlement == "done-elsewhere" else str(u.settlement)
                for u in report.units}

    def child(self, op: str, *, days: Sequence[int] = ALL, fault: dict[str, Any] | None = None,
              tasks: list[str] | None = None, force: bool = False,
              barrier: Path | None = None, lease_ttl: float = TTL) -> Child:
        name = f"child-{next(self._names)}"
        self.history.append(f"{name}: {op} {list(days)} tasks={tasks} force={force} "
                            f"fault={fault}")
        request = {
            "root": str(self.root), "engine": self.engine, "pg": self.pg,
            "ledger": self.ledger_url, "op": op, "days": list(days), "tasks": tasks,
            "force": force, "holder": name, "lease_ttl": lease_ttl, "fault": fault,
            "barrier": None if barrier is None else str(barrier), "controls": self.controls,
            "out": str(self.root / f"{name}.out"), "err": str(self.root / f"{name}.err"),
        }
        child = Child(self.zygote, request)
        self.children.append(child)
        self.figures["processes"] += 1
        return child

    def kill_randomly(self, child: Child) -> bool:
        """SIGKILL ``child`` a random moment after it said ``ready``; True if it died of it."""
        if child.wait_for("ready") is None:
            return False
        delay = self.rng.uniform(0.0, SPAN[self.engine])
        self.history.append(f"SIGKILL after {delay:.3f}s")
        time.sleep(delay)
        child.signal(signal.SIGKILL)
        return child.wait() == -signal.SIGKILL

    # -- sources --------------------------------------------------------------------------

    def change(self, day: int, kind: str = "rows") -> bool:
        """Change ``day``'s source file; True if its rows changed (not only its bytes).

        ``rows``: rows never seen before; ``bytes``: the same rows in new bytes (the input
        version changes, extract's output does not); ``revert``: back to a version this day
        had before (its units succeeded then; the slots now hold newer output)."""
        path = self.root / "source" / f"{DAYS[day].isoformat()}.json"
        current = path.read_text()
        earlier = [text for text in self._seen.setdefault(day, [current]) if text != current]
        if kind == "revert" and not earlier:
            kind = "rows"
        self.history.append(f"source {DAYS[day]} changes: {kind}")
        if kind == "rows":
            write_source(self.root, DAYS[day], default_rows(DAYS[day], bump=next(self._bumps)))
        elif kind == "bytes":
            path.write_text(json.dumps(json.loads(current), sort_keys=True)
                            + " " * next(self._bumps))
        else:
            path.write_text(self.rng.choice(earlier))
        text = path.read_text()
        if text not in self._seen[day]:
            self._seen[day].append(text)
        return bool(json.loads(text) != json.loads(current))

    # -- evidence -------------------------------------------------------------------------

    def commits(self) -> set[tuple[str, str, str, int, int]]:
        """Every commit record in raw and scaled: (task, day, uow, generation, attempt)."""
        from twice.destinations import open_destination

        found = set()
        for task, table in OWNED.items():
            with open_destination(spec(self.engine, self.root, table, self.pg)) as dest:
                for r in dest.commit_records():
                    found.add((task, day_of(r.fence_key.split("/", 2)[2]), r.uow_id,
                               r.generation, r.attempt))
        return found

    def attempts_of(self, holder: str) -> list[tuple[str, str, str, int, int | None, str]]:
        """(task, day, uow, number, generation, outcome) of every attempt ``holder`` began."""
        found = []
        for unit in self.ledger.units(pipeline="lifecycle"):
            for a in self.ledger.attempts(unit.uow_id):
                if a.holder == holder:
                    found.append((unit.task, day_of(unit.interval.label), unit.uow_id,
                                  a.number, a.generation, a.outcome))
        return found

    def calls(self) -> Counter[str]:
        return Counter(count_calls(self.root))

    def expect(self, **executions: int) -> None:
        self.expected.update(executions)

    def problem(self, text: str) -> None:
        self.problems.append(f"{text} [engine {self.engine}, {self.label}: "
                             f"{'; '.join(self.history)}]")

    def check_calls(self, step: str) -> None:
        actual = self.calls()
        if +actual != +self.expected:
            self.problem(f"{step}: executions {dict(actual)}, expected {dict(self.expected)}")

    def check_units(self, step: str, outcomes: dict[tuple[str, str], str],
                    allowed: set[str] = SETTLED) -> None:
        bad = {k: v for k, v in outcomes.items() if v not in allowed}
        if bad:
            self.problem(f"{step}: units ended {bad}")

    def check_tables(self, step: str) -> None:
        """Row by row: scaled and raw against the tables computed from the sources."""
        want = {"scaled": expected_scaled(self.root), "raw": self._expected_raw()}
        for table, expected in want.items():
            actual = table_rows(spec(self.engine, self.root, table, self.pg))
            self.figures["rows_compared"] += max(len(actual), len(expected))
            differ = sum(((Counter(actual) - Counter(expected)) +
                          (Counter(expected) - Counter(actual))).values())
            if differ:
                self.figures["mismatches"] += differ
                self.problem(f"{step}: {table} differs in {differ} row(s): {actual} != "
                             f"{expected}")

    def _expected_raw(self) -> list[tuple[str, int, int]]:
        return sorted((d, i, a // 10) for d, i, a in expected_scaled(self.root))

    def finish(self) -> dict[str, int]:
        """The checks made after every trial; returns the trial's figures."""
        for child in self.children:
            child.cleanup()
            if "Traceback" in child.stderr() + child.text():
                self.figures["tracebacks"] += 1
                self.problem(f"{child.holder} printed a traceback: {child.stderr()[-3000:]}")
        # one more run and one more backfill must execute nothing: every unit is settled and
        # every partition holds what the ledger says it holds
        self.check_units("final run", self.drive("run", holder="final-run"))
        self.check_tables("final run")
        self.check_units("final backfill", self.drive("backfill", holder="final-backfill"))
        self.check_tables("final backfill")
        actual = self.calls()
        for task in TASKS:
            self.figures["executions"] += actual[task]
            self.figures["expected_executions"] += self.expected[task]
            self.figures["extra_executions"] += max(0, actual[task] - self.expected[task])
        self.check_calls("in all")
        days = sorted(line.split()[0] for line in notified(self.root))
        if days != [d.isoformat() for d in DAYS]:
            self.problem(f"notify ran for {days}, expected once per day")
        for unit in self.ledger.units(pipeline="lifecycle"):
            for a in self.ledger.attempts(unit.uow_id):
                if a.outcome in ("running", "unknown"):
                    self.figures["left_unknown"] += 1
                    self.problem(f"attempt {a.number} of {unit.uow_id} left {a.outcome}")
            self.figures["reconciled"] += sum(
                o.source.startswith("destination:") for o in self.ledger.observations(unit.uow_id))
        self.ledger.close()
        return dict(self.figures)


def outcomes_of(units: Sequence[Any]) -> dict[tuple[str, str], str]:
    """(task, day) -> outcome, from a RunResult's units, a BackfillResult's runs (their
    status) or a child's ``done`` list."""
    found = {}
    for u in units:
        if isinstance(u, dict):
            found[(u["task"], u["day"])] = u["outcome"]
        else:
            status = u.status if hasattr(u, "status") else u.outcome  # TaskRun / UnitResult
            found[(u.task, u.interval.start.date().isoformat())] = status
    return found


def clean_run(story: Story) -> None:
    result = story.run(holder="clean")
    story.expect(extract=3, transform=3, notify=3)
    story.check_units("clean run", outcomes_of(result.units), {"succeeded"})
    story.check_calls("clean run")


def child_calls(story: Story, bounds: dict[str, int]) -> Counter[str]:
    """What the faulted child executed; anything over ``bounds`` is an extra execution."""
    done = story.calls() - story.expected
    for task in TASKS:
        allowed = min(done[task], bounds.get(task, 0))
        if done[task] > allowed:
            story.problem(f"the child executed {task} {done[task]} time(s), at most "
                          f"{bounds.get(task, 0)} expected")
        story.expected[task] += allowed
    return done


def committed_days(before: set[tuple[str, str, str, int, int]],
                   after: set[tuple[str, str, str, int, int]], task: str) -> set[str]:
    return {day for t, day, *_ in after - before if t == task}


# -- 1. a rerun killed ----------------------------------------------------------------------


def rerun_kill(story: Story) -> None:
    """A clean run; a day's source changes (or a forced backfill); a child runs the rerun and
    is SIGKILLed; a fresh holder finishes. Re-executed in the recovery: exactly the units the
    rerun needed whose write the killed child did not commit."""
    rng = story.rng
    clean_run(story)
    forced = rng.random() < 0.35
    if forced:
        op, days = "backfill", sorted(rng.sample(ALL, rng.randint(1, 3)))
        tasks = rng.choice([None, ["extract"], ["transform"]])
        runs = [t for t in OWNED if tasks is None or t in tasks]
        point = rng.choice(["random", "in-write"] +
                           (["extract"] if "extract" in runs else []) +
                           (["transform", "transform_after"] if "transform" in runs else []))
        task = rng.choice(runs)
        hit = rng.randint(1, len(days))
    else:
        op, days, tasks = rng.choice(["run", "backfill", "worker"]), ALL, None
        changed = rng.choice(ALL)
        story.change(changed, "rows")
        point = story.pick(["random", "extract", "in-write", "transform", "transform_after"])
        task, hit = rng.choice(list(OWNED)), 1
    if point in ("transform", "transform_after", "extract"):
        task = point.split("_")[0]
    fault = {"kind": "random"} if point == "random" else {
        "kind": "kill", "point": point, "task": task if point == "in-write" else "", "hit": hit}
    before = story.commits()
    child = story.child(op, days=days, tasks=tasks, force=forced, fault=fault)
    killed = story.kill_randomly(child) if point == "random" else (
        child.wait() == -signal.SIGKILL)
    if point != "random" and not killed:
        story.problem(f"the child was not killed at {point}: {child.text()}")
    story.figures["faults"] += int(killed)
    after = story.commits()
    if forced:
        bounds = {t: len(days) for t in runs}
        child_calls(story, bounds)
        # each attempt the child began and did not commit is executed again; committed ones
        # are settled from their commit record
        lost = Counter(t for t, day, uow, number, generation, _o in story.attempts_of(
            child.holder) if not any(c[2:] == (uow, generation, number) for c in after))
        recovery_needs = {t: lost[t] for t in TASKS}
    else:
        child_calls(story, {"extract": 1, "transform": 1})
        day = DAYS[changed].isoformat()
        recovery_needs = {t: int(day not in committed_days(before, after, t)) for t in OWNED}
    time.sleep(TTL + 0.2)  # the killed child's leases expire
    driver = rng.choice(["run", "backfill", "worker"])
    story.check_units(f"recovery ({driver})", story.drive(driver, days, holder="recovery"))
    story.expect(**recovery_needs)
    story.check_calls("recovery")


# -- 2. killed without reconcile= -----------------------------------------------------------


def kill_no_reconcile(story: Story, point: str | None = None) -> None:
    """The first run of extract and transform (owned writes, no reconcile function) is killed;
    the next run settles every unit from the commit records: a unit whose record exists is not
    executed again, one without is executed once more, none is left unknown."""
    rng = story.rng
    point = point or story.pick(["extract", "in-write", "transform", "transform_after",
                                 "before-finish", "random"])
    task = rng.choice(list(OWNED))
    if point in ("extract", "transform", "transform_after"):
        task = point.split("_")[0]
    fault = {"kind": "random"} if point == "random" else {
        "kind": "kill", "point": point, "hit": rng.randint(1, 3),
        "task": task if point in ("in-write", "before-finish") else ""}
    child = story.child(rng.choice(["run", "worker"]), tasks=list(OWNED), fault=fault)
    killed = story.kill_randomly(child) if point == "random" else (
        child.wait() == -signal.SIGKILL)
    if point != "random" and not killed:
        story.problem(f"the child was not killed at {point}: {child.text()}")
    story.figures["faults"] += int(killed)
    after = story.commits()
    child_calls(story, {"extract": 3, "transform": 3})
    time.sleep(TTL + 0.2)
    driver = rng.choice(["run", "backfill", "worker"])
    story.check_units(f"recovery ({driver})", story.drive(driver, holder="recovery"),
                      {"succeeded"})
    story.expect(extract=3 - len(committed_days(set(), after, "extract")),
                 transform=3 - len(committed_days(set(), after, "transform")), notify=3)
    story.check_calls("recovery")


# -- 3. the zombie writer -------------------------------------------------------------------


# stop point -> (the child's fault, the task paused, whether its write had landed)
ZOMBIE_POINTS: dict[str, tuple[dict[str, str], str, bool]] = {
    "extract": ({"point": "extract"}, "extract", False),
    "transform": ({"point": "transform"}, "transform", False),
    "extract-written": ({"point": "before-finish", "task": "extract"}, "extract", True),
    "transform-written": ({"point": "transform_after"}, "transform", True),
}


def zombie(story: Story, point: str | None = None, takeover: bool | None = None) -> None:
    """SIGSTOP a child inside its attempt (before its write, or after it and before twice
    recorded it); its lease expires; another holder runs: either a NEWER version of the day
    (a clean run, the source changed, the zombie paused in that rerun, the source changes
    again) or the SAME unit (the zombie was the day's first run: a lease takeover). SIGCONT: a
    write not yet made is refused (FencedWriteError recorded, never 'succeeded'), a write made
    before the pause is never recorded as the partition's latest version; the tables hold the
    taker's rows and nothing runs again."""
    rng = story.rng
    point = point or story.pick(list(ZOMBIE_POINTS))
    takeover = rng.random() < 0.4 if takeover is None else takeover
    where, task, written = ZOMBIE_POINTS[point]
    changed = rng.choice(ALL)
    day = DAYS[changed].isoformat()
    fault = {"kind": "stop", "hit": 1, "delay": rng.uniform(0.0, 0.3), **where}
    if not takeover:
        clean_run(story)
        story.change(changed, "rows")
    before = story.commits()
    child = story.child("run", days=[changed] if takeover else ALL, fault=fault)
    try:
        if child.wait_for("paused") is None:
            story.problem(f"the child never paused at {point}: {child.text()}")
            return
        limit = time.monotonic() + 10
        while not child.stopped() and time.monotonic() < limit:
            time.sleep(0.005)
        child_calls(story, {"extract": 1, "transform": 1})
        mine = {t for t, d, *_ in story.commits() - before if d == day}
        if (task in mine) != written:
            story.problem(f"paused at {point}: the zombie's commits are {sorted(mine)}")
        time.sleep(TTL + 0.2)  # the zombie's lease expires
        if takeover:  # the same unit: what the zombie committed is settled, the rest runs
            story.expect(**{t: 3 - int(t in mine) for t in OWNED}, notify=3)
        else:
            story.change(changed, "rows")
            story.expect(extract=1, transform=1)
        driver = rng.choice(["run", "backfill", "worker"])
        story.check_units(f"taker ({driver})", story.drive(driver, holder="taker"))
        story.check_tables("before the zombie resumes")
        story.check_calls("taker")
    finally:
        child.signal(signal.SIGCONT)
    child.wait()
    story.figures["faults"] += 1
    story.check_calls("the zombie resumed")  # it executes nothing more
    zombie_units = outcomes_of(child.done())
    ended = zombie_units.get((task, day))
    allowed = {"succeeded", "leased-elsewhere"} if written else {"failed-permanent",
                                                                  "leased-elsewhere"}
    if ended not in allowed:
        story.problem(f"zombie's {task} ended {ended}, expected one of {sorted(allowed)}")
    fenced = [e for t, d, uow, number, _g, _o in story.attempts_of(child.holder)
              if (t, d) == (task, day) for e in story.ledger.errors(uow)
              if e.attempt == number and "FencedWriteError" in e.error_class]
    if not written and not fenced:
        story.problem(f"no FencedWriteError recorded for the zombie's {task}")
    story.figures["fenced"] += len(fenced)
    for (other, _d), outcome in zombie_units.items():
        if outcome not in SETTLED | {"failed-permanent", "blocked", "leased-elsewhere"}:
            story.problem(f"zombie's {other} ended {outcome}")


# -- 4. the ledger fails after the write ----------------------------------------------------


def ledger_failure(story: Story) -> None:
    """``finish_attempt`` of a successful write fails (before or after recording) or the
    process dies there; the next run settles the unit from the commit record. Every unit
    executes exactly once in all."""
    rng = story.rng
    kind, point = story.pick(["raise before-finish", "raise after-finish",
                              "kill before-finish"]).split()
    task, hit = rng.choice(list(OWNED)), rng.randint(1, 3)
    day = DAYS[hit - 1].isoformat()
    child = story.child(rng.choice(["run", "worker"]),
                        fault={"kind": kind, "point": point, "task": task, "hit": hit})
    code = child.wait()
    if kind == "kill":
        if code != -signal.SIGKILL:
            story.problem(f"the child was not killed at {point}: {child.text()}")
    else:
        if child.said(f"raised:{point}:{task}") is None:
            story.problem(f"the ledger failure was not injected: {child.text()}")
        seen = outcomes_of(child.done()).get((task, day))
        if seen != "unknown-needs-reconcile":
            story.problem(f"{task} {day} ended {seen} after the ledger failed, expected "
                          "unknown-needs-reconcile")
    story.figures["faults"] += 1
    child_calls(story, {"extract": 3, "transform": 3, "notify": 3})
    time.sleep(TTL + 0.2)
    driver = rng.choice(["run", "backfill", "worker"])
    story.check_units(f"recovery ({driver})", story.drive(driver, holder="recovery"),
                      {"succeeded"})
    story.expected = Counter(extract=3, transform=3, notify=3)  # once each, in all
    story.check_calls("recovery")
    if point == "before-finish":
        unit = Executor(story.pipeline(), story.ledger).unit_for(task, INTERVALS[hit - 1])
        sources = {o.source for o in story.ledger.observations(unit.uow_id)}
        if not any(s.startswith("destination:") for s in sources):
            story.problem(f"{task} {day} was not settled from the commit record: {sources}")


# -- 5. backfills after a run ---------------------------------------------------------------


def backfill_after_run(story: Story) -> None:
    """Run some days; backfill all: only the days not run execute. Backfill again, forced
    (random tasks and days), again, run, worker: only the forced owned-write tasks execute
    again; notify is never executed twice (held when forced)."""
    rng = story.rng
    first = sorted(rng.sample(ALL, rng.randint(1, 3)))
    if rng.random() < 0.5:
        story.run(first, holder="first")
    else:
        story.worker(first, name="first-worker")
    story.expect(extract=len(first), transform=len(first), notify=len(first))
    story.check_calls("first run")
    result = story.backfill(holder="backfill-1")
    rest = 3 - len(first)
    story.expect(extract=rest, transform=rest, notify=rest)
    story.check_calls("backfill after run")
    skipped = {k for k, v in outcomes_of(result.runs).items() if v == "skipped"}
    if skipped != {(t, DAYS[d].isoformat()) for t in TASKS for d in first}:
        story.problem(f"backfill after run skipped {sorted(skipped)}")
    result = story.backfill(holder="backfill-2")
    story.check_units("backfill again", outcomes_of(result.runs), {"skipped"})
    story.check_calls("backfill again")
    days = sorted(rng.sample(ALL, rng.randint(1, 3)))
    tasks = rng.choice([None, ["extract"], ["transform"], ["extract", "transform"], ["notify"]])
    result = story.backfill(days, force=True, tasks=tasks, holder="forced")
    forced = [t for t in TASKS if tasks is None or t in tasks]
    story.expect(**{t: len(days) for t in OWNED if t in forced})
    story.check_calls(f"forced backfill of {tasks}")
    outcomes = outcomes_of(result.runs)
    story.check_units("forced backfill", outcomes)
    if "notify" in forced:
        held = {d for (t, d), v in outcomes.items() if t == "notify" and v == "held"}
        if held != {DAYS[d].isoformat() for d in days}:
            story.problem(f"forced notify held for {sorted(held)} only")
    story.figures["faults"] += 2
    story.check_units("backfill after force", outcomes_of(story.backfill().runs), {"skipped"})
    story.check_calls("backfill after force")
    story.check_units("run after force", outcomes_of(story.run().units), {"succeeded"})
    report = story.worker(name="late-worker")
    if any(u.settlement == "ran" for u in report.units):
        story.problem(f"a late worker ran {[(u.task, u.outcome) for u in report.units]}")
    story.check_calls("worker after force")
    story.figures["faults"] += 3


# -- 6. sources change under runs and workers -----------------------------------------------


def source_change(story: Story) -> None:
    """Rounds of random source changes (new rows, new bytes for the same rows, back to an
    earlier version), each followed by a run, a worker, or two worker processes racing: the
    changed days' extract executes, transform only where the rows changed, nothing else
    (notify's repeat is held, or its earlier unit already succeeded)."""
    rng = story.rng
    if rng.random() < 0.5:
        clean_run(story)
    else:
        story.worker(name="first-worker")
        story.expect(extract=3, transform=3, notify=3)
        story.check_calls("first worker")
    drivers = ["run", "backfill", "worker"] + ([] if story.engine == "duckdb" else ["race"])
    for round_ in range(4):
        kinds = {d: rng.choice(["rows", "rows", "bytes", "revert"])
                 for d in rng.sample(ALL, rng.randint(0, 3))}
        changed = {d: story.change(d, kind) for d, kind in kinds.items()}
        story.figures["faults"] += len(changed)
        driver = rng.choice(drivers)
        if driver in ("run", "backfill"):
            outcomes = story.drive(driver, holder=f"{driver}-{round_}")
        elif driver == "worker":
            outcomes = outcomes_of([u.result for u in story.worker(name=f"w-{round_}").units
                                    if u.result is not None])
        else:
            outcomes = race(story, round_)
        story.check_units(f"round {round_} ({driver})", outcomes)
        story.expect(extract=len(changed), transform=sum(changed.values()))
        story.check_calls(f"round {round_} ({driver})")
        story.check_tables(f"round {round_}")


def race(story: Story, round_: int) -> dict[tuple[str, str], str]:
    """Two worker processes released together on the same ledger."""
    barrier = story.root / f"go-{round_}"
    # a long lease: live racers must never lose theirs to each other on a loaded machine
    racers = [story.child("worker", barrier=barrier, lease_ttl=30.0) for _ in range(2)]
    limit = time.monotonic() + 60
    while len(list(story.root.glob(f"go-{round_}.*"))) < len(racers):
        assert time.monotonic() < limit, [r.text() for r in racers]
        assert all(r.poll() is None for r in racers), [r.text() for r in racers]
        time.sleep(0.005)
    barrier.touch()
    outcomes: dict[tuple[str, str], str] = {}
    for racer in racers:
        if racer.wait() != 0:
            story.problem(f"racer {racer.holder} failed: {racer.text()}")
            continue
        for unit in racer.done():
            if unit["settlement"] == "ran":  # executions are counted in calls.log
                outcomes[(unit["task"], unit["day"])] = unit["outcome"]
    return outcomes


SCENARIOS: dict[str, Callable[[Story], None]] = {
    "rerun-kill": rerun_kill,
    "kill-no-reconcile": kill_no_reconcile,
    "zombie": zombie,
    "ledger-failure": ledger_failure,
    "backfill-after-run": backfill_after_run,
    "source-change": source_change,
}


# -- the tests ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    started = Zygote()
    yield started
    started.close()


class Databases:
    """PostgreSQL trials: one fresh database each (the story's tables have fixed names), made
    next to the test's own database and dropped with it."""

    def __init__(self, base: str | None) -> None:
        self.base = base
        self.made: list[str] = []
        self._lock = threading.Lock()

    def fresh(self) -> str | None:
        if self.base is None:
            return None
        import psycopg

        prefix, _, name = self.base.rpartition("/")
        with self._lock:
            made = f"{name}_{len(self.made)}"
            self.made.append(made)
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{made}"')
        return f"{prefix}/{made}"

    def drop(self) -> None:
        if self.base is None:
            return
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            for made in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{made}" WITH (FORCE)')


def engine_params() -> list[Any]:
    return [pytest.param(e, marks=[pytest.mark.postgres] if e == "postgresql" else [])
            for e in ENGINES]


@pytest.mark.parametrize("engine", engine_params())
@pytest.mark.parametrize("fault", list(FAULTS))
def test_lifecycle_faults(fault: str, engine: str, tmp_path: Path, zygote: Zygote,
                          request: pytest.FixtureRequest) -> None:
    base = str(request.getfixturevalue("postgres_url")) if engine == "postgresql" else None
    databases = Databases(base)
    seed = os.environ.get("TWICE_RELIABILITY_SEED", "7")
    count = TRIALS[fault] * scale()
    rotation = random.Random(f"lifecycle-{fault}-{engine}-{seed}").randrange(720)

    def trial(n: int) -> tuple[dict[str, int], list[str]]:
        rng = random.Random(f"lifecycle-{fault}-{engine}-{seed}-{n}")
        story = Story(tmp_path / f"trial{n}", engine, databases.fresh(), zygote, rng, n,
                      f"TWICE_RELIABILITY_SEED={seed} trial {n}", rotation)
        try:
            SCENARIOS[fault](story)
        finally:
            figures = story.finish()
        return figures, story.problems

    totals: Counter[str] = Counter()
    problems: list[str] = []
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            for figures, found in pool.map(trial, range(count)):
                totals.update(figures)
                problems += found
    finally:
        databases.drop()
    for column in ("faults", "rows_compared", "mismatches", "executions", "expected_executions",
                   "extra_executions", "left_unknown", "tracebacks", "processes", "reconciled"):
        totals.setdefault(column, 0)
    record(f"lifecycle {FAULTS[fault]} ({engine})", **totals)
    assert not problems, "\n".join(problems)
    assert totals["trials"] == count
    assert totals["mismatches"] == 0 and totals["tracebacks"] == 0
    assert totals["extra_executions"] == 0 and totals["left_unknown"] == 0
    assert totals["executions"] == totals["expected_executions"]
    if fault not in ("backfill-after-run", "source-change"):
        assert totals["faults"] > 0


# -- controls: the checks above do catch what they are there to catch ----------------------


def test_control_a_zombie_without_fencing_is_caught(tmp_path: Path, zygote: Zygote) -> None:
    """The zombie trial with the fencing check switched off in the child: its stale rows
    overwrite the newer run's, and the trial's checks say so. Input pinning is off too: the
    zombie's inputs were rewritten meanwhile, so its pins alone would refuse the stale write
    (twice.engine.inputs), and this control is about fencing."""
    story = Story(tmp_path / "control", "sqlite", None, zygote, random.Random("zombie"), 0)
    story.controls.extend(["no-fencing", "no-input-pinning"])
    try:
        zombie(story, point="transform", takeover=False)
    finally:
        figures = story.finish()
    assert figures["mismatches"] > 0, story.problems
    assert any("no FencedWriteError" in problem for problem in story.problems)


def test_control_a_blind_retry_is_caught(tmp_path: Path, zygote: Zygote,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill-without-reconcile trial with the recovery blind to commit records (every
    unknown attempt reads "nothing written"): the committed write is executed again, and the
    trial's execution count says so."""
    from twice.engine import verify

    monkeypatch.setattr(verify.OutputCheck, "commit_record",
                        lambda self, number, generation: None)
    story = Story(tmp_path / "control", "sqlite", None, zygote, random.Random("blind"), 0)
    try:
        kill_no_reconcile(story, point="transform_after")
    finally:
        figures = story.finish()
    assert figures["extra_executions"] > 0, story.problems


# -- what the suite found, reproduced deterministically --------------------------------------
# All four were fixed in src and stay as regression tests (the first three in 0af4b61, the
# worker's in the commit that added this suite).


@pytest.mark.parametrize("engine", engine_params())
def test_source_reverted_to_an_earlier_version(engine: str, tmp_path: Path, zygote: Zygote,
                                               request: pytest.FixtureRequest) -> None:
    pg = Databases(str(request.getfixturevalue("postgres_url"))
                   if engine == "postgresql" else None)
    try:
        story = Story(tmp_path / "revert", engine, pg.fresh(), zygote, random.Random(0), 0)
        try:
            clean_run(story)
            path = story.root / "source" / f"{DAYS[1].isoformat()}.json"
            original = path.read_text()
            story.change(1, "rows")
            story.run()
            path.write_text(original)  # the change is undone: the source is as it was
            story.run()
            assert table_rows(spec(engine, story.root, "scaled", story.pg)) == \
                expected_scaled(story.root), "Executor.run left the reverted day's newer rows"
            story.backfill()
            assert table_rows(spec(engine, story.root, "scaled", story.pg)) == \
                expected_scaled(story.root), "run_backfill left the reverted day's newer rows"
        finally:
            story.ledger.close()
    finally:
        pg.drop()


def test_zombie_of_the_same_unit_records_its_fenced_write(tmp_path: Path,
                                                          zygote: Zygote) -> None:
    story = Story(tmp_path / "same-unit", "sqlite", None, zygote, random.Random(0), 0)
    try:
        child = story.child("run", days=[0], fault={"kind": "stop", "point": "transform",
                                                     "hit": 1, "delay": 0.0})
        try:
            assert child.wait_for("paused") is not None, child.text()
            time.sleep(TTL + 0.2)
            assert story.run([0], holder="taker").ok
        finally:
            child.signal(signal.SIGCONT)
        child.wait()
        assert "Traceback" not in child.stderr()
        assert table_rows(spec("sqlite", story.root, "scaled")) == \
            [r for r in expected_scaled(story.root) if r[0] == DAYS[0].isoformat()]
        zombie_transform = outcomes_of(child.done())[("transform", DAYS[0].isoformat())]
        errors = [e.error_class for unit in story.ledger.units(task="transform")
                  for e in story.ledger.errors(unit.uow_id)]
        assert any("FencedWriteError" in e for e in errors), (zombie_transform, errors)
        assert zombie_transform in ("failed-permanent", "leased-elsewhere"), zombie_transform
    finally:
        for child in story.children:
            child.cleanup()
        story.ledger.close()


def test_zombie_resumed_after_its_write_leaves_the_newer_fingerprint(tmp_path: Path,
                                                                     zygote: Zygote) -> None:
    story = Story(tmp_path / "late-record", "sqlite", None, zygote, random.Random(0), 0)
    try:
        clean_run(story)
        story.change(1, "rows")
        child = story.child("run", fault={"kind": "stop", "point": "transform_after",
                                          "hit": 1, "delay": 0.0})
        try:
            assert child.wait_for("paused") is not None, child.text()
            time.sleep(TTL + 0.2)
            story.change(1, "rows")
            story.run(holder="taker")
        finally:
            child.signal(signal.SIGCONT)
        child.wait()
        assert table_rows(spec("sqlite", story.root, "scaled")) == expected_scaled(story.root)
        before = story.calls()
        story.backfill()
        assert story.calls() == before, "the backfill executed a unit again"
    finally:
        for child in story.children:
            child.cleanup()
        story.ledger.close()


def test_worker_reruns_a_source_reverted_to_an_earlier_version(tmp_path: Path,
                                                                zygote: Zygote) -> None:
    story = Story(tmp_path / "worker-revert", "sqlite", None, zygote, random.Random(0), 0)
    try:
        clean_run(story)
        story.change(1, "rows")
        story.run()
        story.change(1, "revert")  # back to the first version: its units succeeded then
        story.worker(name="w")
        assert table_rows(spec("sqlite", story.root, "scaled")) == \
            expected_scaled(story.root), "the worker left the reverted day's newer rows"
    finally:
        story.ledger.close()
