"""Cost guard: Parquet estimates, refusal over maximum_bytes_billed, executor and CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twice.cli.estimate_cmd import estimate as estimate_cli
from twice.define.pipeline import Pipeline, PipelineError
from twice.define.schedule import Schedule
from twice.engine.cost import CostLimitExceeded, check_limit
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote.dry_run import CostError, ParquetQuery, estimate_parquet

DAYS = ("2024-12-01", "2024-12-02", "2024-12-03")
COLUMNS = ("fund_id", "amount", "currency", "note")


def write_dataset(root: Path, *, sorted_by: str | None = None) -> Path:
    for n, day in enumerate(DAYS):
        part = root / f"business_date={day}"
        part.mkdir(parents=True)
        rows = 400 + 100 * n
        table = pa.table({
            "fund_id": [f"F{i % 17:03d}" for i in range(rows)],
            "amount": [float(i * 3 + n) for i in range(rows)],
            "currency": ["EUR" if i % 2 else "USD" for i in range(rows)],
            "note": [f"movement {i} of day {day}" for i in range(rows)],
        })
        if sorted_by is not None:
            table = table.sort_by(sorted_by)
            sorting = [pq.SortingColumn(table.schema.names.index(sorted_by))]
            pq.write_table(table, part / "p.parquet", row_group_size=100, sorting_columns=sorting)
        else:
            pq.write_table(table, part / "p.parquet", row_group_size=150)
    return root


def chunk_bytes(root: Path, columns: set[str], days: set[str]) -> int:
    """Independent sum of column-chunk sizes straight from the Parquet footers."""
    total = 0
    for day in days:
        meta = pq.ParquetFile(root / f"business_date={day}" / "p.parquet").metadata
        for g in range(meta.num_row_groups):
            for i in range(meta.num_columns):
                chunk = meta.row_group(g).column(i)
                if chunk.path_in_schema in columns:
                    total += chunk.total_compressed_size
    return total


@pytest.fixture
def ds(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "movements")


def test_projection_and_partition_filter_reduce_limit_does_not(ds: Path) -> None:
    sets = {"movements": ds}
    full = estimate_parquet("SELECT * FROM movements", sets)
    assert full.bytes == chunk_bytes(ds, set(COLUMNS), set(DAYS))
    two = estimate_parquet("SELECT fund_id, amount FROM movements", sets)
    assert two.bytes == chunk_bytes(ds, {"fund_id", "amount"}, set(DAYS)) < full.bytes
    assert dict(two.columns) == {
        c: chunk_bytes(ds, {c}, set(DAYS)) for c in ("amount", "fund_id")
    }
    limited = estimate_parquet("SELECT fund_id, amount FROM movements LIMIT 10", sets)
    assert limited.bytes == two.bytes
    assert any("LIMIT does not reduce" in note for note in limited.notes)
    one_day = estimate_parquet(
        "SELECT fund_id, amount FROM movements WHERE business_date = '2024-12-02'", sets
    )
    assert one_day.bytes == chunk_bytes(ds, {"fund_id", "amount"}, {"2024-12-02"})
    assert one_day.partitions == ("business_date=2024-12-02",)
    ranged = estimate_parquet(
        "SELECT sum(amount) FROM movements WHERE business_date >= DATE '2024-12-02' "
        "AND currency = 'EUR'", sets,
    )
    assert ranged.bytes == chunk_bytes(ds, {"amount", "currency"}, {"2024-12-02", "2024-12-03"})
    either = estimate_parquet(  # an OR mixing data columns cannot prune partitions
        "SELECT amount FROM movements WHERE business_date = '2024-12-02' OR amount > 5", sets
    )
    assert either.bytes == chunk_bytes(ds, {"amount"}, set(DAYS))
    assert not full.upper_bound and not ranged.upper_bound


def test_sorted_table_filter_gives_an_upper_bound(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "clustered", sorted_by="fund_id")
    sets = {"clustered": root}
    filtered = estimate_parquet("SELECT amount FROM clustered WHERE fund_id = 'F003'", sets)
    assert filtered.upper_bound
    assert filtered.bytes == chunk_bytes(root, {"amount", "fund_id"}, set(DAYS))
    assert any("upper bound" in note for note in filtered.notes)
    unfiltered = estimate_parquet("SELECT amount FROM clustered", sets)
    assert not unfiltered.upper_bound


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    columns=st.sets(st.sampled_from(COLUMNS), min_size=1),
    days=st.sets(st.sampled_from(DAYS), min_size=1),
    limit=st.one_of(st.none(), st.integers(1, 1000)),
)
def test_estimate_is_the_chunk_sum_of_selected_columns_and_partitions(
    ds: Path, columns: set[str], days: set[str], limit: int | None
) -> None:
    in_list = ", ".join(f"'{d}'" for d in sorted(days))
    sql = (f"SELECT {', '.join(sorted(columns))} FROM movements "
           f"WHERE business_date IN ({in_list})" + (f" LIMIT {limit}" if limit else ""))
    result = estimate_parquet(sql, {"movements": ds})
    assert result.bytes == chunk_bytes(ds, columns, days)
    assert len(result.partitions) == len(days)


def test_bad_queries_name_the_problem(ds: Path) -> None:
    sets = {"movements": ds}
    for sql, fragment in (
        ("SELEC x", "--sql"),
        ("SELECT nope FROM movements", "unknown column"),
        ("SELECT a FROM other", "not a known dataset"),
        ("SELECT m.amount FROM movements m JOIN movements n USING (fund_id)", "one dataset"),
    ):
        with pytest.raises(CostError, match=fragment):
            estimate_parquet(sql, sets)


def test_refusal_names_task_estimate_and_limit(ds: Path) -> None:
    est = estimate_parquet("SELECT amount FROM movements", {"movements": ds})
    check = check_limit("positions", est, est.bytes - 1)
    assert not check.allowed
    with pytest.raises(CostLimitExceeded) as exc:
        check.raise_if_refused()
    assert exc.value.limit == est.bytes - 1
    for part in ("positions", str(est.bytes), str(est.bytes - 1)):
        assert part in str(exc.value)
    assert check_limit("positions", est, est.bytes).allowed


# -- the executor enforces the task's limit before anything is submitted ------------------------


def pipeline_with(ds: Path, limit: int, calls: list[str]) -> Pipeline:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    query = ParquetQuery(
        "SELECT fund_id, amount FROM movements WHERE business_date = '{start}'",
        {"movements": ds},
    )

    @pipeline.task(maximum_bytes_billed=limit, cost_estimate=query, safe_repeat=True)
    def positions(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.interval.label)
        return "ran"

    return pipeline


def test_executor_refuses_over_limit_and_a_rerun_keeps_the_same_limit(
    tmp_path: Path, ds: Path
) -> None:
    needed = chunk_bytes(ds, {"fund_id", "amount"}, {"2024-12-02"})
    interval = Schedule.daily("UTC").interval_for(datetime(2024, 12, 2, tzinfo=UTC))
    calls: list[str] = []
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        pipeline = pipeline_with(ds, needed - 1, calls)
        for _ in range(2):  # the first run and a rerun: both refused, same limit
            unit = Executor(pipeline, ledger).run(interval).unit("positions")
            assert unit.outcome == "failed-permanent"
            assert str(needed) in unit.reason and str(needed - 1) in unit.reason
        assert calls == []
        refusals = [d for d in ledger.decisions(unit.uow_id) if d.not_started]
        assert len(refusals) == 2
        assert [d.detail["limit"] for d in refusals] == [needed - 1, needed - 1]
        assert all(d.detail["estimate"]["bytes"] == needed for d in refusals)
        assert ledger.attempts(unit.uow_id) == []
        allowed = Executor(pipeline_with(ds, needed, calls), ledger).run(interval)
        assert allowed.unit("positions").outcome == "succeeded" and calls == [interval.label]


def test_task_limit_is_validated() -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    for bad in (0, -5, 1.5, True, "100"):
        with pytest.raises(PipelineError, match="maximum_bytes_billed"):
            pipeline.task(name=f"t{abs(hash(str(bad)))}", maximum_bytes_billed=bad)(
                lambda ctx: None
            )


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_allow_refuse_and_bad_input(ds: Path) -> None:
    runner = CliRunner()
    sql = "SELECT fund_id, amount FROM movements WHERE business_date = '2024-12-02' LIMIT 5"
    needed = chunk_bytes(ds, {"fund_id", "amount"}, {"2024-12-02"})
    ok = runner.invoke(estimate_cli, ["--parquet", str(ds), "--sql", sql,
                                      "--limit-bytes", str(needed)])
    assert ok.exit_code == 0, ok.output
    assert f"{needed} bytes" in ok.output and "allow" in ok.output
    assert "LIMIT does not reduce" in ok.output and "amount" in ok.output
    over = runner.invoke(estimate_cli, ["--parquet", f"movements={ds}", "--sql", sql,
                                        "--limit-bytes", str(needed - 1), "--json"])
    assert over.exit_code == 1, over.output
    detail = json.loads(over.output)
    assert detail["allowed"] is False and detail["estimate"]["bytes"] == needed
    for args in (["--parquet", str(ds), "--sql", "SELECT nope FROM movements"],
                 ["--parquet", str(ds / "missing"), "--sql", sql],
                 ["--parquet", str(ds), "--sql", sql, "--limit-bytes", "0"],
                 ["--sql", sql]):
        bad = runner.invoke(estimate_cli, args)
        assert bad.exit_code == 2, (args, bad.output)
        assert "Traceback" not in bad.output


def test_cli_pipeline_task(tmp_path: Path, ds: Path) -> None:
    needed = chunk_bytes(ds, {"fund_id", "amount"}, {"2024-12-02"})
    file = tmp_path / "funds.py"
    file.write_text(
        "from twice.remote.dry_run import ParquetQuery\n"
        "from twice.define.pipeline import Pipeline\nfrom twice.define.schedule import Schedule\n"
        "pipeline = Pipeline('funds', schedule=Schedule.daily('UTC'))\n"
        "@pipeline.task(maximum_bytes_billed=" + str(needed - 1) + ", cost_estimate=ParquetQuery("
        "\"SELECT fund_id, amount FROM movements WHERE business_date = '{start}'\", "
        "{'movements': " + repr(str(ds)) + "}))\n"
        "def positions(ctx):\n    return None\n"
    )
    runner = CliRunner()
    refused = runner.invoke(estimate_cli, [str(file), "--task", "positions",
                                           "--interval", "2024-12-02"])
    assert refused.exit_code == 1, refused.output
    assert "refuse" in refused.output and str(needed) in refused.output
    allowed = runner.invoke(estimate_cli, [str(file), "--task", "positions", "--interval",
                                           "2024-12-02", "--limit-bytes", str(needed)])
    assert allowed.exit_code == 0, allowed.output
    bad = runner.invoke(estimate_cli, [str(file), "--task", "nope", "--interval", "2024-12-02"])
    assert bad.exit_code == 2 and "nope" in bad.output


def test_fake_bigquery_dry_run_and_limit_enforcement() -> None:
    from twice.remote import estimate_query
    from twice.testing.fake_bigquery import FakeBigQuery

    bq = FakeBigQuery()
    bq.plan_estimate("SELECT big", 260, upper_bound=True)
    est = estimate_query(bq, "SELECT big")
    assert est is not None and est.bytes == 260 and est.upper_bound
    assert not check_limit("load", est, 200).allowed
    for generation in (1, 2):  # a retry carries the same limit and fails the same way
        status = bq.submit(f"load_g{generation}", {"query": "SELECT big",
                                                    "maximum_bytes_billed": 200})
        assert status.failed and status.error_result.reason == "bytesBilledLimitExceeded"
    assert [j.config["maximum_bytes_billed"] for j in bq.jobs.values()] == [200, 200]


def test_a_cost_refusal_is_not_retry_eligible_until_the_plan_or_budget_changes(
    tmp_path: Path, ds: Path
) -> None:
    """The planner over the ledger (status, decide --ledger, the run's "next") says repair-cause
    after a refusal, never retry-eligible; a new run with a raised budget still runs."""
    from tests.executor.helpers import planner_decisions

    needed = chunk_bytes(ds, {"fund_id", "amount"}, {"2024-12-02"})
    interval = Schedule.daily("UTC").interval_for(datetime(2024, 12, 2, tzinfo=UTC))
    calls: list[str] = []
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        refused = Executor(pipeline_with(ds, needed - 1, calls), ledger).run(interval)
        unit = refused.unit("positions")
        assert unit.next_decision == "repair-cause"
    planned = planner_decisions(url)["positions"]
    assert planned["decision"] == "repair-cause"
    assert "revise the plan or the budget" in planned["reason"]
    with Ledger.open(url) as ledger:
        allowed = Executor(pipeline_with(ds, needed, calls), ledger).run(interval)
        assert allowed.unit("positions").outcome == "succeeded" and calls == [interval.label]
