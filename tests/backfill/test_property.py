"""Property: any sequence of runs, reruns and backfills (with faults) ends as one clean run."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.backfill import helpers

from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger

DAYS = 3
SPANS = helpers.intervals(DAYS)

op = st.one_of(
    st.tuples(st.just("run"), st.integers(0, DAYS - 1)),
    st.tuples(st.just("rerun"), st.integers(0, DAYS - 1)),
    st.tuples(st.just("backfill"), st.integers(0, DAYS - 1), st.integers(1, DAYS),
              st.booleans()),
)


@cache
def clean_reference() -> tuple[dict, dict]:
    root = Path(tempfile.mkdtemp(prefix="twice-clean-"))
    helpers.make_workdir(root, DAYS)
    with Ledger.open(f"sqlite:///{root / 'ledger.db'}") as ledger:
        assert run_backfill(helpers.example().build_pipeline(root), ledger, SPANS).ok
    return helpers.fingerprints(root, SPANS), helpers.contents(root)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=3), faulty=st.booleans())
def test_any_sequence_equals_one_clean_run(ops: list[tuple], faulty: bool) -> None:
    want_fps, want_rows = clean_reference()
    with tempfile.TemporaryDirectory(prefix="twice-prop-") as tmp:
        root = helpers.make_workdir(Path(tmp), DAYS)
        plan = helpers.example().FaultPlan(
            transient_extract={SPANS[0].start.date(): 1}, lost_ack_load={SPANS[1].start.date()}
        ) if faulty else None
        pipeline = helpers.example().build_pipeline(root, plan)
        touched: set[int] = set()
        with Ledger.open(f"sqlite:///{root / 'ledger.db'}") as ledger:
            for item in ops:
                if item[0] in ("run", "rerun"):
                    chosen = [item[1]]
                    force = item[0] == "rerun"
                else:
                    lo = min(item[1], item[2] - 1)
                    chosen, force = list(range(lo, item[2])), item[3]
                result = run_backfill(pipeline, ledger, [SPANS[i] for i in chosen],
                                      concurrency=2, force=force)
                assert result.ok, result.to_dict()
                touched.update(chosen)
        labels = {SPANS[i].label for i in touched}
        got = helpers.fingerprints(root, SPANS)
        assert {k: v for k, v in got.items() if k[1] in labels} == {
            k: v for k, v in want_fps.items() if k[1] in labels}
        assert all(v[0] == 0 for k, v in got.items() if k[1] not in labels)
        days = {SPANS[i].start.date() for i in touched}
        rows = helpers.contents(root)
        for table, want in want_rows.items():
            assert rows[table] == [r for r in want if r[0] in days], table
        assert helpers.duplicates(root) == 0
