"""The Click application: a group whose subcommands are imported on first use."""

from __future__ import annotations

import errno
import importlib
import importlib.util

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
        return command

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; a ``TwiceError`` it did not handle becomes one message and the
        exit code of its type (``twice.cli.exits``), never a traceback."""
        from twice.errors import TwiceError

        try:
            return super().invoke(ctx)
        except (TwiceError, KeyboardInterrupt) as exc:
            from twice.cli.exits import fail

            fail(exc, f"twice {ctx.invoked_subcommand or 'twice'}")
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO):
                raise
            from twice.cli.exits import output_lost

            output_lost(exc, f"twice {ctx.invoked_subcommand or 'twice'}")

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @staticmethod
    def _available(name: str) -> bool:
        return importlib.util.find_spec(COMMANDS[name][0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
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
