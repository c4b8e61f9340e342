"""``@pipeline.task(intermediate=Intermediate(...))`` run by the executor, on real SQLite and
DuckDB stores and a real ledger: a rerun of the same unit reuses the stored slice without
running the task body, a slice changed behind twice's back is refused (with both fingerprints)
and recomputed, a slice past its retention is recomputed, and a refused option registers
nothing and names the option."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from twice import (
    Executor,
    InputError,
    Intermediate,
    Ledger,
    Pipeline,
    PipelineError,
    Schedule,
    TaskContext,
)
from twice.destinations import open_destination
from twice.engine.executor import RunResult

from .conftest import INTERVAL, Counter, HandClock, Store, rows

WEEK = timedelta(days=7)


class Built:
    """A two-task pipeline: ``enriched`` (the intermediate, its body calls counted) and
    ``report``, which reads it back through ``ctx.read_upstream``."""

    def __init__(self, store: Store, tmp_path: Any, *, transform: str = "1") -> None:
        self.body = Counter()
        self.read: list[list[dict[str, Any]]] = []
        self.pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
        self.pipeline.task(
            name="enriched", destination=store.spec, safe_repeat=True, timeout=60,
            transform_version=transform,
            intermediate=Intermediate(owner="team-funds", retention=WEEK),
        )(lambda ctx: self.body())
        report_spec = f"sqlite:///{tmp_path / 'report.db'}?partition_column=day#report"

        @self.pipeline.task(depends_on="enriched", destination=report_spec, write="replace",
                            safe_repeat=True, timeout=60)
        def report(ctx: TaskContext) -> list[dict[str, Any]]:
            upstream = ctx.read_upstream("enriched").to_pylist()
            self.read.append(upstream)
            return [{"day": ctx.interval.start.date(), "n": len(upstream),
                     "tampered": sum(1 for r in upstream if r["v"] == "tampered")}]

    def run(self, ledger: Ledger, clock: HandClock, *, force: bool = False) -> RunResult:
        clock.advance(minutes=1)  # a forced rerun repeats what was recorded before it began
        forced = ("enriched", "report") if force else ()
        result = Executor(self.pipeline, ledger, clock=clock, force=forced).run(INTERVAL)
        assert result.ok, [(u.task, u.outcome, u.reason, u.error) for u in result.units]
        return result


def _action(ledger: Ledger, result: RunResult) -> dict[str, Any]:
    """What the attempt's observation recorded the materialize-or-reuse logic did."""
    uow_id = result.unit("enriched").uow_id
    assert uow_id is not None
    found = [o.detail["intermediate"] for o in ledger.observations(uow_id)
             if o.state == "succeeded" and "intermediate" in (o.detail or {})]
    return dict(found[-1])


def test_a_rerun_reuses_the_stored_slice_without_running_the_task(
    ledger: Ledger, store: Store, clock: HandClock, tmp_path: Any
) -> None:
    built = Built(store, tmp_path)
    first = built.run(ledger, clock)
    assert built.body.calls == 1 and _action(ledger, first)["action"] == "materialized"
    second = built.run(ledger, clock, force=True)
    third = built.run(ledger, clock, force=True)
    assert built.body.calls == 1  # the body ran once; two forced reruns reused its slice
    assert _action(ledger, second)["action"] == _action(ledger, third)["action"] == "reused"
    assert second.unit("enriched").total_attempts == 2  # the unit did run again
    [entry] = ledger.intermediates(name="enriched")
    assert entry.reuse_count == 2 and entry.owner == "team-funds" and entry.status == "active"
    assert entry.partition == INTERVAL.label
    # the dependent read the stored rows each time, and ctx.upstream held them too
    expected = sorted((r["id"], r["v"]) for r in rows())
    assert len(built.read) == 3
    for seen in built.read:
        assert sorted((r["id"], r["v"]) for r in seen) == expected
    assert store.count() == len(rows())


def test_a_tampered_slice_is_refused_with_both_fingerprints_and_recomputed(
    ledger: Ledger, store: Store, clock: HandClock, tmp_path: Any
) -> None:
    built = Built(store, tmp_path)
    built.run(ledger, clock)
    store.sql("UPDATE enriched SET v = 'tampered' WHERE id = 3")  # behind twice's back
    rerun = built.run(ledger, clock, force=True)
    assert built.body.calls == 2  # refused, so the task ran again
    action = _action(ledger, rerun)
    assert action["action"] == "recomputed"
    assert "fingerprint mismatch" in (action["refusal"] or "")
    [refused] = [e for e in ledger.intermediate_events("enriched") if e.action == "refused"]
    recorded, current = refused.detail["recorded"], refused.detail["current"]
    assert recorded["checksum"] != current["checksum"]
    assert recorded["row_count"] == current["row_count"] == len(rows())
    # the slice holds the recomputed rows again; the dependent read those, not the tampered
    assert store.sql("SELECT count(*) FROM enriched WHERE v = 'tampered'") == [(0,)]
    assert all(r["v"] != "tampered" for r in built.read[-1])
    [entry] = ledger.intermediates(name="enriched")
    assert entry.checksum == recorded["checksum"]  # the same rows, the same fingerprint
    assert entry.materializations == 2 and entry.reuse_count == 0
    # and the next rerun reuses the recomputed copy
    built.run(ledger, clock, force=True)
    assert built.body.calls == 2


def test_a_slice_past_its_retention_is_recomputed(
    ledger: Ledger, store: Store, clock: HandClock, tmp_path: Any
) -> None:
    built = Built(store, tmp_path)
    built.run(ledger, clock)
    clock.advance(days=6)
    built.run(ledger, clock, force=True)
    assert built.body.calls == 1  # within the week: reused
    clock.advance(days=2)
    late = built.run(ledger, clock, force=True)
    assert built.body.calls == 2
    action = _action(ledger, late)
    assert action["action"] == "recomputed" and "retention" in action["reason"]
    [entry] = ledger.intermediates(name="enriched")
    assert entry.status == "active" and not entry.expired(ledger.now())


def test_a_new_transform_version_is_a_new_version_computed_anew(
    ledger: Ledger, store: Store, clock: HandClock, tmp_path: Any
) -> None:
    first = Built(store, tmp_path)
    first.run(ledger, clock)
    second = Built(store, tmp_path, transform="2")
    result = second.run(ledger, clock)
    assert second.body.calls == 1
    assert _action(ledger, result)["action"] == "materialized"
    statuses = sorted(e.status for e in ledger.intermediates(name="enriched"))
    assert statuses == ["active", "superseded"]


def test_the_catalog_name_defaults_to_the_task_and_can_be_set(
    ledger: Ledger, store: Store, clock: HandClock
) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.task(name="enrich", destination=store.spec, safe_repeat=True,
                  intermediate=Intermediate(owner="o", retention=WEEK,
                                            name="positions_enriched",
                                            fingerprint_columns=("id", "v")))(
        lambda ctx: rows())
    assert Executor(pipeline, ledger, clock=clock).run(INTERVAL).ok
    [entry] = ledger.intermediates()
    assert entry.name == "positions_enriched" and entry.columns == ("id", "v")
    with open_destination(store.spec) as dest:
        assert dest.read_partition(INTERVAL).num_rows == len(rows())


# --------------------------------------------------------------------------- the option


def _refused(pipeline: Pipeline, **options: Any) -> str:
    with pytest.raises(PipelineError) as caught:
        pipeline.task(name="enriched", **options)(lambda ctx: rows())
    assert "enriched" not in pipeline  # a refused option registers nothing
    return str(caught.value)


def test_a_refused_intermediate_option_registers_nothing_and_names_it(store: Store) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    kept = Intermediate(owner="team-funds", retention=WEEK)
    message = _refused(pipeline, destination=store.spec, intermediate={"owner": "x"})
    assert "intermediate must be a twice.Intermediate" in message
    message = _refused(pipeline, intermediate=kept)
    assert "intermediate=" in message and "destination=" in message
    unpartitioned = store.spec.replace("partition_column=day&", "")
    message = _refused(pipeline, destination=unpartitioned, intermediate=kept)
    assert "intermediate=" in message and "partition_column" in message
    message = _refused(pipeline, destination="bigquery://p/d#t", intermediate=kept)
    assert "intermediate=" in message
    message = _refused(pipeline, destination=store.spec, write="append", intermediate=kept)
    assert "intermediate=" in message and "write='append'" in message
    message = _refused(pipeline, destination=store.spec, intermedate=kept)
    assert "unknown option 'intermedate'; did you mean 'intermediate'?" in message
    assert len(pipeline) == 0
    # accepted: write="replace" is implied
    pipeline.task(name="enriched", destination=store.spec, intermediate=kept)(lambda ctx: 1)
    assert pipeline.get_task("enriched").write == "replace"


@pytest.mark.parametrize("fields,named", [
    ({"owner": "", "retention": WEEK}, "owner"),
    ({"owner": "o", "retention": 7}, "retention"),
    ({"owner": "o", "retention": timedelta(0)}, "retention"),
    ({"owner": "o", "retention": WEEK, "name": ""}, "name"),
    ({"owner": "o", "retention": WEEK, "fingerprint_columns": "id"}, "fingerprint_columns"),
])
def test_intermediate_fields_are_checked_and_named(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InputError, match=f"Intermediate {named} must be"):
        Intermediate(**fields)


def test_process_isolation_is_refused_for_an_intermediate_task(
    ledger: Ledger, store: Store
) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.task(name="enriched", destination=store.spec,
                  intermediate=Intermediate(owner="o", retention=WEEK))(lambda ctx: rows())
    pipeline.source_file = store.path  # as if loaded from a file
    with pytest.raises(ValueError, match="isolation='process' cannot run task 'enriched'"):
        Executor(pipeline, ledger, isolation="process")
