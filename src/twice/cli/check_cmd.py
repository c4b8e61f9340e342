"""``twice check PIPELINE_FILE``: the definition's warnings, one per line, before anything runs.

Loading a pipeline file (``twice run``, ``backfill``, ``worker``, ...) prints the same warnings
on standard error as ``warning: ...`` and goes on; ``check`` only loads and lists them, on
standard output, each naming its task: no timeout, neither ``estimated_duration`` nor a timeout
(the deadline planner then assumes an attempt takes 0 s until one is measured), a timeout far
above the estimate, effects twice cannot see. Exit 0; with ``--strict``, 1 when there is any
warning (a CI gate); 2 when the file cannot be loaded or the definition is invalid.
"""

from __future__ import annotations

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error, finish
from twice.cli.options import json_option

EPILOG = """\b
Examples:
  twice check examples/funds_positions/pipeline.py
  twice check pipelines/orders.py --strict      # exit 1 when there is any warning (CI)
"""


@click.command("check", epilog=EPILOG)
@click.argument("pipeline_file")
@click.option("--strict", is_flag=True,
              help="Exit 1 when the definition has any warning (default: 0, warnings listed).")
@json_option("Print the pipeline's name and its warnings as JSON.")
@exit_on_error("twice check")
def check(pipeline_file: str, strict: bool, as_json: bool) -> None:
    """Load a pipeline file and list its definition's warnings, one per line."""
    from twice.define.load import definition_warnings, load_pipeline

    # loaded without validation, so the warnings are listed once, here, not warned too
    pipeline = load_pipeline(pipeline_file, validate=False)
    found = definition_warnings(pipeline, pipeline_file)
    ok = not (strict and found)
    if as_json:
        echo(jsonkeys.dumps({"pipeline": pipeline.name, "file": pipeline_file,
                             "warnings": found, "strict": strict, "ok": ok}, sort_keys=True))
    else:
        for line in found:
            echo(f"warning: {line}")
        count = f"{len(found)} warning(s)" if found else "no warnings"
        echo(f"{pipeline_file}: pipeline {pipeline.name!r}: {count}"
             + (" (--strict: exit 1)" if not ok else ""))
    finish(ok)
