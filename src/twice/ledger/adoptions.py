"""Adoptions: destinations an operator made belong to this ledger (``twice adopt``).

A destination belongs to one ledger (``twice.destinations.commits.check_ledger``). Moving it
to another one is a deliberate act, recorded on both sides: the destination commits an
``adopt`` record, and the adopting ledger keeps who did it, when, why, and which ledger the
destination belonged to before (``twice_adoptions``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import insert, select

from twice.ledger.checks import text
from twice.ledger.schema import adoptions
from twice.ledger.session import Session


@dataclass(frozen=True)
class AdoptionRecord:
    """One ``twice adopt`` as the adopting ledger recorded it."""

    seq: int
    destination: str
    previous: str  # the identity of the ledger it belonged to ("": none)
    previous_at: str  # where that ledger was, password masked ("": unknown)
    token: int  # the token of the destination's ``adopt`` record
    operator: str
    note: str
    adopted_at: datetime


class AdoptionStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(self, destination: str, *, previous: str, previous_at: str, token: int,
               operator: str, note: str) -> AdoptionRecord:
        record = AdoptionRecord(
            seq=0, destination=text(destination, "destination"), previous=previous,
            previous_at=previous_at, token=token, operator=text(operator, "operator"),
            note=text(note, "note"), adopted_at=self._session.now(),
        )
        values = {name: value for name, value in vars(record).items() if name != "seq"}
        with self._session.write() as conn:
            seq = conn.execute(
                insert(adoptions).values(**values).returning(adoptions.c.seq)
            ).scalar_one()
        return replace(record, seq=int(seq))

    def all(self, destination: str | None = None) -> list[AdoptionRecord]:
        query = select(adoptions).order_by(adoptions.c.seq)
        if destination is not None:
            query = query.where(adoptions.c.destination == destination)
        with self._session.read() as conn:
            return [AdoptionRecord(**row._mapping) for row in conn.execute(query)]
