"""twice: make every scheduled task safe to run twice.

The public names are imported lazily so that ``twice decide`` (the lab-compatible command) starts
as fast as ``python3 -c pass`` plus Click; heavy modules (SQLAlchemy, DuckDB, PyArrow) load only
when a caller touches them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "RetryPolicy": "twice.policy",
    "Decision": "twice.decision",
    "TaskEvidence": "twice.decision",
    "DecisionResult": "twice.decision",
    "decide": "twice.decision",
    "Interval": "twice.interval",
    "UnitOfWork": "twice.unit_of_work",
    "Schedule": "twice.schedule",
    "Pipeline": "twice.pipeline",
    "TaskContext": "twice.pipeline",
    "RemoteState": "twice.pipeline",
    "load_pipeline": "twice.pipeline_file",
    "Ledger": "twice.ledger",
    "Executor": "twice.executor",
    "open_destination": "twice.destinations",
    "fingerprint": "twice.fingerprint",
    "AcceptanceCriteria": "twice.acceptance",
    "run_backfill": "twice.backfill",
    "retry": "twice.retrying",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'twice' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
