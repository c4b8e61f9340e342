"""One key style in every command's ``--json``: snake_case.

The reports (``status``, ``explain``, ``update``, ``handover``, ``report``, ``decide
--ledger``) and a few other commands printed camelCase keys (the lab's decision format), the
rest snake_case. Every command now prints its document through :func:`dumps`, which renames the
keys in :data:`RENAMED` (old camelCase -> snake_case) wherever they occur; the library's
documents (``twice.reports.health_document``, ...) keep their keys, only the command line's
output changed. ``TWICE_JSON_KEYS=camel`` prints the old keys, for scripts not yet moved (see
docs/reference/json-output.md, "Key style"). Keys that are data (outcomes, health labels,
task names) are never renamed. ``twice decide`` without ``--ledger`` is the lab program and
keeps the lab's format.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: old key -> key printed since one key style (the compatibility table of the JSON reference)
RENAMED: dict[str, str] = {
    "ageText": "age_text",
    "asOf": "as_of",
    "assertedBy": "asserted_by",
    "attemptOutcome": "attempt_outcome",
    "attemptsInRun": "attempts_in_run",
    "basisLabel": "basis_label",
    "completionGuaranteed": "completion_guaranteed",
    "deadlinePassed": "deadline_passed",
    "earliestStart": "earliest_start",
    "estimatedFinish": "estimated_finish",
    "evidenceAt": "evidence_at",
    "evidenceSource": "evidence_source",
    "healthBasis": "health_basis",
    "healthReason": "health_reason",
    "idempotencyProven": "idempotency_proven",
    "intervalStart": "interval_start",
    "jobId": "job_id",
    "jobsExecuted": "jobs_executed",
    "ledgerUrl": "ledger_url",
    "leftOut": "left_out",
    "needsAttention": "needs_attention",
    "needsFreshEvidence": "needs_fresh_evidence",
    "nextAction": "next_action",
    "observedAt": "observed_at",
    "outputsVerified": "outputs_verified",
    "policySource": "policy_source",
    "previousLedger": "previous_ledger",
    "previousLedgerUrl": "previous_ledger_url",
    "previousOutcome": "previous_outcome",
    "productionApproval": "production_approval",
    "resolvedAt": "resolved_at",
    "staleAt": "stale_at",
    "workdirEnv": "workdir_env",
}

LEGACY_ENV = "TWICE_JSON_KEYS"


def snake_keys(document: Any) -> Any:
    """``document`` with every key of :data:`RENAMED` renamed, at any depth."""
    if isinstance(document, dict):
        return {RENAMED.get(key, key) if isinstance(key, str) else key: snake_keys(value)
                for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [snake_keys(value) for value in document]
    return document


def dumps(document: Any, **options: Any) -> str:
    """``json.dumps`` of a command's ``--json`` document in the one key style (the old keys
    with ``TWICE_JSON_KEYS=camel``)."""
    legacy = os.environ.get(LEGACY_ENV, "").strip().lower() == "camel"
    return json.dumps(document if legacy else snake_keys(document), **options)
