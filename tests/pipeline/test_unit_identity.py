"""A unit's id hashes its identity as compact sorted JSON; ``identity_json`` writes that text
without ``json.dumps`` (planning hashes one identity a unit), so it must be the same bytes."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork, identity_json

_TEXT = st.text(max_size=30)  # any code point: quotes, backslashes, controls, non-ASCII


@settings(max_examples=300, deadline=None)
@given(identity=st.dictionaries(_TEXT, _TEXT, max_size=9))
def test_identity_json_is_json_dumps_byte_for_byte(identity: dict[str, str]) -> None:
    assert identity_json(identity) == json.dumps(identity, sort_keys=True, separators=(",", ":"))


@settings(max_examples=100, deadline=None)
@given(pipeline=_TEXT, task=_TEXT, destination=_TEXT, version=_TEXT, partition=_TEXT,
       transform=_TEXT, year=st.integers(1, 9998), hours=st.integers(-14, 14))
def test_uow_id_is_the_documented_hash_and_prefix(
    pipeline: str, task: str, destination: str, version: str, partition: str, transform: str,
    year: int, hours: int,
) -> None:
    zone = timezone(timedelta(hours=hours))
    start = datetime(year, 3, 4, 5, 6, tzinfo=zone)
    unit = UnitOfWork(pipeline, task, Interval(start, start + timedelta(hours=1)), destination,
                      transform, input_partition=partition, input_version=version)
    digest = hashlib.sha256(json.dumps(unit.identity(), sort_keys=True,
                                       separators=(",", ":")).encode()).hexdigest()[:12]
    assert unit.uow_id == f"{pipeline}.{task}.{start.strftime('%Y%m%dT%H%M')}.{digest}"
    assert unit._identity_text() == identity_json(unit.identity())


def test_known_units_keep_the_ids_they_had() -> None:
    """Ids are stored in ledgers: these were computed by the ``json.dumps`` code before
    ``identity_json`` (commit 2fa7ee6), and must not change."""
    start = datetime(2026, 11, 30, tzinfo=UTC)
    plain = UnitOfWork("sales", "load", Interval(start, start + timedelta(days=1)),
                       "duckdb:///w.duckdb#t", "1")
    escaped = UnitOfWork("ventes", "chargé", Interval(start, start + timedelta(hours=1)),
                         'd"\\\x01', "1", "p", "v\u2603")
    assert plain.uow_id == "sales.load.20261130T0000.fa22891f930d"
    assert escaped.uow_id == "ventes.chargé.20261130T0000.e03f1f85cbea"
