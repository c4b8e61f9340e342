"""A unit's recorded history, read at once: its record, attempts, observations and decisions.

The planner's evidence (``twice.engine.evidence.gather_evidence``) reads these four for every
decision, and once more at the end of each successful unit. They are independent reads, so on
PostgreSQL those this transaction does not already know are sent together and answered in one
round trip (``prepared.run_together``) instead of one each (issue 38). Each is the read its own
module makes, and what a transaction has read or written is used as those modules use it
(``units.known``, ``attempts.known``, ``journal.known_entries``): the result is the same as
the four reads one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from twice.ledger import attempts as attempt_rows
from twice.ledger import units
from twice.ledger.journal import entries_query, known_entries
from twice.ledger.prepared import run_together
from twice.ledger.records import AttemptRecord, DecisionRecord, ObservationRecord, UnitRecord
from twice.ledger.rows import DECISION, OBSERVATION
from twice.ledger.schema import decisions, observations

History = tuple[UnitRecord | None, list[AttemptRecord], list[ObservationRecord],
                list[DecisionRecord]]

_OBSERVATION_ORDER = ("observed_at", "seq")  # as ObservationStore.all orders them
_DECISION_ORDER = ("seq",)


def unit_history(conn: Connection, uow_id: str,
                 first: Sequence[tuple[Any, Mapping[str, Any]]] = ()) -> History:
    """The unit's record (None: not recorded), its attempts in number order, observations in
    observation order and decisions in recording order, in ``conn``'s transaction; ``first``:
    statements (built in ``twice.ledger.prepared``) that change none of them, run before the
    reads in the same round trip (a lease given back)."""
    params = {"uow_id": uow_id}
    unit = units.known(conn, uow_id)
    attempts = attempt_rows.known(conn, uow_id)
    seen = known_entries(conn, observations, OBSERVATION, uow_id, _OBSERVATION_ORDER)
    decided = known_entries(conn, decisions, DECISION, uow_id, _DECISION_ORDER)
    reads: list[tuple[Any, Mapping[str, Any]]] = list(first)
    if unit is None:
        reads.append((units.BY_ID, params))
    if attempts is None:
        reads.append((attempt_rows.ALL, params))
    if seen is None:
        reads.append((entries_query(observations, _OBSERVATION_ORDER), params))
    if decided is None:
        reads.append((entries_query(decisions, _DECISION_ORDER), params))
    answers = iter(run_together(conn, reads)[len(first):])
    if unit is None:
        unit = units.remember(conn, next(answers).all())
    if attempts is None:
        attempts = attempt_rows.remember(conn, uow_id, next(answers).all())
    if seen is None:
        seen = [OBSERVATION(row) for row in next(answers).all()]
    if decided is None:
        decided = [DECISION(row) for row in next(answers).all()]
    return unit, list(attempts), seen, decided
