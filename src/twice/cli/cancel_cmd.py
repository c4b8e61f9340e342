"""``twice cancel PIPELINE_FILE UOW_ID --note TEXT``: ask for a remote job's cancel.

A cancel is a request, not an outcome (``twice.engine.cancel``): the job may still finish,
what it has cost stays billed, and what it already published is not undone. The request is
recorded with the operator's name, the note and the service's answer; the attempt's outcome
is unchanged until a run reconciles the job by its id.
"""

from __future__ import annotations

import json

import click

from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option, operator_name
from twice.errors import InputError

EPILOG = """\b
The task says how to cancel its job: @pipeline.task(cancel=lambda job_id, ctx: ...).
Then the next run reconciles the job by its id: stopped by the cancel, it is failed and
a new job generation runs; finished anyway, it is adopted.

\b
Example:
  twice cancel pipeline.py funds.load.20261201T0000.3c6a \\
      --note "wrong source file for 2026-12-01; will rerun after the fix" --operator alice
"""


@click.command("cancel", epilog=EPILOG)
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@click.argument("uow_id")
@click.option("--note", default=None, metavar="TEXT",
              help="Why the job is cancelled (required; kept with the request).")
@click.option("--operator", default=None, metavar="NAME",
              help="Who asks (default: $USER, else 'operator').")
@ledger_option()
@json_option()
@exit_on_error("twice cancel")
def cancel(pipeline_file: str, uow_id: str, note: str | None, operator: str | None,
           ledger_url: str | None, as_json: bool) -> None:
    """Ask the remote service to cancel a unit's job (a request: it may still finish)."""
    from twice.cli.ledger_decide import open_existing_ledger, unit_id
    from twice.define.load import PipelineFileError, load_pipeline
    from twice.engine.cancel import WHAT_A_CANCEL_IS, request_cancel

    if note is None or not note.strip():
        raise InputError("--note: say why the job is cancelled; it is kept with the request")
    name = operator_name(operator, recorded_with="the cancel request")
    try:
        pipeline = load_pipeline(pipeline_file)
    except PipelineFileError as exc:
        raise InputError(str(exc)) from exc
    try:
        ledger = open_existing_ledger(ledger_url, writes=True)
    except InputError as exc:
        raise InputError(f"--ledger: {exc}") from exc
    with ledger:
        request = request_cancel(pipeline, ledger, unit_id(ledger, uow_id), operator=name,
                                 note=note)
    if as_json:
        echo(json.dumps({
            "uow_id": request.uow_id, "attempt": request.attempt, "job_id": request.job_id,
            "attempt_outcome": request.attempt_outcome, "answer": request.answer,
            "operator": request.operator, "note": request.note,
            "requested_at": request.requested_at.isoformat(), "seq": request.seq,
            "basis": "asserted",
        }, sort_keys=True))
        return
    answer = f" The service answered: {request.answer}." if request.answer else ""
    echo(
        f"Cancel requested for job {request.job_id} (attempt {request.attempt} of "
        f"{request.uow_id}), by {request.operator}: {request.note}.{answer}\n"
        f"Note: {WHAT_A_CANCEL_IS}.\n"
        f"The attempt stays {request.attempt_outcome} until a run reconciles the job by its "
        "id: stopped by the cancel, the next run starts a new job generation; finished "
        "anyway, it is adopted."
    )
