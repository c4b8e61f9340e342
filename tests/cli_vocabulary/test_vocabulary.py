"""One CLI vocabulary: an option name means the same on every command that takes it, every
command shows an example in its --help, and every command that prints a result can print it
as JSON."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from twice.cli import cli

# option -> (metavar, is_flag) on every command that takes it
VOCABULARY: dict[str, tuple[str | None, bool]] = {
    "--ledger": ("URL", False),
    "--json": (None, True),
    "--pipeline": ("NAME", False),
    "--pipeline-file": ("FILE", False),
    "--tasks": ("A,B", False),
    "--start": ("DATE", False),
    "--end": ("DATE", False),
    "--lease-ttl": ("SECONDS", False),
    "--concurrency": ("N", False),
    "--as-of": ("INSTANT", False),
    "--repeat": ("A,B", False),
    "--force": (None, True),
}
# commands whose output is a walkthrough for people, not a result (what they produce is
# the ledger, which every other command reads as JSON)
NO_JSON = {"twice demo"}


def commands() -> Iterator[tuple[str, click.Command]]:
    def walk(command: click.Command, path: list[str], parent: click.Context | None
             ) -> Iterator[tuple[str, click.Command]]:
        yield " ".join(path), command
        if isinstance(command, click.Group):
            ctx = click.Context(command, info_name=path[-1], parent=parent)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, [*path, name], ctx)

    yield from walk(cli, ["twice"], None)


ALL = dict(commands())
LEAVES = {name: c for name, c in ALL.items() if not isinstance(c, click.Group)}


def options(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) and not p.hidden
            for opt in p.opts}


def test_the_walk_finds_every_command() -> None:
    assert {"twice run", "twice backfill", "twice worker", "twice status", "twice init",
            "twice policy show", "twice airflow describe"} <= set(ALL)


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_help_shows_an_example(name: str) -> None:
    result = CliRunner().invoke(cli, [*name.split()[1:], "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output, f"{name} --help has no example"


@pytest.mark.parametrize("name", sorted(set(LEAVES) - NO_JSON))
def test_every_command_with_a_result_takes_json(name: str) -> None:
    assert "--json" in options(LEAVES[name])


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_an_option_name_means_the_same_everywhere(name: str) -> None:
    found = options(LEAVES[name])
    for option, (metavar, flag) in VOCABULARY.items():
        if option not in found:
            continue
        param = found[option]
        assert param.is_flag == flag, f"{name} {option}"
        if metavar is not None:
            assert param.metavar == metavar, f"{name} {option}: {param.metavar}"
    if "--start" in found or "--end" in found:
        assert {"--interval", "--start", "--end"} <= set(found), name
    if "--interval" in found and "--start" in found:
        assert found["--interval"].metavar == "DATE|START/END", name
    if "--deadline" in found:
        assert found["--deadline"].metavar in ("INSTANT|none", "INSTANT"), name


def test_the_commands_that_run_units_share_their_options() -> None:
    shared = {"--interval", "--start", "--end", "--tasks", "--ledger", "--deadline",
              "--lease-ttl", "--repeat", "--json", "--allow-open-intervals", "--yes", "--seed"}
    for name in ("twice run", "twice backfill", "twice worker"):
        assert shared <= set(options(LEAVES[name])), (name, shared - set(options(LEAVES[name])))
    for name in ("twice run", "twice backfill"):
        assert {"--concurrency", "--force"} <= set(options(LEAVES[name])), name


@pytest.mark.parametrize("name", sorted(n for n, c in LEAVES.items() if "--pipeline" in
                                        options(c)))
def test_pipeline_is_a_name_and_a_file_is_refused_with_the_right_option(name: str) -> None:
    result = CliRunner().invoke(cli, [*name.split()[1:], "--pipeline", "pipelines/funds.py"])
    assert result.exit_code == 2
    assert "--pipeline-file" in result.output and "Traceback" not in result.output
