"""``twice airflow describe`` prints a DAG file that is valid Python as printed, never with a
password in it (the README's Airflow section writes such a file)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from twice.cli import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "funds_positions" / "pipeline.py"


def dag_file(*options: str) -> str:
    result = CliRunner().invoke(cli, ["airflow", "describe", str(EXAMPLE), *options])
    assert result.exit_code == 0, result.output
    text = result.output.split("DAG file (put it in Airflow's dags folder):\n", 1)[1]
    return textwrap.dedent(text)


def to_dag_call(source: str) -> ast.Call:
    tree = ast.parse(source)  # a SyntaxError here is the bug the README's users hit
    calls = [node.value for node in tree.body
             if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)]
    assert len(calls) == 1
    return calls[0]


@pytest.mark.parametrize("options, ledger, dag_id", [
    ((), None, None),
    (("--dag-id", "funds"), None, "funds"),
    (("--ledger", "postgresql://etl@db/twice"), "postgresql://etl@db/twice", None),
    (("--ledger", "postgresql://etl:s3cret@db/twice", "--dag-id", "f"), None, "f"),
])
def test_the_dag_file_is_valid_python_with_the_arguments_given(
        options: tuple[str, ...], ledger: str | None, dag_id: str | None) -> None:
    source = dag_file(*options)
    assert "s3cret" not in source
    call = to_dag_call(source)
    assert ast.literal_eval(call.args[0]) == str(EXAMPLE)
    keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert keywords["ledger"] == ledger
    assert keywords.get("dag_id") == dag_id
