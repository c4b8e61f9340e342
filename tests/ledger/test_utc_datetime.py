"""Ledger instants are stored as UTC text on SQLite (their text remembered per instant, issue
38): the same instant spelled in any zone is stored alike, different instants never share a
text (a wall time repeated when the clocks go back is two instants, equal as datetimes), and a
naive datetime is refused every time, whatever was stored before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql, sqlite

from twice.ledger.errors import LedgerError
from twice.ledger.schema import UTCDateTime

ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8)),
         ZoneInfo("Europe/Lisbon"), ZoneInfo("Asia/Jakarta"), ZoneInfo("America/Sao_Paulo")]


@settings(max_examples=300, deadline=None)
@given(moment=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1),
                           timezones=st.sampled_from(ZONES)),
       other=st.sampled_from(ZONES))
def test_an_instant_is_stored_as_its_utc_text_in_any_zone(moment: datetime, other: object
                                                          ) -> None:
    kind, dialect = UTCDateTime(), sqlite.dialect()
    text = kind.process_bind_param(moment, dialect)
    expected = moment.astimezone(UTC).isoformat(timespec="microseconds")
    assert text == expected
    assert kind.process_bind_param(moment.astimezone(other), dialect) == expected  # type: ignore[arg-type]
    later = moment + timedelta(microseconds=1)
    assert kind.process_bind_param(later, dialect) != expected
    if moment.fold == 0:  # the same wall time, the other side of a fold: its own instant
        folded = moment.replace(fold=1)
        assert kind.process_bind_param(folded, dialect) == \
            folded.astimezone(UTC).isoformat(timespec="microseconds")
    assert kind.process_result_value(text, dialect) == moment.astimezone(UTC)
    assert kind.process_bind_param(moment, postgresql.dialect()) == moment.astimezone(UTC)


def test_a_naive_datetime_is_refused_after_its_aware_twin_was_stored() -> None:
    kind, dialect = UTCDateTime(), sqlite.dialect()
    aware = datetime(2026, 1, 1, 12, tzinfo=UTC)
    kind.process_bind_param(aware, dialect)
    with pytest.raises(LedgerError, match="naive datetime"):
        kind.process_bind_param(aware.replace(tzinfo=None), dialect)
