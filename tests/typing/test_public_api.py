"""The public API is explicit and type-checked.

``twice.__all__`` (plus ``twice.testing`` and ``twice.drivers.airflow``) is the public API; every
other module path is internal. These tests fail when a name is added or removed without updating
the documented list below, when a public name no longer resolves, when the lazy-import map and
the type checker's imports drift apart, or when ``tests/typing/api.py`` (every public name used
as a pipeline author would) stops type-checking under ``mypy --strict``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

import twice
import twice.drivers.airflow
import twice.testing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
API = HERE / "api.py"

# The documented public API. Changing it is an API change: update README/docs with it.
PUBLIC = {
    # errors
    "TwiceError", "InputError", "ConflictError", "UnavailableError", "Interrupted",
    "DestinationError", "PipelineError", "LedgerError", "FencedWriteError",
    # what tasks raise, record or return
    "OutcomeUnknownError", "NonFatal", "TaskContext", "RemoteState",
    "RemoteJobService", "JobStatus", "JobFailed", "run_job", "submit_or_inspect",
    "wait_for_job", "reconcile_job",
    # what users define with
    "Pipeline", "Schedule", "RetryPolicy", "AcceptanceCriteria", "Interval", "UnitOfWork",
    # what users run with
    "load_pipeline", "Ledger", "Executor", "run_backfill", "open_destination", "fingerprint",
    "retry", "RetryDeadlineExceeded",
    # materialized intermediates
    "Intermediate", "CostModel", "materialize_or_reuse",
    # the pure planner
    "decide", "Decision", "DecisionReport", "DecisionResult", "DecisionWindow", "TaskEvidence",
    "TaskState",
}
TESTING = {"FakeBigQuery", "ManualClock", "no_sleep"}


def test_all_is_the_documented_list() -> None:
    assert set(twice.__all__) == PUBLIC
    assert len(twice.__all__) == len(PUBLIC), "a name is listed twice in twice.__all__"
    assert twice.__all__ == sorted(twice.__all__)
    assert set(twice._EXPORTS) == PUBLIC
    assert set(twice.testing.__all__) == TESTING


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_name_resolves(name: str) -> None:
    value = getattr(twice, name)
    assert value is getattr(importlib.import_module(twice._EXPORTS[name]), name)
    assert name in dir(twice)


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        twice.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_errors_share_one_root() -> None:
    for name in ("InputError", "ConflictError", "UnavailableError", "Interrupted",
                 "DestinationError", "PipelineError", "LedgerError", "FencedWriteError",
                 "OutcomeUnknownError"):
        assert issubclass(getattr(twice, name), twice.TwiceError), name


def test_type_checker_imports_mirror_the_lazy_map() -> None:
    """The ``if TYPE_CHECKING:`` block imports each public name from the module _EXPORTS names,
    so what mypy sees is what ``twice.X`` returns at run time."""
    tree = ast.parse((ROOT / "src" / "twice" / "__init__.py").read_text(encoding="utf-8"))
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.dump(stmt)
                for alias in stmt.names:
                    seen[alias.asname or alias.name] = stmt.module
    assert seen == twice._EXPORTS


def test_airflow_public_names_resolve_without_airflow() -> None:
    lazy = {"to_dag", "TwiceTaskOperator"}  # these two import Airflow itself
    for name in set(twice.drivers.airflow.__all__) - lazy:
        assert getattr(twice.drivers.airflow, name) is not None, name
    assert lazy <= set(twice.drivers.airflow.__all__)


def test_api_usage_imports() -> None:
    """api.py defines a pipeline at import time (pure): the calls mypy checks also run."""
    spec = importlib.util.spec_from_file_location("twice_typing_api", API)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    assert module.problems == []
    assert module.order == ["extract", "load", "notify", "enriched"]
    assert module.prices == [1.0, 2.0]
    assert {r.id for r in module.plan()} <= {"load"}
    assert module.classify(twice.PipelineError(["a", "b"])) == "definition: 2 problem(s)"


def test_api_usage_type_checks() -> None:
    """``mypy --strict`` on api.py, as a user's strict project would check its own code.

    ``--follow-imports=silent`` type-checks twice's own modules as needed for the public
    signatures but reports only api.py; ``mypy src`` (run by .ci/run) checks twice itself.
    """
    mypy_api = pytest.importorskip("mypy.api")
    stdout, stderr, status = mypy_api.run([
        "--config-file", str(ROOT / "pyproject.toml"),
        "--strict",
        "--follow-imports=silent",
        "--no-incremental",
        "--cache-dir=/dev/null",
        str(API),
    ])
    assert status == 0, f"mypy found problems in {API.name}:\n{stdout}{stderr}"
