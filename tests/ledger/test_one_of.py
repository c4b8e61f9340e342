"""Batch reads by key (``twice.ledger.engine.one_of``): the rows of the keys asked for, on
both engines; on PostgreSQL one array parameter, so every batch sends the same statement text
(an ``IN`` list of hundreds of placeholders was parsed by psycopg on every execution)."""

from __future__ import annotations

from sqlalchemy import select
from tests.ledger.ledger_helpers import make_uow

from twice.ledger import Ledger
from twice.ledger.engine import one_of
from twice.ledger.schema import units


def test_a_batch_reads_exactly_the_keys_asked_for(ledger: Ledger) -> None:
    made = [make_uow(day) for day in range(1, 11)]
    for uow in made:
        ledger.record_unit(uow)
    ids = [uow.uow_id for uow in made]
    texts = set()
    with ledger._session.engine.connect() as conn:
        for asked in (ids[:1], ids[2:7], [*ids[5:], "not-a-unit"], []):
            query = select(units.c.uow_id).where(one_of(conn, units.c.uow_id, asked))
            assert sorted(conn.execute(query).scalars()) == sorted(set(asked) & set(ids))
            if asked:
                texts.add(str(query.compile(conn)))
    if ledger.dialect == "postgresql":
        assert len(texts) == 1, texts  # one statement text whatever the batch's size
        (text,) = texts
        assert "= ANY" in text
