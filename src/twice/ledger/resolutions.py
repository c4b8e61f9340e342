"""Operators' resolutions (``twice resolve``) of attempts whose outcome twice could not settle.

A resolution closes the attempt and keeps the operator's note in a ``resolved-*`` observation
from ``operator:<name>``, in one transaction: an assertion by a person, which reports show as
such, never as something twice or a service observed.
"""

from __future__ import annotations

import re

from sqlalchemy import ColumnElement, select
from sqlalchemy.engine import Connection

from twice.core.resolution import CLAIMS
from twice.core.secrets import redact
from twice.ledger import attempts as attempt_rows
from twice.ledger import lease as leasing
from twice.ledger import units
from twice.ledger.checks import count, text
from twice.ledger.errors import LedgerError
from twice.ledger.journal import insert_observation
from twice.ledger.records import (
    OPERATOR_SOURCE_PREFIX,
    RESOLUTION_OUTCOMES,
    RESOLUTION_STATES,
    RESOLVED_ATTEMPT_OUTCOME,
    AttemptRecord,
    ObservationRecord,
    ResolutionOutcome,
    ResolutionRecord,
    operator_source,
    resolution_outcome,
)
from twice.ledger.rows import ATTEMPT, OBSERVATION, first
from twice.ledger.schema import attempts, observations
from twice.ledger.session import Session

#: Attempts an operator may resolve: twice could not settle how they ended.
_RESOLVABLE_OUTCOMES = frozenset({"unknown", "running"})
#: Longest operator name: ``operator:<name>`` must fit the observation's source column.
_MAX_OPERATOR_NAME = 150
_OPERATOR_NAME = re.compile(r"[^\s:][^\r\n\t]*")


class ResolutionStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self, uow_id: str, *, attempt: int | None, outcome: ResolutionOutcome, note: str,
        operator: str,
    ) -> ResolutionRecord:
        if outcome not in RESOLUTION_OUTCOMES:
            raise LedgerError(
                f"outcome must be one of {', '.join(RESOLUTION_OUTCOMES)}, got {outcome!r}"
            )
        note = text(note.strip() if isinstance(note, str) else note, "note")
        note = redact(note)  # an operator may paste a connection string: never kept in clear
        operator = _operator_name(operator)
        if attempt is not None:
            count(attempt, "attempt", minimum=1)
        state = RESOLUTION_STATES[outcome]
        closed_as = RESOLVED_ATTEMPT_OUTCOME[outcome]
        source = operator_source(operator)
        with self._session.write() as conn:
            now = self._session.now()
            units.require(conn, uow_id, lock=True)
            number = attempt_rows.max_number(conn, uow_id) if attempt is None else attempt
            if number == 0:
                raise LedgerError(
                    f"unit of work {uow_id} has no attempt to resolve: it never started"
                )
            current = attempt_rows.locked(conn, uow_id, number)
            if current.outcome not in _RESOLVABLE_OUTCOMES:
                previous = _resolution_of(conn, uow_id, number)
                if previous is not None and previous.state == state and (
                    current.outcome == closed_as
                ):
                    return _resolution_record(current, previous, repeated=True)
                how = ("resolved by " + previous.source if previous is not None
                       else "recorded by twice")
                raise LedgerError(
                    f"attempt {number} of {uow_id} is {current.outcome} ({how}), not unknown "
                    "or running: only an attempt whose outcome twice could not settle can be "
                    "resolved"
                )
            if current.outcome == "running":
                held = leasing.get_lease(conn, uow_id)
                if (held is not None and leasing.in_force(held, now)
                        and held.holder == current.holder):
                    raise LedgerError(
                        f"attempt {number} of {uow_id} is running and {current.holder} holds "
                        f"the unit's lease until {held.expires_at.isoformat()}: it may still "
                        "finish; wait for it to end or for the lease to expire, then resolve it"
                    )
            one_line = " ".join(note.split())
            closed = attempt_rows.close(
                conn, current, closed_as, finished=max(now, current.started_at), recorded_at=now,
                summary=(f"attempt {number} resolved as {closed_as} (--as {outcome}: "
                         f"{CLAIMS[outcome]}): asserted by an operator ({operator}), not "
                         f"observed by twice: {one_line}"),
                resolved_by=source, operator=operator, note=note, asserted=outcome,
            )
            observation = insert_observation(
                conn, uow_id=uow_id, state=state, source=source, observed_at=now,
                recorded_at=now, attempt=number,
                detail={"note": note, "operator": operator, "outcome": outcome,
                        "attempt_outcome": closed_as, "previous_outcome": current.outcome},
                summary=(f"{state} (attempt {number}): asserted by an operator ({operator}): "
                         f"{one_line}"),
            )
        return _resolution_record(closed, observation, repeated=False)

    def all(self, uow_id: str) -> list[ResolutionRecord]:
        query = select(observations).where(*_resolved(uow_id)).order_by(observations.c.seq)
        with self._session.read() as conn:
            found = [OBSERVATION(row) for row in conn.execute(query).mappings()]
            by_number = {
                row["number"]: ATTEMPT(row)
                for row in conn.execute(
                    select(attempts).where(attempts.c.uow_id == uow_id)
                ).mappings()
            }
        return [
            _resolution_record(by_number[record.attempt], record, repeated=False)
            for record in found
            if record.attempt in by_number
        ]


def _resolved(uow_id: str) -> tuple[ColumnElement[bool], ...]:
    """Observations of ``uow_id`` that are operators' resolutions."""
    return (
        observations.c.uow_id == uow_id,
        observations.c.source.startswith(OPERATOR_SOURCE_PREFIX, autoescape=True),
        observations.c.state.in_(list(RESOLUTION_STATES.values())),
    )


def _resolution_of(conn: Connection, uow_id: str, number: int) -> ObservationRecord | None:
    query = (
        select(observations)
        .where(*_resolved(uow_id), observations.c.attempt == number)
        .order_by(observations.c.seq.desc())
        .limit(1)
    )
    return first(conn, query, OBSERVATION)


def _operator_name(value: object) -> str:
    """An operator's name as given (``--operator``, ``$USER``): one line, not blank."""
    name = value.strip() if isinstance(value, str) else value
    if not isinstance(name, str) or not _OPERATOR_NAME.fullmatch(name):
        raise LedgerError(
            f"operator must be a person's name or login on one line, got {value!r}",
            field="operator",
        )
    if len(name) > _MAX_OPERATOR_NAME:
        raise LedgerError(f"operator name is longer than {_MAX_OPERATOR_NAME} characters",
                          field="operator")
    return name


def _resolution_record(
    attempt: AttemptRecord, observation: ObservationRecord, *, repeated: bool
) -> ResolutionRecord:
    detail = observation.detail
    outcome = resolution_outcome(observation.state, observation.source)
    assert outcome is not None
    return ResolutionRecord(
        uow_id=attempt.uow_id,
        outcome=outcome,
        operator=str(detail.get("operator") or observation.source[len(OPERATOR_SOURCE_PREFIX):]),
        note=str(detail.get("note", "")),
        resolved_at=observation.observed_at,
        attempt=attempt,
        observation=observation,
        repeated=repeated,
    )
