"""The planner's decisions, with the evidence time they were taken from.

A decision may withhold an attempt (``not_started``): the attempt it names is never written,
so attempt numbering and counts stay true, and the number is in the decision only.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from twice.ledger import attempts, units
from twice.ledger.checks import aware, count, text
from twice.ledger.errors import LedgerError
from twice.ledger.journal import append_entry, unit_entries
from twice.ledger.records import DECISIONS, DecisionName, DecisionRecord
from twice.ledger.rows import DECISION, encode_detail
from twice.ledger.schema import decisions
from twice.ledger.session import Session


class DecisionStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self, uow_id: str, decision: DecisionName, *, reason: str, as_of: datetime | None,
        attempt: int | None, not_started: bool, detail: Mapping[str, Any] | None,
    ) -> DecisionRecord:
        name = getattr(decision, "value", decision)
        if name not in DECISIONS:
            raise LedgerError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
        reason = text(reason, "reason")
        detail_text = encode_detail(detail)
        with self._session.write() as conn:
            now = self._session.now()
            evaluated = now if as_of is None else aware(as_of, "as_of")
            if not_started:
                units.require(conn, uow_id, lock=True)
                if attempt is None:
                    attempt = attempts.max_number(conn, uow_id) + 1
                else:
                    count(attempt, "attempt", minimum=1)
            else:
                units.require(conn, uow_id, attempt=attempt)
            summary = f"decided {name}: {reason}"
            if not_started:
                summary += f" (attempt {attempt} not started)"
            row = append_entry(
                conn, decisions,
                {"uow_id": uow_id, "attempt": attempt, "not_started": not_started,
                 "decision": name, "reason": reason, "as_of": evaluated, "recorded_at": now,
                 "detail": detail_text},
                kind="decision", summary=summary,
                data={"decision": name, "as_of": evaluated, "not_started": not_started},
            )
        return DECISION(row)

    def all(self, uow_id: str) -> list[DecisionRecord]:
        with self._session.read() as conn:
            return unit_entries(conn, decisions, DECISION, uow_id)
