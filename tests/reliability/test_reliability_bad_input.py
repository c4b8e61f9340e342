"""Bad input: fuzz ``twice decide`` and the pipeline/interval arguments of the commands.

Every invalid input must end the same way: exit code 2, a message that names the field or
option at fault, no traceback, and no change to anything already recorded. The ledger used
here holds one real run; after every refused command its full SQL dump must be byte-for-byte
what it was, and files that a bad ``--ledger`` points at (a pipeline file, another
application's SQLite database, a truncated ledger) must be left untouched.

Hypothesis draws the inputs: mutated lab fixtures (every field, every JSON type, boundary
numbers), extended fixtures with extreme ISO instants and durations, raw bytes on stdin, and
near-miss dates, ranges, task lists, deadlines and instants for ``run``, ``backfill``,
``status``, ``decide --ledger``, ``update`` and ``handover``. A few cases run in a real
``python -m twice`` process, where an uncaught error would print a real traceback.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.decide.lab_cases import POLICY, TASK, TOP, lab_case, mutated_fixtures
from tests.reliability.conftest import record, scale
from twice.cli.app import cli
from twice.define.schedule import FIRST_YEAR, LAST_YEAR

SUITE = "bad input"
PIPELINE = '''\
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

pipeline = Pipeline("fuzz", schedule=Schedule.daily("UTC"))


@pipeline.task(timeout=30)
def extract(ctx: TaskContext) -> int:
    return 3


@pipeline.task(depends_on=[extract], timeout=30)
def load(ctx: TaskContext) -> int:
    return 3
'''
TASKS = ("extract", "load")
RECORDED_DAY = "2026-11-01"
# Where a message names what it refuses: every fixture path starts with one of these.
FIELD = re.compile(r"\b(asOf|deadline|maxObservationAge|policy|tasks|fixture|schema|input|"
                   r"not JSON|JSON)\b")
LAB_PREFIX = "Invalid retry fixture: "
SETTINGS = settings(max_examples=60 * scale(), deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def invoke(args: list[str], stdin: str | bytes | None = None) -> Outcome:
    """Run the CLI in-process; an exception other than SystemExit is a crash, not a refusal."""
    result = CliRunner().invoke(cli, args, input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"twice {args!r} crashed with {type(result.exception).__name__}: "
            f"{result.exception}"
        ) from result.exception
    outcome = Outcome(result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in outcome.stdout + outcome.stderr, outcome
    return outcome


def refused(outcome: Outcome, *names: str, codes: tuple[int, ...] = (2,)) -> None:
    """Exit with one of ``codes`` (2: bad input) and a one-paragraph message on stderr that
    names one of ``names``."""
    assert outcome.code in codes, outcome
    message = outcome.stderr.strip()
    assert message, outcome
    lowered = message.lower()
    assert any(name.lower() in lowered for name in names), (names, message)


# -- a workspace with a pipeline file and a ledger holding one real run ----------------------


@dataclass(frozen=True)
class Workspace:
    root: Path
    pipeline: Path
    ledger: Path

    def dump(self) -> list[str]:
        with sqlite3.connect(f"file:{self.ledger}?mode=ro", uri=True) as conn:
            return list(conn.iterdump())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("bad-input")
    pipeline = root / "pipeline.py"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    ledger = root / "ledger.db"
    done = invoke(["run", str(pipeline), "--interval", RECORDED_DAY, "--ledger", str(ledger)])
    assert done.code == 0, done
    yield Workspace(root, pipeline, ledger)


@pytest.fixture(scope="module")
def recorded(workspace: Workspace) -> list[str]:
    dump = workspace.dump()
    assert any("twice_attempts" in line and "INSERT" in line for line in dump)
    return dump


# -- twice decide (lab and extended) ---------------------------------------------------------


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity: no consumer of twice's JSON should meet them."""

    def refuse(constant: str) -> Any:
        raise AssertionError(f"non-standard JSON constant {constant} in the output")

    return json.loads(text, parse_constant=refuse)


def decide_outcome(fixture_text: str, args: list[str]) -> Outcome:
    outcome = invoke(["decide", *args], stdin=fixture_text)
    assert outcome.code in (0, 2), outcome
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(LAB_PREFIX), outcome
        assert FIELD.search(lines[0][len(LAB_PREFIX):]), lines[0]
        assert outcome.stdout == "", outcome
    elif "table" not in args:
        report = strict_json(outcome.stdout)
        assert report["jobsExecuted"] is False and report["tasks"], report
    return outcome


def iso_case() -> dict[str, Any]:
    """The lab fixture on a real clock (the extended format's ISO-8601 instants/durations)."""

    def at(seconds: int) -> str:
        minutes, secs = divmod(seconds, 60)
        return f"2026-12-01T05:{minutes:02d}:{secs:02d}Z"

    case = lab_case()
    case["asOf"], case["deadline"] = at(case["asOf"]), at(case["deadline"])
    case["maxObservationAge"] = "PT10S"
    case["policy"].update(initialDelay="PT4S", maxDelay="PT12S")
    for task in case["tasks"]:
        task["observedAt"] = at(task["observedAt"])
        if task["lastFinishedAt"] is not None:
            task["lastFinishedAt"] = at(task["lastFinishedAt"])
        task["duration"] = f"PT{task['duration']}S"
    return case


def leaf_paths(fixture: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """Every field of a fixture as (the path a message writes, the keys to reach it)."""
    paths: list[tuple[str, tuple[Any, ...]]] = [(name, (name,)) for name in TOP
                                                 if name not in ("policy", "tasks")]
    paths += [(f"policy.{name}", ("policy", name)) for name in POLICY]
    for index in range(len(fixture["tasks"])):
        paths += [(f"tasks[{index}].{name}", ("tasks", index, name)) for name in TASK]
    return paths


def put(fixture: dict[str, Any], keys: tuple[Any, ...], value: Any) -> dict[str, Any]:
    mutated = copy.deepcopy(fixture)
    target: Any = mutated
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return mutated


MODES = st.sampled_from([[], ["--format", "table"], ["--extended"],
                         ["--extended", "--format", "table"]])
# A JSON type that no field of the fixture accepts.
NEVER_VALID = st.sampled_from([[], [1], {}, {"asOf": 1}, [[None]]])


@SETTINGS
@given(fixture=mutated_fixtures(), mode=MODES)
def test_mutated_lab_fixtures_are_decided_or_refused_with_the_field(
    fixture: Any, mode: list[str]
) -> None:
    outcome = decide_outcome(json.dumps(fixture), mode)
    record(SUITE, trials=1, faults=outcome.code == 2)


@SETTINGS
@given(data=st.data(), iso=st.booleans(), mode=MODES, value=NEVER_VALID)
def test_a_wrong_json_type_names_exactly_that_field(
    data: st.DataObject, iso: bool, mode: list[str], value: Any
) -> None:
    base = iso_case() if iso else lab_case()
    if iso and "--extended" not in mode:
        mode = ["--extended", *mode]
    path, keys = data.draw(st.sampled_from(leaf_paths(base)))
    outcome = decide_outcome(json.dumps(put(base, keys, value)), mode)
    record(SUITE, trials=1, faults=1)
    assert outcome.code == 2 and path in outcome.stderr, (path, outcome)


EXTREME_TIMES = st.one_of(
    st.sampled_from([
        "9999-12-31T23:59:59-12:00", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+14:00",
        "0001-01-01T00:00:00Z", "8999-12-31T23:59:59Z", "9000-01-01T00:00:00Z",
        "2026-12-01T05:01:40", "2026-02-30T00:00:00Z", "2026-12-01T05:01:40+24:00",
        "P99999999999D", "PT" + "9" * 40 + "S", "P36500D", "P36501D", "P1Y", "PT-1S",
        "P1DT", "PT0S", "PT0.0000001S", "P5W", "", "Z", "\u0661\u0662", "PT1,5S",
        1e308, -1e308, 1e-300, 10**30, -1, 0, 2**63, 1.5,
    ]),
    st.text(max_size=24),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
)


@SETTINGS
@given(data=st.data(), value=EXTREME_TIMES, table=st.booleans())
def test_extended_fixtures_with_extreme_times_never_crash(
    data: st.DataObject, value: Any, table: bool
) -> None:
    base = iso_case()
    _path, keys = data.draw(st.sampled_from(leaf_paths(base)))
    fixture = put(base, keys, value)
    if data.draw(st.booleans()):  # the same value in a second field: sums of two extremes
        _path2, keys2 = data.draw(st.sampled_from(leaf_paths(base)))
        fixture = put(fixture, keys2, value)
    mode = ["--extended", *(["--format", "table"] if table else [])]
    outcome = decide_outcome(json.dumps(fixture), mode)
    record(SUITE, trials=1, faults=outcome.code == 2)
    if outcome.code == 0 and not table:
        for task in strict_json(outcome.stdout)["tasks"]:
            for name in ("earliestStart", "estimatedFinish"):
                assert task[name] is None or re.fullmatch(
                    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", task[name]), task


@SETTINGS
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200)), mode=MODES)
def test_garbage_on_stdin_is_refused(raw: bytes | str, mode: list[str]) -> None:
    outcome = decide_outcome(raw if isinstance(raw, str) else raw.decode("latin-1"), mode)
    record(SUITE, trials=1, faults=1)
    assert outcome.code == 2


# -- pipeline and interval arguments -------------------------------------------------------


def _valid_date(year: int, month: int, day: int) -> bool:
    import datetime as dt

    try:
        dt.date(year, month, day)
    except ValueError:
        return False
    return FIRST_YEAR <= year <= LAST_YEAR


@st.composite
def bad_dates(draw: st.DrawFn) -> str:
    """Dates and datetimes that look right and are not (or are not on the daily grid)."""
    kind = draw(st.sampled_from(["components", "off-grid", "junk", "text", "separator"]))
    if kind == "components":
        year = draw(st.sampled_from([0, 1, 999, 1000, 2026, 8999, 9000, 9999, 10000, 99999]))
        month, day = draw(st.integers(0, 13)), draw(st.integers(0, 32))
        assume(not _valid_date(year, month, day))
        return f"{year:04d}-{month:02d}-{day:02d}"
    if kind == "off-grid":
        hour, minute = draw(st.integers(0, 23)), draw(st.integers(0, 59))
        assume((hour, minute) != (0, 0))
        offset = draw(st.sampled_from(["", "Z", "+00:00"]))
        return f"2026-11-0{draw(st.integers(1, 9))}T{hour:02d}:{minute:02d}{offset}"
    if kind == "junk":
        return RECORDED_DAY + draw(st.sampled_from(["x", " 0x", "T", "T25:00", "+01:00", "Z",
                                                    "\x00", "//", "/", "T00:00+15:00"]))
    if kind == "separator":
        # (20261101 is ISO 8601's basic format, which is valid)
        return RECORDED_DAY.replace("-", draw(st.sampled_from(["/", ".", " ", "--", "_"])))
    text = draw(st.text(max_size=16))
    assume(not re.fullmatch(r"\s*\d{4}-\d\d-\d\d\s*", text))
    return text


@st.composite
def bad_ranges(draw: st.DrawFn) -> tuple[str, str]:
    """START/END pairs where one side is bad, or the range is empty or reversed."""
    if draw(st.booleans()):
        bad = draw(bad_dates())
        return (bad, "2026-11-03") if draw(st.booleans()) else ("2026-11-01", bad)
    first = draw(st.integers(1, 28))
    last = draw(st.integers(1, first))
    return f"2026-11-{first:02d}", f"2026-11-{last:02d}"


BAD_TASKS = st.one_of(
    st.sampled_from([",", " , ", "extract,nope", "EXTRACT", "load;extract",
                     "extract load", "\x00"]),
    st.text(min_size=1, max_size=12).filter(
        lambda text: not {part.strip() for part in text.split(",") if part.strip()} <= set(TASKS)
    ),
)
BAD_INSTANTS = st.one_of(
    st.sampled_from(["tomorrow", "2026-12-01T05:00:00", "2026-12-01", "9999-12-31T23:59:59-12:00",
                     "0001-01-01T00:00:00+14:00", "2026-13-01T00:00:00Z", "1e9", ""]),
    st.text(max_size=12).filter(lambda text: text.strip().lower() != "none"),
)
BAD_COUNTS = st.sampled_from(["0", "-1", "abc", "1e3", "", "1.5", "+-1"])


@st.composite
def bad_run_args(draw: st.DrawFn) -> tuple[list[str], tuple[str, ...]]:
    """``twice run`` arguments with exactly one bad part, and the words its message may use."""
    kind = draw(st.sampled_from(["interval", "range", "both", "tasks", "deadline", "workers",
                                 "seed"]))
    day = ["--interval", RECORDED_DAY]
    if kind == "interval":
        # "2026/11/01" reads as a range, so the message may name its start or end
        return ["--interval", draw(bad_dates())], ("interval", "start", "end")
    if kind == "range":
        start, end = draw(bad_ranges())
        if draw(st.booleans()):
            return ["--interval", f"{start}/{end}"], ("start", "end", "interval")
        return ["--start", start, "--end", end], ("start", "end")
    if kind == "both":
        return [*day, "--start", "2026-11-01"], ("interval", "--start")
    if kind == "tasks":
        return [*day, "--tasks", draw(BAD_TASKS)], ("tasks",)
    if kind == "deadline":
        return [*day, "--deadline", draw(BAD_INSTANTS)], ("deadline",)
    if kind == "workers":
        count = draw(st.one_of(BAD_COUNTS, st.just("257")))  # run caps workers at 256
        return [*day, "--max-workers", count], ("max-workers",)
    return [*day, "--seed", draw(st.sampled_from(["x", "1.5", ""]))], ("seed",)


@st.composite
def bad_backfill_args(draw: st.DrawFn) -> tuple[list[str], tuple[str, ...]]:
    kind = draw(st.sampled_from(["range", "tasks", "concurrency", "missing", "deadline"]))
    if kind == "range":
        start, end = draw(bad_ranges())
        return ["--start", start, "--end", end], ("start", "end")
    if kind == "missing":
        return ["--start", "2026-11-01"], ("end",)
    good = ["--start", "2026-11-01", "--end", "2026-11-03"]
    if kind == "tasks":
        return [*good, "--tasks", draw(BAD_TASKS)], ("task",)
    if kind == "deadline":
        return [*good, "--deadline", draw(BAD_INSTANTS)], ("deadline",)
    return [*good, "--concurrency", draw(BAD_COUNTS)], ("concurrency",)


@SETTINGS
@given(case=bad_run_args())
def test_run_refuses_bad_arguments_and_leaves_the_ledger_alone(
    workspace: Workspace, recorded: list[str], case: tuple[list[str], tuple[str, ...]]
) -> None:
    args, names = case
    outcome = invoke(["run", str(workspace.pipeline), *args, "--ledger", str(workspace.ledger)])
    refused(outcome, *names)
    assert workspace.dump() == recorded
    record(SUITE, trials=1, faults=1, rows_compared=len(recorded))


@SETTINGS
@given(case=bad_backfill_args())
def test_backfill_refuses_bad_arguments_and_leaves_the_ledger_alone(
    workspace: Workspace, recorded: list[str], case: tuple[list[str], tuple[str, ...]]
) -> None:
    args, names = case
    outcome = invoke(["backfill", str(workspace.pipeline), *args,
                      "--ledger", str(workspace.ledger)])
    refused(outcome, *names)
    assert workspace.dump() == recorded
    record(SUITE, trials=1, faults=1, rows_compared=len(recorded))


READERS = st.sampled_from([["status"], ["decide"], ["update"], ["handover"]])


@SETTINGS
@given(command=READERS, instant=BAD_INSTANTS)
def test_reports_refuse_a_bad_as_of(workspace: Workspace, recorded: list[str],
                                    command: list[str], instant: str) -> None:
    outcome = invoke([*command, "--ledger", str(workspace.ledger), "--as-of", instant])
    refused(outcome, "as-of")
    assert workspace.dump() == recorded
    record(SUITE, trials=1, faults=1, rows_compared=len(recorded))


# -- bad pipeline files and bad ledgers ------------------------------------------------------

BAD_PIPELINES = {
    "syntax.py": "pipeline = (\n",
    "empty.py": "",
    "no_pipeline.py": "x = 1\n",
    "raises.py": "raise RuntimeError('the source system is down')\n",
    "imports.py": "import twice_no_such_module\n",
    "nul.py": "\x00\xff",
    "not_python.txt": "name,value\n1,2\n",
}


@pytest.mark.parametrize("name", sorted(BAD_PIPELINES))
@pytest.mark.parametrize("command", ["run", "backfill"])
def test_bad_pipeline_files_are_named(workspace: Workspace, recorded: list[str], name: str,
                                      command: str) -> None:
    path = workspace.root / "bad-pipelines" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(BAD_PIPELINES[name], encoding="utf-8", errors="surrogateescape")
    span = (["--interval", RECORDED_DAY] if command == "run"
            else ["--start", RECORDED_DAY, "--end", "2026-11-02"])
    outcome = invoke([command, str(path), *span, "--ledger", str(workspace.ledger)])
    refused(outcome, name)
    assert workspace.dump() == recorded
    record(SUITE, trials=1, faults=1, rows_compared=len(recorded))


def test_missing_and_directory_pipeline_paths(workspace: Workspace) -> None:
    for target in (workspace.root / "nope.py", workspace.root):
        refused(invoke(["run", str(target), "--interval", RECORDED_DAY,
                        "--ledger", str(workspace.ledger)]), target.name)
        record(SUITE, trials=1, faults=1)


UNREACHABLE = "postgresql://twice:twice@127.0.0.1:1/twice"


#: One rule for every command (``twice.cli.exits.exit_code_for``): a target that is not a
#: ledger twice can use as given (not a ledger, a directory, a bad or in-memory URL, a folder
#: that does not exist) is bad input, exit 2; a ledger that is there but damaged, or a server
#: nobody answers at, is a failed service, exit 1.
BAD_INPUT, FAILED = 2, 1


def _bad_ledgers(workspace: Workspace) -> dict[str, tuple[Path | None, int]]:
    """Ledger targets that must be refused -> (a file that must not change, the exit code)."""
    foreign = workspace.root / "orders.db"
    if not foreign.exists():
        with sqlite3.connect(foreign) as conn:
            conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount TEXT)")
            conn.execute("INSERT INTO orders VALUES (1, '12.50')")
    truncated = workspace.root / "truncated.db"
    truncated.write_bytes(workspace.ledger.read_bytes()[:3000])
    return {
        # the pipeline file itself, not a database
        str(workspace.pipeline): (workspace.pipeline, BAD_INPUT),
        str(foreign): (foreign, BAD_INPUT),  # another application's database
        str(truncated): (truncated, FAILED),  # a ledger cut short by a bad copy: damaged
        str(workspace.root): (None, BAD_INPUT),  # a directory
        str(workspace.root / "missing" / "ledger.db"): (None, BAD_INPUT),
        "sqlite://": (None, BAD_INPUT),  # in memory: the evidence would vanish
        ":memory:": (None, BAD_INPUT),
        "mysql://twice@localhost/twice": (None, BAD_INPUT),
        UNREACHABLE: (None, FAILED),  # nothing listens there
        "postgresql://twice@127.0.0.1:notaport/twice": (None, BAD_INPUT),
        "": (None, BAD_INPUT),
    }


@pytest.mark.parametrize("command", ["run", "backfill"])
def test_bad_ledgers_are_refused_and_nothing_is_written_to_them(
    workspace: Workspace, command: str
) -> None:
    span = (["--interval", RECORDED_DAY] if command == "run"
            else ["--start", RECORDED_DAY, "--end", "2026-11-02"])
    for target, (keep, code) in _bad_ledgers(workspace).items():
        before = digest(keep) if keep is not None else None
        outcome = invoke([command, str(workspace.pipeline), *span, "--ledger", target])
        refused(outcome, "ledger", codes=(code,))
        if keep is not None:
            assert digest(keep) == before, f"{target} was modified"
        record(SUITE, trials=1, faults=1)
    assert not (workspace.root / "missing").exists()


@pytest.mark.parametrize("command", [["status"], ["decide"], ["update"], ["handover"],
                                     ["explain", "fuzz.extract.x"], ["verify"],
                                     ["report", "--json"]])
def test_reports_on_bad_ledgers_are_refused(workspace: Workspace, command: list[str]) -> None:
    wrong = []
    for target, (keep, code) in _bad_ledgers(workspace).items():
        if target in ("sqlite://", ":memory:", ""):
            continue  # a report on an empty in-memory ledger is merely empty
        before = digest(keep) if keep is not None else None
        outcome = invoke([*command, "--ledger", target])
        assert outcome.stderr.strip(), outcome
        if outcome.code != code:
            wrong.append((target, outcome.code, code, outcome.stderr[:200]))
        if keep is not None:
            assert digest(keep) == before, f"{target} was modified by {command}"
        record(SUITE, trials=1, faults=1)
    assert not wrong, f"{command}: (target, exit, expected): {wrong}"


# -- real processes: what an operator's terminal would show ----------------------------------


def real(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "twice", *args], input=stdin,
                          capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("stdin", [
    b"\xff\xfe{\x00",  # not UTF-8
    b"[" * 200_000,  # nesting deeper than any parser's stack
    b'{"asOf": ' * 50_000,
    b" " * 3_000_000,  # larger than the input limit
    json.dumps(iso_case()).replace('"PT10S"', '"P99999999999D"').encode(),
], ids=["not-utf8", "deep-array", "deep-object", "oversized", "huge-duration"])
@pytest.mark.parametrize("mode", [[], ["--extended"]], ids=["lab", "extended"])
def test_real_decide_process_refuses_without_a_traceback(stdin: bytes, mode: list[str]) -> None:
    done = real(["decide", *mode], stdin)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and b"Traceback" not in done.stderr, err[-2000:]
    assert err.startswith(LAB_PREFIX) and done.stdout == b"", err[-2000:]
    record(SUITE, trials=1, faults=1)


def test_real_run_process_refuses_out_of_range_intervals(workspace: Workspace,
                                                         recorded: list[str]) -> None:
    for interval in ("0001-01-01/9999-12-31", "9999-12-31", "0001-01-01"):
        done = real(["run", str(workspace.pipeline), "--interval", interval,
                     "--ledger", str(workspace.ledger)])
        err = done.stderr.decode()
        assert done.returncode == 2 and "Traceback" not in err, err[-2000:]
        assert "supported years" in err, err
        record(SUITE, trials=1, faults=1, rows_compared=len(recorded))
    assert workspace.dump() == recorded
    with sqlite3.connect(workspace.ledger) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
