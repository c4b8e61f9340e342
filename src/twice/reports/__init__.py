"""Operator reports built from the ledger: an HTML page, a short status update, a runbook.

All three (and ``twice status``) read one model (``twice.reports.gather.Evidence``), gathered
as of one instant, and name each unit's state with the one health vocabulary
(``twice.reports.health.Health``: verified, unknown, held, refused, failed, ...), so they never
disagree; each fact is marked decided, executed, observed, verified, assumed by the caller or
asserted by an operator (``twice resolve``). The ledger records (hence SQLAlchemy) load with this
package, so the CLI commands import it inside their functions and ``twice --help`` stays fast::

    from twice.reports import load_evidence, render_html, render_update, render_handover

    evidence = load_evidence("sqlite:///twice-ledger.db", pipeline="funds_positions")
    Path("report.html").write_text(render_html(evidence), encoding="utf-8")
"""

from __future__ import annotations

from twice.reports.gather import (
    Assumption,
    Attempt,
    Evidence,
    Generation,
    Observation,
    OperatorAssertion,
    OutcomeChange,
    PartitionHistory,
    RecordedDecision,
    ReportError,
    StatedDeadline,
    UnitReport,
    gather,
)
from twice.reports.handover import render_handover
from twice.reports.health import (
    BASES,
    BASIS_LABEL,
    BASIS_MEANING,
    HEALTH_MEANING,
    Basis,
    Health,
    Scope,
    Status,
    health_document,
    scope,
)
from twice.reports.html import render_html
from twice.reports.source import load_evidence
from twice.reports.update import render_update

__all__ = [
    "BASES",
    "BASIS_LABEL",
    "BASIS_MEANING",
    "HEALTH_MEANING",
    "Assumption",
    "Attempt",
    "Basis",
    "Evidence",
    "Generation",
    "Health",
    "Observation",
    "OperatorAssertion",
    "OutcomeChange",
    "PartitionHistory",
    "RecordedDecision",
    "ReportError",
    "Scope",
    "StatedDeadline",
    "Status",
    "UnitReport",
    "gather",
    "health_document",
    "load_evidence",
    "render_handover",
    "render_html",
    "render_update",
    "scope",
]
