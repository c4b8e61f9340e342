"""Acceptance criteria: a load that finished may still fail acceptance ("DONE is not success")."""

from __future__ import annotations

from datetime import date

import pytest

from twice.define.acceptance import AcceptanceCriteria, LoadOutcome, evaluate
from twice.destinations import IdentifierError, open_destination
from twice.engine.verification import observe

DAY = date(2026, 11, 30)


def test_done_with_tolerated_bad_records_fails_acceptance() -> None:
    # e.g. a BigQuery load with maxBadRecords=10: DONE, no errorResult, 3 rows dropped
    result = evaluate(AcceptanceCriteria(min_rows=1, max_rejected_rows=0),
                      LoadOutcome(rows=997, rejected_rows=3, nonfatal_errors=0))
    assert not result.passed and not result
    assert result.reasons == ("rejected rows is 3, criterion is rejected rows <= 0",)
    tolerant = evaluate(AcceptanceCriteria(max_rejected_rows=5),
                        LoadOutcome(rows=997, rejected_rows=3, nonfatal_errors=0))
    assert tolerant.passed and "rejected rows <= 5: 3 (ok)" in tolerant.checks


def test_unknown_counts_fail_the_criteria_that_need_them() -> None:
    result = evaluate(AcceptanceCriteria(), LoadOutcome(rows=10))
    assert not result.passed
    assert any("rejected rows was not reported" in r for r in result.reasons)
    assert any("non-fatal errors was not reported" in r for r in result.reasons)
    unchecked = AcceptanceCriteria(max_rejected_rows=None, max_nonfatal_errors=None)
    assert evaluate(unchecked, LoadOutcome(rows=10)).passed


def test_min_rows_and_non_null_columns() -> None:
    criteria = AcceptanceCriteria(min_rows=5, required_non_null=("fund", "amount"))
    result = evaluate(criteria, LoadOutcome(rows=4, rejected_rows=0, nonfatal_errors=2,
                                            null_counts={"fund": 0, "amount": 1}))
    assert result.reasons == (
        "rows is 4, criterion is rows >= 5",
        "non-fatal errors is 2, criterion is non-fatal errors <= 0",
        "nulls in 'amount' is 1, criterion is nulls in 'amount' <= 0",
    )


def test_criteria_validation() -> None:
    with pytest.raises(ValueError, match="min_rows"):
        AcceptanceCriteria(min_rows=-1)
    with pytest.raises(IdentifierError, match="required non-null column"):
        AcceptanceCriteria(required_non_null=("a; --",))


def test_observe_reads_the_destination(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition([{"day": DAY, "fund": "A", "amount": 1},
                            {"day": DAY, "fund": None, "amount": 2}], DAY)
    criteria = AcceptanceCriteria(min_rows=2, required_non_null=("fund", "amount"))
    outcome = observe(dest, DAY, criteria, rejected_rows=0, nonfatal_errors=0)
    assert outcome.rows == 2 and outcome.null_counts == {"fund": 1, "amount": 0}
    result = evaluate(criteria, outcome)
    assert result.reasons == ("nulls in 'fund' is 1, criterion is nulls in 'fund' <= 0",)
