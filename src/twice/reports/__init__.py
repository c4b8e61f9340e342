"""Operator reports built from the ledger: an HTML page, a short status update, a runbook.

All three read one model (``twice.reports.evidence.Evidence``), gathered as of one instant, so
they never disagree; each fact in it is marked decided, executed, verified, assumed or asserted
(by an operator, ``twice resolve``). The ledger records (hence SQLAlchemy) load with this
package, so the CLI commands import it inside their functions and ``twice --help`` stays fast::

    from twice.reports import load_evidence, render_html, render_update, render_handover

    evidence = load_evidence("sqlite:///twice-ledger.db", pipeline="funds_positions")
    Path("report.html").write_text(render_html(evidence), encoding="utf-8")
"""

from __future__ import annotations

from twice.reports.evidence import (
    BASES,
    BASIS_MEANING,
    Assumption,
    Attempt,
    Basis,
    Deadline,
    Decision,
    Evidence,
    Generation,
    Observation,
    OperatorAssertion,
    OutcomeChange,
    PartitionHistory,
    ReportError,
    Status,
    UnitReport,
    gather,
)
from twice.reports.handover import render_handover
from twice.reports.html import render_html
from twice.reports.source import load_evidence
from twice.reports.update import render_update

__all__ = [
    "BASES",
    "BASIS_MEANING",
    "Assumption",
    "Attempt",
    "Basis",
    "Deadline",
    "Decision",
    "Evidence",
    "Generation",
    "Observation",
    "OperatorAssertion",
    "OutcomeChange",
    "PartitionHistory",
    "ReportError",
    "Status",
    "UnitReport",
    "gather",
    "load_evidence",
    "render_handover",
    "render_html",
    "render_update",
]
