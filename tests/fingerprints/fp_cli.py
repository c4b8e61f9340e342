"""A one-task pipeline file writing floats, strings and keys, and the CLI driven in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from twice.cli.app import cli

D1, D2, D3 = "2026-11-23", "2026-11-24", "2026-11-25"
ROWS = 10

PIPELINE = '''
from twice.destinations import open_destination
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

DESTINATION = {destination!r}
SCALE = {scale!r}
MODE = {mode!r}
pipeline = Pipeline("fp_values", schedule=Schedule.daily("UTC"))


@pipeline.task(destination=DESTINATION, safe_repeat=True)
def load(ctx: TaskContext) -> None:
    day = ctx.interval.start.date()
    rows = [{{"day": day, "id": i, "name": f"n{{i}}-{{SCALE}}", "amount": (i + 0.1) * SCALE}}
            for i in range({rows})]
    with open_destination(ctx.destination) as dest:
        if MODE == "upsert":
            dest.upsert(rows, partition=ctx.interval)
        else:
            dest.replace_partition(rows, ctx.interval)
'''


def write_pipeline(folder: Path, destination: str, *, scale: float = 1.0,
                   mode: str = "replace") -> str:
    """(Re)write ``folder/fp_values.py``; a new scale changes every value, not the keys."""
    path = folder / "fp_values.py"
    path.write_text(PIPELINE.format(destination=destination, scale=scale, mode=mode,
                                    rows=ROWS))
    return str(path)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def backfill(pipeline: str, ledger: str, *extra: str, start: str = D1, end: str = D3
             ) -> Result:
    return invoke("backfill", pipeline, "--start", start, "--end", end, "--ledger", ledger,
                  *extra)


def line_of(output: str, day: str) -> str:
    """The output line about the partition starting on ``day``."""
    found = [line for line in output.splitlines() if day in line]
    assert found, f"no line about {day} in:\n{output}"
    return found[0]


def flat(output: str) -> str:
    """Rich wraps long lines at the terminal width: the output as one line of words."""
    return " ".join(output.split())


def unit_line(output: str, day: str, task: str = "load") -> str:
    """A backfill's line about one unit (unwrapped), up to the next unit's line."""
    text = flat(output)
    start = text.index(f"{day} {task} ")
    rest = text[start + len(day):]
    ends = [i for i in (rest.find(" 2026-"), rest.find(" backfill ")) if i >= 0]
    return text[start:start + len(day) + min(ends)] if ends else text[start:]


def verify_lines(result: Result) -> dict[str, str]:
    """``twice verify`` lines by day (the partition's start)."""
    return {day: line_of(result.output, f"  {day}T") for day in (D1, D2)}


def scale_amount(factor: float) -> Any:
    """A Parquet edit: multiply the ``amount`` column."""
    import pyarrow.compute as pc

    def change(table: Any) -> Any:
        index = table.schema.get_field_index("amount")
        return table.set_column(index, "amount", pc.multiply(table["amount"], factor))

    return change
