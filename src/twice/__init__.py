"""twice: make every scheduled task safe to run twice.

The public API is the names in ``twice.__all__``, plus ``twice.testing`` (a manual clock, a fake
BigQuery, for users' own tests) and ``twice.drivers.airflow`` (their ``__all__``). Every other
module path (``twice.core.policy``, ``twice.engine.executor``, ...) is internal and may move
between releases: import from ``twice`` instead. ``tests/typing/api.py`` exercises every public
name and is checked by mypy, so a removed or retyped export fails the tests.

The public names are imported lazily so that ``twice decide`` (the lab-compatible command) starts
as fast as ``python3 -c pass`` plus Click; heavy modules (SQLAlchemy, DuckDB, PyArrow) load only
when a caller touches them. Type checkers see the real definitions through the
``TYPE_CHECKING`` imports below, which mirror ``_EXPORTS`` (a test keeps them in step).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it (the runtime side of the lazy import)
_EXPORTS: dict[str, str] = {
    # errors: one root, kinds callers branch on (the CLI maps them to exit codes)
    "TwiceError": "twice.errors",
    "InputError": "twice.errors",
    "ConflictError": "twice.errors",
    "UnavailableError": "twice.errors",
    "Interrupted": "twice.errors",
    "DestinationError": "twice.errors",
    "PipelineError": "twice.define.pipeline",
    "LedgerError": "twice.ledger.errors",
    "FencedWriteError": "twice.destinations.commits",
    # what a task raises, records or returns
    "OutcomeUnknownError": "twice.errors",
    "NonFatal": "twice.define.pipeline",
    "TaskContext": "twice.define.pipeline",
    "RemoteState": "twice.core.outcomes",
    # remote jobs under client-selected ids (the helpers a task uses)
    "RemoteJobService": "twice.remote.jobs",
    "JobStatus": "twice.remote.jobs",
    "JobFailed": "twice.remote.jobs",
    "run_job": "twice.remote.jobs",
    "submit_or_inspect": "twice.remote.jobs",
    "wait_for_job": "twice.remote.jobs",
    "reconcile_job": "twice.remote.jobs",
    # what users define with
    "Pipeline": "twice.define.pipeline",
    "Schedule": "twice.define.schedule",
    "RetryPolicy": "twice.core.policy",
    "AcceptanceCriteria": "twice.define.acceptance",
    "Intermediate": "twice.define.intermediate",
    "Interval": "twice.core.interval",
    "UnitOfWork": "twice.core.unit",
    # what users run with
    "load_pipeline": "twice.define.load",
    "Ledger": "twice.ledger",
    "Executor": "twice.engine.executor",
    "run_backfill": "twice.drivers.backfill",
    "open_destination": "twice.destinations",
    "fingerprint": "twice.destinations.fingerprint",
    "retry": "twice.interop.retrying",
    # materialized intermediates outside a task's intermediate= option, and their pricing
    "materialize_or_reuse": "twice.engine.intermediates",
    "CostModel": "twice.engine.intermediates",
    "RetryDeadlineExceeded": "twice.interop.retrying",
    # the pure planner (the lab's decision engine)
    "decide": "twice.core.decision",
    "Decision": "twice.core.decision",
    "DecisionReport": "twice.core.decision",
    "DecisionResult": "twice.core.decision",
    "DecisionWindow": "twice.core.decision",
    "TaskEvidence": "twice.core.decision",
    "TaskState": "twice.core.decision",
}

if TYPE_CHECKING:
    from twice.core.decision import (
        Decision,
        DecisionReport,
        DecisionResult,
        DecisionWindow,
        TaskEvidence,
        TaskState,
        decide,
    )
    from twice.core.interval import Interval
    from twice.core.outcomes import RemoteState
    from twice.core.policy import RetryPolicy
    from twice.core.unit import UnitOfWork
    from twice.define.acceptance import AcceptanceCriteria
    from twice.define.intermediate import Intermediate
    from twice.define.load import load_pipeline
    from twice.define.pipeline import (
        NonFatal,
        Pipeline,
        PipelineError,
        TaskContext,
    )
    from twice.define.schedule import Schedule
    from twice.destinations import open_destination
    from twice.destinations.commits import FencedWriteError
    from twice.destinations.fingerprint import fingerprint
    from twice.drivers.backfill import run_backfill
    from twice.engine.executor import Executor
    from twice.engine.intermediates import CostModel, materialize_or_reuse
    from twice.errors import (
        ConflictError,
        DestinationError,
        InputError,
        Interrupted,
        OutcomeUnknownError,
        TwiceError,
        UnavailableError,
    )
    from twice.interop.retrying import RetryDeadlineExceeded, retry
    from twice.ledger import Ledger
    from twice.ledger.errors import LedgerError
    from twice.remote.jobs import (
        JobFailed,
        JobStatus,
        RemoteJobService,
        reconcile_job,
        run_job,
        submit_or_inspect,
        wait_for_job,
    )


if not TYPE_CHECKING:  # hidden from type checkers: an unknown ``twice.X`` must be an error

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'twice' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


# A literal list (type checkers read it); tests/typing/test_public_api.py keeps it equal to
# _EXPORTS and to the documented list.
__all__ = [
    "AcceptanceCriteria",
    "ConflictError",
    "CostModel",
    "Decision",
    "DecisionReport",
    "DecisionResult",
    "DecisionWindow",
    "DestinationError",
    "Executor",
    "FencedWriteError",
    "InputError",
    "Intermediate",
    "Interrupted",
    "Interval",
    "JobFailed",
    "JobStatus",
    "Ledger",
    "LedgerError",
    "NonFatal",
    "OutcomeUnknownError",
    "Pipeline",
    "PipelineError",
    "RemoteJobService",
    "RemoteState",
    "RetryDeadlineExceeded",
    "RetryPolicy",
    "Schedule",
    "TaskContext",
    "TaskEvidence",
    "TaskState",
    "TwiceError",
    "UnavailableError",
    "UnitOfWork",
    "decide",
    "fingerprint",
    "load_pipeline",
    "materialize_or_reuse",
    "open_destination",
    "reconcile_job",
    "retry",
    "run_backfill",
    "run_job",
    "submit_or_inspect",
    "wait_for_job",
]
