"""A unit's recorded history, read at once: its record, attempts, observations and decisions.

The planner's evidence (``twice.engine.evidence.gather_evidence``) reads these four for every
decision, and once more at the end of each successful unit. They are independent reads, so on
PostgreSQL those this transaction does not already know are sent together and answered in one
round trip (``prepared.run_ahead``) instead of one each (issue 38). Each is its own module's
read (``units.find_ahead``, ``attempts.all_ahead``, ``journal.entries_ahead``), which keeps
what it reads and skips what the transaction knows as the one-by-one reads do: the result is
the same as the four reads one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Connection

from twice.ledger import attempts as attempt_rows
from twice.ledger import units
from twice.ledger.journal import entries_ahead, known_entries
from twice.ledger.prepared import Ahead, run_ahead
from twice.ledger.records import AttemptRecord, DecisionRecord, ObservationRecord, UnitRecord
from twice.ledger.rows import DECISION, OBSERVATION
from twice.ledger.schema import decisions, observations

History = tuple[UnitRecord | None, list[AttemptRecord], list[ObservationRecord],
                list[DecisionRecord]]

_OBSERVATION_ORDER = ("observed_at", "seq")  # as ObservationStore.all orders them
_DECISION_ORDER = ("seq",)


def unit_history(conn: Connection, uow_id: str, first: Sequence[Ahead] = ()) -> History:
    """The unit's record (None: not recorded), its attempts in number order, observations in
    observation order and decisions in recording order, in ``conn``'s transaction; ``first``:
    statements that change none of them, run before the reads in the same round trip (a lease
    given back)."""
    seen = known_entries(conn, observations, OBSERVATION, uow_id, _OBSERVATION_ORDER)
    decided = known_entries(conn, decisions, DECISION, uow_id, _DECISION_ORDER)
    reads = [
        units.find_ahead(conn, uow_id),
        attempt_rows.all_ahead(conn, uow_id),
        None if seen is not None
        else entries_ahead(observations, OBSERVATION, uow_id, _OBSERVATION_ORDER),
        None if decided is not None
        else entries_ahead(decisions, DECISION, uow_id, _DECISION_ORDER),
    ]
    unit, attempts, seen_now, decided_now = run_ahead(conn, [*first, *reads])[len(first):]
    if reads[0] is None:  # known in this transaction: no read
        unit = units.find(conn, uow_id)
    if reads[1] is None:
        attempts = attempt_rows.all_of(conn, uow_id)
    return (unit, list(attempts), seen if seen is not None else seen_now,
            decided if decided is not None else decided_now)
