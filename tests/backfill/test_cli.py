"""``twice backfill`` / ``twice verify`` from the command line: exit codes and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.backfill import helpers

from twice.cli.app import cli


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    root = helpers.make_workdir(tmp_path / "wh", days=2)
    monkeypatch.setenv("TWICE_FUNDS_WORKDIR", str(root))
    return root, f"sqlite:///{tmp_path / 'ledger.db'}"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_backfill_json_then_dry_run_skips_and_verify_matches(env) -> None:
    root, ledger = env
    base = ["backfill", str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-25",
            "--ledger", ledger]
    first = invoke(*base, "--json", "--concurrency", "2")
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["counts"] == {"succeeded": 8}
    dry = invoke(*base, "--dry-run", "--json")
    assert dry.exit_code == 0
    assert {i["action"] for i in json.loads(dry.output)["items"]} == {"skip"}
    text = invoke(*base, "--force", "--tasks", "load")
    assert text.exit_code == 0, text.output
    assert "checksum unchanged" in text.output and "dependents follow" in text.output
    assert invoke("verify", "--ledger", ledger).exit_code == 0
    import duckdb

    con = duckdb.connect(str(root / "warehouse.duckdb"))
    con.execute("INSERT INTO positions SELECT * FROM positions WHERE day = DATE '2026-11-23' "
                "LIMIT 1")
    con.close()
    bad = invoke("verify", "--ledger", ledger)
    assert bad.exit_code == 1 and "MISMATCH: row count 20 -> 21" in bad.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py", "--start", "2026-11-23", "--end", "2026-11-24"], "missing.py"),
        ([str(helpers.EXAMPLE), "--start", "2026-13-01", "--end", "2026-11-24"], "--start"),
        ([str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-24", "--tasks",
          "lod"], "did you mean 'load'"),
        ([str(helpers.EXAMPLE), "--start", "2026-11-25", "--end", "2026-11-23"], "error"),
        # "--tasks ," used to mean every task; `twice run` already refused it
        ([str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-24", "--tasks",
          " , "], "--tasks"),
        ([str(helpers.EXAMPLE), "--start", "0001-01-01", "--end", "2026-11-24"],
         "supported years"),
        ([str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-24", "--deadline",
          "2026-12-07T06:00"], "--deadline"),  # no offset: refused, not guessed
        ([str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-24", "--deadline",
          "friday"], "--deadline"),
    ],
)
def test_bad_input_exits_2_without_traceback(env, args: list[str], message: str) -> None:
    _, ledger = env
    result = CliRunner().invoke(cli, ["backfill", *args, "--ledger", ledger])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_backfill_plans_against_its_own_deadline_not_the_intervals_past_ones(env) -> None:
    """The example's 06:00 delivery deadlines are long past: a backfill still runs (they are
    history), and a --deadline it cannot meet refuses every attempt before it starts."""
    root, ledger = env
    base = ["backfill", str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-24",
            "--ledger", ledger, "--json"]
    tight = invoke(*base, "--deadline", "2026-11-25T00:00:00Z")  # after the interval, passed
    report = json.loads(tight.output)
    assert tight.exit_code == 1 and report["runs"][0]["outcome"] == "deadline-infeasible"
    assert report["runs"][0]["attempts"] == [] and not (root / "warehouse.duckdb").exists()
    assert [r["status"] for r in report["runs"]] == ["failed", "blocked", "blocked", "blocked"]
    ok = invoke(*base)
    assert ok.exit_code == 0 and json.loads(ok.output)["counts"] == {"succeeded": 4}


def test_the_summary_counts_partitions_written_with_a_new_schema(tmp_path) -> None:
    """Found by a probe: after ``--accept-schema-change`` the summary said "partitions
    verified: 3 (0 unchanged, 0 changed, 0 new)": those with a new schema were in no bucket."""
    import duckdb
    from click.testing import CliRunner

    from twice.cli import cli

    path = tmp_path / "p.py"
    path.write_text(
        "import os\n"
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('shape', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination='duckdb://{tmp_path}/w.duckdb?partition_column=day#t',\n"
        "               write='replace', safe_repeat=True)\n"
        "def t(ctx):\n"
        "    cols = {'day': [ctx.interval.start.date()], 'v': [1]}\n"
        "    if os.environ.get('WIDER'):\n"
        "        cols['w'] = [2]\n"
        "    return pa.table(cols)\n"
    )
    args = ["backfill", str(path), "--start", "2024-01-01", "--end", "2024-01-03", "--ledger",
            str(tmp_path / "l.db"), "--deadline", "none"]
    assert CliRunner().invoke(cli, args).exit_code == 0
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        con.execute("ALTER TABLE t ADD COLUMN w BIGINT")
    wider = CliRunner().invoke(cli, [*args, "--accept-schema-change"], env={"WIDER": "1"})
    assert wider.exit_code == 0, wider.output
    assert "partitions verified: 2 (0 unchanged, 0 changed, 0 new, 2 with a new schema)" in \
        " ".join(wider.output.split())


def test_a_deadline_before_the_first_interval_ends_is_bad_input(tmp_path) -> None:
    """Found by a probe: ``--deadline`` years before the range left every unit blocked in the
    ledger ("cannot plan it") and exited 1; nothing can be delivered by it: exit 2 up front."""
    from click.testing import CliRunner

    from twice.cli import cli

    path = tmp_path / "p.py"
    path.write_text(
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('early', schedule=Schedule.daily('UTC'))\n"
        "@pipeline.task(safe_repeat=True)\n"
        "def t(ctx):\n"
        "    pass\n"
    )
    ledger = tmp_path / "l.db"
    result = CliRunner().invoke(cli, ["backfill", str(path), "--start", "2024-01-01", "--end",
                                      "2024-01-04", "--ledger", str(ledger), "--deadline",
                                      "2020-01-01T00:00:00Z"])
    assert result.exit_code == 2, result.output
    assert "--deadline" in result.output and "first interval ends" in result.output
    assert not ledger.exists()


def test_the_last_failed_attempt_is_not_said_to_be_retried(tmp_path) -> None:
    """Found by a probe: every transient failure printed "transient, retrying", the last one
    too, right before "attempts-exhausted"."""
    from click.testing import CliRunner

    from twice.cli import cli

    path = tmp_path / "p.py"
    path.write_text(
        "from twice import Pipeline, RetryPolicy, Schedule\n"
        "pipeline = Pipeline('flaky', schedule=Schedule.daily('UTC'))\n"
        "@pipeline.task(safe_repeat=True,\n"
        "               retry=RetryPolicy(max_attempts=2, initial_delay=0, jitter='none',\n"
        "                                 transient=(ConnectionError,)))\n"
        "def t(ctx):\n"
        "    raise ConnectionError('down')\n"
    )
    result = CliRunner().invoke(cli, ["backfill", str(path), "--start", "2024-01-01", "--end",
                                      "2024-01-02", "--ledger", str(tmp_path / "l.db")])
    lines = [line for line in result.output.splitlines() if "failed (ConnectionError" in line]
    assert len(lines) == 2, result.output
    assert lines[0].endswith("; transient, retried") and lines[1].endswith("; transient")


HELD_PIPELINE = '''\
from twice import Pipeline, Schedule, TaskContext

pipeline = Pipeline("progress", schedule=Schedule.daily("UTC"))


@pipeline.task(safe_repeat=True)
def extract(ctx: TaskContext) -> None:
    pass


@pipeline.task(depends_on=extract)
def notify(ctx: TaskContext) -> None:
    """A side effect twice does not repeat unasked."""
'''


def test_the_progress_line_counts_held_intervals_as_held_not_failed(tmp_path: Path) -> None:
    """A forced backfill whose side-effect task is held (not safe_repeat) said "failed 2" on
    its progress line though nothing failed."""
    pipeline = tmp_path / "progress.py"
    pipeline.write_text(HELD_PIPELINE)
    base = ["backfill", str(pipeline), "--start", "2026-11-01", "--end", "2026-11-03",
            "--ledger", str(tmp_path / "ledger.db"), "--deadline", "none"]
    assert invoke(*base).exit_code == 0
    forced = invoke(*base, "--force")
    assert "failed 0  held 2" in forced.output, forced.output


def test_status_and_decide_read_each_timeline_once(env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 (reads batched per plan): ``twice status`` and ``twice decide --ledger`` built
    their rows from one read of every unit's timeline and their health from a second one;
    both now share the first. What they print is the same as before (their own tests)."""
    from twice.ledger import Ledger

    _, ledger = env
    base = ["backfill", str(helpers.EXAMPLE), "--start", "2026-11-23", "--end", "2026-11-25",
            "--ledger", ledger, "--json"]
    assert invoke(*base).exit_code == 0
    reads: list[int] = []
    timelines = Ledger.timelines

    def counted(self: Ledger, uow_ids: list[str]) -> object:
        reads.append(len(uow_ids))
        return timelines(self, uow_ids)

    monkeypatch.setattr(Ledger, "timelines", counted)
    status = invoke("status", "--ledger", ledger, "--json")
    assert status.exit_code == 0, status.output
    assert reads == [8] and json.loads(status.output)["headline"] == "done: 8/8 verified"
    reads.clear()
    decided = invoke("decide", "--ledger", ledger, "--format", "json")
    assert reads == [8], decided.output
    assert json.loads(decided.output)["summary"] == {"settled": 8}
