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
    "RetryPolicy": "twice.core.policy",
    "Decision": "twice.core.decision",
    "TaskEvidence": "twice.core.decision",
    "DecisionResult": "twice.core.decision",
    "decide": "twice.core.decision",
    "Interval": "twice.core.interval",
    "UnitOfWork": "twice.core.unit",
    "Schedule": "twice.define.schedule",
    "Pipeline": "twice.define.pipeline",
    "TaskContext": "twice.define.pipeline",
    "RemoteState": "twice.core.outcomes",
    "load_pipeline": "twice.define.load",
    "Ledger": "twice.ledger",
    "Executor": "twice.engine.executor",
    "open_destination": "twice.destinations",
    "fingerprint": "twice.destinations.fingerprint",
    "AcceptanceCriteria": "twice.define.acceptance",
    "run_backfill": "twice.drivers.backfill",
    "retry": "twice.interop.retrying",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'twice' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
