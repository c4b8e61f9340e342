"""``twice init NAME``: scaffold a new pipeline in the recommended style.

NAME/ gets ``pipeline.py`` (input keyed by the interval, the write owned by twice: a DuckDB
partition replaced per day, ``safe_repeat``, a retry policy naming its one transient error),
three days of sample input so it runs at once, ``test_pipeline.py`` (runs it twice, checks every
row lands once) and a short README. The templates live in :mod:`twice.cli.scaffold`.

Exit status: 0 when created; 2 (nothing written) when NAME is not a Python identifier or
already exists and is not an empty directory.
"""

from __future__ import annotations

import shlex

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option

EPILOG = """\b
Examples:
  twice init acme_orders
  twice run acme_orders/pipeline.py --start 2026-11-01 --end 2026-11-04 --deadline none
  python -m pytest -q acme_orders
  twice init pipelines/acme_orders --json     # NAME may be a path; its last part is the name
"""


@click.command("init", epilog=EPILOG)
@click.argument("name")
@json_option("Print the created directory, files and next commands as JSON.")
@exit_on_error("twice init")
def init(name: str, as_json: bool) -> None:
    """Scaffold a new pipeline in NAME/: pipeline.py (owned DuckDB replace-partition write,
    interval-keyed input, transient-only retry), sample input and test_pipeline.py.

    NAME must be a Python identifier (its last path part, if NAME is a path) and must not exist
    yet, or be an empty directory: twice init never overwrites a file.
    """
    from twice.cli.scaffold import RANGE_END, RANGE_START, scaffold

    created = scaffold(name)
    folder = shlex.quote(str(created.directory))
    next_steps = [
        f"twice run {folder}/pipeline.py --start {RANGE_START} --end {RANGE_END} "
        "--deadline none",
        "twice status",
        f"python -m pytest -q {folder}",
    ]
    files = [str(path) for path in created.files]
    if as_json:
        echo(jsonkeys.dumps({
            "directory": str(created.directory),
            "pipeline": created.name,
            "workdirEnv": created.env,
            "files": files,
            "next": next_steps,
        }, sort_keys=True))
        return
    echo(f"Created pipeline {created.name!r} in {created.directory}/:")
    for path in files:
        echo(f"  {path}")
    echo(f"Its warehouse goes to ${created.env}/warehouse.duckdb "
         f"(default ./{created.name}-work). Next:")
    for command in next_steps:
        echo(f"  {command}")
