"""``twice airflow describe PIPELINE_FILE``: the pipeline as an Airflow 3.3 DAG, without Airflow.

Prints what ``twice.drivers.airflow.to_dag`` would build: the pinned data-interval timetable, each
task's retries/retry_delay/backoff/pool settings with the attempt sequence, the pools to create
and every difference Airflow cannot express (which twice then enforces inside the task). It
imports neither Airflow nor the executor, so it runs wherever twice is installed.
"""

from __future__ import annotations

import click

from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option
from twice.errors import InputError


@click.group(name="airflow", epilog="""\b
Example:
  twice airflow describe examples/funds_positions/pipeline.py
""")
def airflow() -> None:
    """Run twice pipelines under Apache Airflow (translation and DAG)."""


@airflow.command(epilog="""\b
Examples:
  twice airflow describe examples/funds_positions/pipeline.py
  twice airflow describe examples/funds_positions/pipeline.py --dag-id funds --json
""")
@click.argument("pipeline_file", metavar="PIPELINE_FILE")
@click.option("--dag-id", default=None, help="DAG id (default: the pipeline's name).")
@click.option("--ledger", "ledger_url", default=None, metavar="URL",
              help="Ledger URL to show in the DAG file snippet (default: $TWICE_LEDGER).")
@json_option()
@exit_on_error("twice airflow describe")
def describe(pipeline_file: str, dag_id: str | None, ledger_url: str | None,
             as_json: bool) -> None:
    """Print the DAG translation table and what Airflow cannot express."""
    from twice.define.load import PipelineFileError, load_pipeline
    from twice.drivers.airflow.translation import describe as describe_text
    from twice.drivers.airflow.translation import describe_json

    if dag_id is not None and not _valid_dag_id(dag_id):
        raise InputError(f"--dag-id {dag_id!r}: use letters, digits, '_', '-' and '.' only")
    try:
        pipeline = load_pipeline(pipeline_file)
    except PipelineFileError as exc:
        raise InputError(str(exc)) from exc
    if as_json:
        echo(describe_json(pipeline, dag_id=dag_id))
        return
    echo(describe_text(pipeline, dag_id=dag_id))
    echo("")
    echo("DAG file (put it in Airflow's dags folder):")
    for line in dag_file(str(pipeline.source_file), ledger_url, dag_id).splitlines():
        echo(f"  {line}" if line else "")


def dag_file(source_file: str, ledger_url: str | None, dag_id: str | None) -> str:
    """The DAG file's Python text (valid as printed). A ledger URL with a password is not
    written into it: Airflow's workers then read ``$TWICE_LEDGER``."""
    from twice.core.secrets import public_spec

    lines = ["from twice.drivers.airflow import to_dag", ""]
    ledger = "None"
    if ledger_url and public_spec(ledger_url) == ledger_url:
        ledger = repr(ledger_url)
    elif ledger_url:
        lines.append("# ledger=None: this ledger URL has a password, which is never written "
                     "here; Airflow's workers read $TWICE_LEDGER")
    else:
        lines.append("# ledger=None: Airflow's workers read $TWICE_LEDGER")
    arguments = [repr(source_file), f"ledger={ledger}"]
    if dag_id:
        arguments.append(f"dag_id={dag_id!r}")
    lines.append(f"dag = to_dag({', '.join(arguments)})")
    return "\n".join(lines) + "\n"


def _valid_dag_id(value: str) -> bool:
    return 0 < len(value) <= 250 and all(c.isalnum() or c in "_-." for c in value)
