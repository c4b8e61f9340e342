"""Bad input found by an adversarial probe: each is a clean one-line message naming the option
(or variable) at fault and exit 2 (``twice.cli.exits.BAD_INPUT``), never a traceback.

- every number option refuses NaN, infinity and negatives where it is parsed, on every command;
- an invalid ledger URL (``sqlite://host/x.db``) names --ledger, whichever command opens it;
- an unknown ``TWICE_OPENLINEAGE`` value names the variable and the accepted values;
- ``twice status --pipeline TYPO`` refuses the name as ``update`` does;
- ``--as-of`` outside the years intervals may lie in (1000-8999) is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from twice.cli import cli
from twice.cli.exits import BAD_INPUT
from twice.cli.policy_cmd import Number

PIPELINE = """\
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule

pipeline = Pipeline("probe", schedule=Schedule.daily("UTC"))

@pipeline.task(destination="sqlite:///{root}/w.db?partition_column=day#t", write="replace",
               safe_repeat=True)
def t(ctx):
    return [{{"day": ctx.interval.start.date(), "n": 1}}]
"""


def _pipeline(tmp_path: Path) -> str:
    path = tmp_path / "p.py"
    path.write_text(PIPELINE.format(root=tmp_path))
    return str(path)


def _invoke(args: list[str], env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, args, env=env)


def _refused(result: Result, *names: str) -> None:
    """Exit 2, a message naming each of ``names``, and no exception but the exit itself."""
    assert result.exit_code == BAD_INPUT, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    assert "Traceback" not in result.output
    for name in names:
        assert name in result.output, (name, result.output)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ledger holding one verified unit of pipeline ``probe`` (working directory: tmp_path)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TWICE_LEDGER", raising=False)
    path = str(tmp_path / "ledger.db")
    ran = _invoke(["run", _pipeline(tmp_path), "--interval", "2026-11-01", "--ledger", path,
                   "--deadline", "none"])
    assert ran.exit_code == 0, ran.output
    return path


# -- 1. numbers are checked where they are parsed -------------------------------------------


def _leaves() -> Iterator[tuple[list[str], click.Command]]:
    def walk(command: click.Command, path: list[str], parent: click.Context | None
             ) -> Iterator[tuple[list[str], click.Command]]:
        if isinstance(command, click.Group):
            ctx = click.Context(command, info_name=path[-1] if path else "twice", parent=parent)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, [*path, name], ctx)
        else:
            yield path, command

    yield from walk(cli, [], None)


NUMBER_OPTIONS = sorted(
    (" ".join(path), option.opts[0])
    for path, command in _leaves()
    for option in command.params
    if isinstance(option, click.Option) and not option.hidden
    and isinstance(option.type, click.types.FloatParamType | Number)
)


def test_the_walk_finds_the_number_options() -> None:
    found = set(NUMBER_OPTIONS)
    assert {("run", "--lease-ttl"), ("backfill", "--lease-ttl"), ("worker", "--lease-ttl"),
            ("worker", "--pool-ttl"), ("worker", "--poll"),
            ("dbt backfill", "--lease-ttl")} <= found, found


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
@pytest.mark.parametrize(("command", "option"), NUMBER_OPTIONS)
def test_every_number_option_refuses_non_finite_and_negative_values(
    command: str, option: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = _invoke([*command.split(), f"{option}={value}"])
    _refused(result, option)
    assert not (tmp_path / "twice-ledger.db").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
@pytest.mark.parametrize("command", ["run", "backfill", "worker"])
def test_lease_ttl_nan_on_a_real_run_is_bad_input(
    command: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ledger = tmp_path / "l.db"
    args = [command, _pipeline(tmp_path), "--start", "2026-11-01", "--end", "2026-11-02",
            "--deadline", "none", "--ledger", str(ledger), "--lease-ttl", value]
    _refused(_invoke([*args, "--once"] if command == "worker" else args), "--lease-ttl")
    assert not ledger.exists()


# -- 2. an invalid ledger URL is bad input naming --ledger -----------------------------------

BAD_LEDGER = "sqlite://u:S3CRETPW@host/x.db?password=S3CRETPW"


def _ledger_commands(pipeline: str) -> list[list[str]]:
    return [
        ["run", pipeline, "--interval", "2026-11-01", "--deadline", "none"],
        ["backfill", pipeline, "--start", "2026-11-01", "--end", "2026-11-02"],
        ["worker", pipeline, "--interval", "2026-11-01", "--deadline", "none", "--once"],
        ["verify"], ["status"], ["update"], ["report", "--json"], ["handover"],
        ["decide", "--json"], ["intermediates"], ["explain", "probe"],
        ["resolve", "probe", "--as", "failed", "--note", "checked"],
    ]


@pytest.mark.parametrize("index", range(12))
@pytest.mark.parametrize("url", ["sqlite://host/x.db", BAD_LEDGER])
@pytest.mark.parametrize("via", ["option", "environment"])
def test_an_invalid_ledger_url_is_bad_input_naming_ledger(
    index: int, url: str, via: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from twice.ledger import Ledger

    monkeypatch.chdir(tmp_path)
    Ledger.open(str(tmp_path / "x.db")).close()  # the path part is a ledger: only the host is wrong
    args = _ledger_commands(_pipeline(tmp_path))[index]
    if via == "environment" and args[0] == "decide":
        pytest.skip("twice decide reads a ledger only with --ledger (else the lab's stdin)")
    if via == "option":
        result = _invoke([*args, "--ledger", url], env={"TWICE_LEDGER": None})
    else:
        result = _invoke(args, env={"TWICE_LEDGER": url})
    _refused(result, "--ledger", "host")
    assert "S3CRETPW" not in result.output
    if via == "environment":
        assert "TWICE_LEDGER" in result.output


# -- 3. TWICE_OPENLINEAGE takes only the values it documents ---------------------------------


@pytest.mark.parametrize("command", ["run", "backfill", "worker"])
def test_an_unknown_twice_openlineage_value_is_refused(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    events = tmp_path / "ev.ndjson"
    (tmp_path / "openlineage.yml").write_text(
        f"transport:\n  type: file\n  log_file_path: {events}\n  append: true\n")
    ledger = tmp_path / "l.db"
    args = [command, _pipeline(tmp_path), "--start", "2026-11-01", "--end", "2026-11-02",
            "--deadline", "none", "--ledger", str(ledger)]
    if command == "worker":
        args.append("--once")
    result = _invoke(args, env={"TWICE_OPENLINEAGE": "disabled"})
    _refused(result, "TWICE_OPENLINEAGE", "'disabled'", "off", "on")
    assert not events.exists() and not ledger.exists()
    off = _invoke(args, env={"TWICE_OPENLINEAGE": "off"})
    assert off.exit_code == 0, off.output
    assert not events.exists()


# -- 4. status --pipeline refuses a name the ledger never recorded ---------------------------


@pytest.mark.parametrize("as_json", [False, True])
def test_status_refuses_an_unknown_pipeline_like_update(ledger: str, as_json: bool) -> None:
    extra = ["--json"] if as_json else []
    for command in ("status", "update"):
        result = _invoke([command, "--ledger", ledger, "--pipeline", "prob", *extra])
        _refused(result, "'prob'", "pipelines recorded: probe")
    known = _invoke(["status", "--ledger", ledger, "--pipeline", "probe", "--json"])
    assert known.exit_code == 0, known.output
    assert [u["pipeline"] for u in json.loads(known.output)["units"]] == ["probe"]


# -- 5. --as-of lies in the years intervals may lie in ---------------------------------------

AS_OF_COMMANDS = [["status"], ["status", "--json"], ["decide", "--json"], ["update"],
                  ["report", "--json"], ["handover"]]


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00Z", "0999-06-01T00:00:00Z",
                                     "9000-01-01T00:00:00Z", "9999-12-31T23:00:00Z"])
@pytest.mark.parametrize("args", AS_OF_COMMANDS, ids=" ".join)
def test_as_of_outside_the_supported_years_is_refused(
    ledger: str, args: list[str], instant: str
) -> None:
    result = _invoke([*args, "--ledger", ledger, "--as-of", instant])
    _refused(result, "--as-of", "1000-8999")


@pytest.mark.parametrize("args", AS_OF_COMMANDS, ids=" ".join)
def test_as_of_inside_the_supported_years_still_works(ledger: str, args: list[str]) -> None:
    result = _invoke([*args, "--ledger", ledger, "--as-of", "1000-01-01T00:00:00Z"])
    assert result.exit_code == 0, result.output
    if "--json" in args:
        assert '"as_of": "1000-01-01T00:00:00' in result.output, result.output[:300]



# -- 6. README's "Run a pipeline" says exactly which commands take which options --------------

README = Path(__file__).resolve().parents[2] / "README.md"


def _takes(command: str) -> set[str]:
    """The visible options of ``twice COMMAND``."""
    [found] = [c for path, c in _leaves() if " ".join(path) == command]
    return {opt for p in found.params if isinstance(p, click.Option) and not p.hidden
            for opt in p.opts}


def _run_a_pipeline(text: str) -> str:
    section = text.split("\n## Run a pipeline\n", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.split())  # one line: a claim may wrap anywhere


def _names(text: str, pattern: str) -> list[str]:
    import re

    return re.findall(pattern, text)


def check_readme_option_claims(text: str) -> None:
    """Every "OPTIONS mean the same on COMMANDS" holds (each command takes each option), and
    the commands said to take --pipeline / --pipeline-file, or not, are the ones that do."""
    import re

    section = _run_a_pipeline(text)
    claims = [clause.split(" mean the same on ", 1) for clause in re.split(r"; |\. ", section)
              if " mean the same on " in clause]
    assert claims, "no 'mean the same on' claim found"
    for options_text, commands_text in claims:
        options = set(_names(options_text, r"`(--[a-z-]+)"))
        assert options, options_text
        for command in _names(commands_text.split("(")[0], r"`([a-z]+)`"):
            missing = options - _takes(command)
            assert not missing, f"README: twice {command} has no {sorted(missing)}"
    every = {" ".join(path) for path, _ in _leaves()}
    for option in ("--pipeline", "--pipeline-file"):
        match = re.search(rf"`{option} [A-Z]+`[^(]*\(([^)]*)\)", section)
        assert match, f"README names no commands for {option}"
        said, _, said_not = match.group(1).partition(";")
        takes = {c for c in every if option in _takes(c)}
        assert set(_names(said, r"`([a-z]+)`")) == takes, (option, sorted(takes))
        assert not set(_names(said_not, r"`([a-z]+)`")) & takes, option


def test_readme_says_which_commands_take_which_options() -> None:
    check_readme_option_claims(README.read_text(encoding="utf-8"))


def test_the_readme_check_catches_the_old_claims() -> None:
    old = ("\n## Run a pipeline\n`--tasks A,B`, `--concurrency N`, `--force` and `--json` mean "
           "the same on `run`, `backfill` and `worker`; `--pipeline NAME` is a pipeline's name "
           "(`status`) and `--pipeline-file FILE` its `.py` file (`status`, `handover`, "
           "`verify`).\n")
    with pytest.raises(AssertionError, match="worker has no"):
        check_readme_option_claims(old)


def test_decide_over_a_ledger_counts_units_without_a_policy_as_undecided(tmp_path: Path) -> None:
    """A unit whose run recorded no policy has no decision: the JSON summary counted it under
    the Python text "None"; it is "undecided", beside the planner's decision names."""
    from click.testing import CliRunner

    from twice.cli import cli
    from twice.core.interval import Interval
    from twice.core.unit import UnitOfWork
    from twice.ledger import Ledger

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    start = datetime(2026, 11, 30, tzinfo=UTC)
    with Ledger.open(url) as ledger:
        ledger.record_unit(UnitOfWork("p", "t", Interval(start, start + timedelta(days=1)),
                                      "", "1"))
    done = CliRunner().invoke(cli, ["decide", "--ledger", url, "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["summary"] == {"undecided": 1}
    assert report["tasks"][0]["decision"] is None
