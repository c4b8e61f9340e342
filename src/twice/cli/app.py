"""The Click application: a group whose subcommands are imported on first use."""

from __future__ import annotations

import errno
import importlib
import importlib.util
from typing import Any

import click

# command name -> one-line help shown by ``twice --help``; the command is the attribute of that
# name in the module ``twice.cli.<name>_cmd``
_HELP: dict[str, str] = {
    "decide": "Decide what to do next for each task (lab-compatible).",
    "policy": "Print a retry policy's attempt sequence and translations.",
    "run": "Run a pipeline for one interval or a range.",
    "status": "Table of units of work and what the planner would do now.",
    "explain": "Full recorded timeline of one unit of work.",
    "resolve": "Record an operator's resolution of an unknown outcome (asserted, not observed).",
    "cancel": "Ask for a remote job's cancel (a request: the job may still finish).",
    "adopt": "Make a destination belong to this ledger (recorded; its earlier ledger is "
             "refused).",
    "fingerprint": "Row count + checksum of one partition.",
    "verify": "Recompute fingerprints and compare with the ledger.",
    "diff": "Keys added, removed and changed in a partition between two table versions.",
    "backfill": "Reprocess a range of intervals, verified.",
    "demo": "Run the funds-positions demo end to end.",
    "report": "Self-contained HTML report of runs and backfills.",
    "update": "Short English status update from the ledger.",
    "handover": "Markdown runbook for the operator taking over.",
    "airflow": "Run pipelines under Apache Airflow (describe the DAG translation).",
    "worker": "Work on a pipeline's units alongside other workers sharing the ledger.",
    "intermediates": "Catalog of materialized intermediates: reuse, integrity, retention, "
                     "trade-off.",
    "estimate": "Estimate bytes a query reads; refuse over maximum_bytes_billed.",
    "init": "Scaffold a new pipeline (owned writes, interval-keyed input, a test).",
    "dbt": "Run a dbt project under twice: units of work as each materialization decides.",
    "check": "List a pipeline file's definition warnings (--strict: exit 1 on any).",
}

# command name -> (module, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    name: (f"twice.cli.{name}_cmd", name, text) for name, text in _HELP.items()
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._available(name)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attribute, _ = entry
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command: click.Command = getattr(module, attribute)
        prepare(command, f"TWICE_{cmd_name.upper()}")
        return command

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        """Click's ``main``, with Click's own errors (a usage error, an aborted prompt) in the
        one error form (``twice COMMAND: error: ...``, ``twice.cli.exits.error_line``) after
        the usage lines Click shows."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        from twice.cli import exits

        try:
            value = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            exits.click_failed(exc, _path(exc.ctx), _usage(exc.ctx))
        except click.ClickException as exc:
            exits.click_failed(exc, _path(getattr(exc, "ctx", None)))
        except click.Abort as exc:
            exits.click_failed(exc, _path(None))
        exits.returned(value)

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; a ``TwiceError`` it did not handle becomes one message and the
        exit code of its type (``twice.cli.exits``), never a traceback; standard output that
        cannot be written ends the command through ``exits.output_lost``."""
        from twice.errors import TwiceError

        def name() -> str:  # known once the group has picked the subcommand
            return " ".join(["twice", *filter(None, [ctx.invoked_subcommand])])

        try:
            return super().invoke(ctx)
        except (TwiceError, KeyboardInterrupt) as exc:
            from twice.cli.exits import fail

            fail(exc, name())
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO):
                raise
            from twice.cli.exits import output_lost

            output_lost(exc, name())

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @staticmethod
    def _available(name: str) -> bool:
        return importlib.util.find_spec(COMMANDS[name][0]) is not None


def _log_options() -> list[click.Option]:
    from twice.cli.logs import log_options

    return log_options()


def _path(ctx: click.Context | None) -> str:
    """``twice COMMAND`` of the context an error came from (the root spelled ``twice``)."""
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["twice", *[name for name in reversed(names[:-1]) if name]])


def _usage(ctx: click.Context | None) -> str | None:
    """Click's usage lines and hint for a usage error in ``ctx``."""
    if ctx is None:
        return None
    usage = ctx.get_usage().replace(ctx.command_path, _path(ctx), 1)
    return f"{usage}\nTry '{_path(ctx)} --help' for help.\n"


def prepare(command: click.Command, envvar_prefix: str) -> None:
    """Once per command (and its subcommands): every option settable from the environment as
    ``<envvar_prefix>_<LONG_OPTION>`` (``TWICE_RUN_DEADLINE``; Click's ``auto_envvar_prefix``
    would spell the destination, ``TWICE_RUN_LEDGER_URL`` for ``--ledger``) and the name shown
    in ``--help``; ``--log-level`` and ``--log-format`` added; the exit codes
    (``twice.cli.exits.EXIT_CODES``) at the end of the help."""
    if getattr(command, "_twice_prepared", False):
        return
    from twice.cli.exits import help_section
    from twice.cli.logs import log_options

    command._twice_prepared = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            prepare(sub, f"{envvar_prefix}_{name.upper().replace('-', '_')}")
    else:
        command.params.extend(log_options())
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in ("help", "version"):
            continue
        if param.envvar is None:
            flag = max(param.opts, key=len).lstrip("-")
            param.envvar = f"{envvar_prefix}_{flag.upper().replace('-', '_')}"
        param.show_envvar = True
    command.epilog = f"{command.epilog.rstrip()}\n\n{help_section()}" if command.epilog \
        else help_section()


# help as wide as the terminal up to 120 columns (Click's default stops at 80, which breaks
# the longest environment variable names mid-word)
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                              "auto_envvar_prefix": "TWICE",
                                              "max_content_width": 120},
             epilog="""\b
Examples:
  twice demo --workdir twice-demo
  twice status --ledger twice-demo/run/ledger.db
  twice COMMAND --help
""")
@click.version_option(package_name="twice", prog_name="twice")
def cli() -> None:
    """twice: make batch pipelines safe to run twice.

    Retries, manual reruns and backfills never duplicate or lose rows, and every decision is
    made from recorded evidence (its source and how old it is).
    """


cli.params.extend(_log_options())
prepare(cli, "TWICE")
