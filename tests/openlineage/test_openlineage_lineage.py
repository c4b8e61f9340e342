"""Lineage edges: input datasets, names by the OpenLineage naming spec, the schema facet and
the twice run as parent run.

The names are checked against the examples of the spec's dataset naming table
(https://openlineage.io/docs/spec/naming) and against the client's own naming classes; the
PostgreSQL pipeline runs for real (``TWICE_TEST_POSTGRES_URL``) through the client's FILE
transport, and every event it wrote is validated against the OpenLineage JSON schemas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.openlineage.helpers import day, table, write_rows
from tests.openlineage.test_openlineage_events import schema_registry, validate
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine.events import AttemptStarted
from twice.engine.executor import Executor
from twice.ledger import Ledger

pytest.importorskip("openlineage.client")
pytest.importorskip("jsonschema")


@pytest.mark.parametrize(("spec", "namespace", "name"), [
    # Postgres: postgres://{host}:{port}, {database}.{schema}.{table}
    ("postgresql://etl@db:5432/warehouse#public.orders", "postgres://db:5432",
     "warehouse.public.orders"),
    ("postgresql://etl:s3cret@db/warehouse?sslmode=require#orders", "postgres://db:5432",
     "warehouse.public.orders"),
    ("postgres://db:6543/wh?password=s3cret#sales.orders", "postgres://db:6543",
     "wh.sales.orders"),
    # BigQuery: bigquery, {project id}.{dataset name}.{table name}
    ("bq:my-project.sales.orders", "bigquery", "my-project.sales.orders"),
    ("bigquery:my-project.sales.orders", "bigquery", "my-project.sales.orders"),
    # Local file system: file, {path} (file formats are named by their directory)
    ("parquet:///data/orders?partition_column=day", "file", "/data/orders"),
    ("delta:///lake/orders", "file", "/lake/orders"),
    ("iceberg:///wh?partition_column=day#sales.orders", "file", "/wh/sales/orders"),
    ("iceberg:///wh#orders", "file", "/wh/default/orders"),
    ("spark:///wh?partition_column=day#orders", "file", "/wh/orders"),
    ("file:///data/orders.csv", "file", "/data/orders.csv"),
    # S3 and GCS: s3://{bucket name} / gs://{bucket name}, {object key}
    ("s3://raw/orders/2026/", "s3://raw", "orders/2026/"),
    ("gs://raw/orders.json", "gs://raw", "orders.json"),
    # no spec entry: as OpenLineage's dbt integration names dbt-duckdb relations
    ("duckdb:///wh/analytics.duckdb?partition_column=day#sales.orders",
     "duckdb:///wh/analytics.duckdb", "analytics.sales.orders"),
    ("duckdb:///wh/analytics.duckdb#orders", "duckdb:///wh/analytics.duckdb",
     "analytics.main.orders"),
    ("sqlite:///wh/shop.db#orders", "sqlite:///wh/shop.db", "orders"),
    # the spec's general rule: scheme://authority, then the path
    ("mysql://db:3306/shop#orders", "mysql://db:3306", "shop.orders"),
])
def test_datasets_are_named_as_the_naming_spec_says(spec: str, namespace: str, name: str) -> None:
    from twice.engine.dataset_naming import DatasetName, dataset_naming

    found = dataset_naming(spec)
    assert found == DatasetName(namespace, name)
    assert "s3cret" not in found.namespace + found.name


def test_the_names_are_the_clients_own() -> None:
    """Where the spec has an entry, the name is what the client's naming class builds."""
    from openlineage.client.naming import dataset as naming

    from twice.engine.dataset_naming import dataset_naming

    postgres = naming.Postgres(host="db", port="5432", database="warehouse", schema="public",
                               table="orders")
    bigquery = naming.BigQuery(project_id="p", dataset_name="d", table_name="t")
    local = naming.LocalFileSystem(path="/lake/orders")
    for spec, client in [("postgresql://etl@db:5432/warehouse#public.orders", postgres),
                         ("bq:p.d.t", bigquery), ("delta:///lake/orders", local)]:
        found = dataset_naming(spec)
        assert (found.namespace, found.name) == (client.get_namespace(), client.get_name())


def test_a_malformed_bigquery_table_is_bad_input() -> None:
    from twice.engine.dataset_naming import dataset_naming
    from twice.errors import InputError

    with pytest.raises(InputError, match=r"bq:project\.dataset\.table"):
        dataset_naming("bq:sales.orders")


def events_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_dependent_names_its_postgres_upstream_as_input(
    postgres_url: str, ledger: Ledger, lineage_file: Path
) -> None:
    from twice.engine.lineage import lineage_listeners, lineage_run

    url = urlsplit(postgres_url)
    database = url.path.lstrip("/")
    pipeline = Pipeline("shop", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=f"{postgres_url}?partition_column=day#public.orders", timeout=60)
    def orders(ctx: TaskContext) -> Any:
        return write_rows(ctx, 4)

    @pipeline.task(depends_on=[orders], timeout=60,
                   destination=f"{postgres_url}?partition_column=day#public.order_totals")
    def totals(ctx: TaskContext) -> None:
        rows = ctx.read_upstream("orders")
        total = pa.table({"day": rows["day"].slice(0, 1),
                          "total": pa.array([pc.sum(rows["v"]).as_py()], pa.int64())})
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(total, ctx.interval)

    listeners = lineage_listeners(pipeline)
    with lineage_run(listeners):
        result = Executor(pipeline, ledger, clock=ledger.now, sleep=lambda s: None,
                          max_workers=1, listeners=listeners).run(day())
    assert result.ok

    events = events_of(lineage_file)
    registry = schema_registry()
    for event in events:
        validate(event, registry)
    assert "twice:twice@" not in lineage_file.read_text()  # the URL's password never leaves

    namespace = f"postgres://{url.hostname}:{url.port}"
    [done] = [e for e in events
              if e["job"]["name"] == "shop.totals" and e["eventType"] == "COMPLETE"]
    assert [(d["namespace"], d["name"]) for d in done["inputs"]] == [
        (namespace, f"{database}.public.orders")]
    [output] = done["outputs"]
    assert (output["namespace"], output["name"]) == (namespace, f"{database}.public.order_totals")
    assert [(f["name"], f["type"]) for f in output["facets"]["schema"]["fields"]] == [
        ("day", "date"), ("total", "integer")]
    # the upstream's own output is the very dataset: the edge joins
    [upstream] = [e for e in events
                  if e["job"]["name"] == "shop.orders" and e["eventType"] == "COMPLETE"]
    assert (upstream["outputs"][0]["namespace"], upstream["outputs"][0]["name"]) == (
        namespace, f"{database}.public.orders")
    assert upstream["inputs"] == []

    # the twice run: START first, COMPLETE last, the parent (and root) of every attempt's run
    parent = listeners[0].parent
    assert [(e["job"]["name"], e["eventType"]) for e in (events[0], events[-1])] == [
        ("shop", "START"), ("shop", "COMPLETE")]
    assert {events[0]["run"]["runId"], events[-1]["run"]["runId"]} == {parent.run_id}
    for event in events[1:-1]:
        facet = event["run"]["facets"]["parent"]
        assert facet["run"]["runId"] == facet["root"]["run"]["runId"] == parent.run_id
        assert (facet["job"]["namespace"], facet["job"]["name"]) == ("etl-tests", "shop")


def test_declared_inputs_follow_the_upstream_ones(tmp_path: Path, ledger: Ledger,
                                                  lineage_file: Path) -> None:
    from twice.engine.lineage import INPUTS_METADATA, lineage_listeners

    pipeline = Pipeline("declared", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=table(tmp_path, "first"), timeout=30)
    def first(ctx: TaskContext) -> Any:
        return write_rows(ctx, 1)

    @pipeline.task(depends_on=[first], destination=table(tmp_path, "second"), timeout=30,
                   metadata={INPUTS_METADATA: ("bq:raw-project.events.clicks",
                                               "s3://landing/clicks/")})
    def second(ctx: TaskContext) -> Any:
        return write_rows(ctx, 1)

    Executor(pipeline, ledger, clock=ledger.now, sleep=lambda s: None, max_workers=1,
             listeners=lineage_listeners(pipeline)).run(day())
    [start] = [e for e in events_of(lineage_file)
               if e["job"]["name"] == "declared.second" and e["eventType"] == "START"]
    assert [(d["namespace"], d["name"]) for d in start["inputs"]] == [
        (f"duckdb://{tmp_path / 'first.duckdb'}", "first.main.first"),
        ("bigquery", "raw-project.events.clicks"),
        ("s3://landing", "clicks/"),
    ]


class _Captured:
    """A client that keeps what it is asked to emit."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def emit(self, event: Any) -> None:
        self.events.append(event)


def test_a_dbt_model_reads_its_parent_models_sources_and_seeds(tmp_path: Path) -> None:
    """dbt's ``depends_on``: a parent model twice runs is an upstream task; a source, a seed
    or a model without event_time is a declared input, named in the project's DuckDB file."""
    from twice.drivers.dbt import DbtManifest, DbtProject, build_stage, plan_stages
    from twice.engine.lineage import OpenLineageListener

    (tmp_path / "dbt_project.yml").write_text("name: shop\n")
    dbt = tmp_path / "dbt"  # never run: the pipeline is built, not executed
    dbt.write_text("#!/bin/sh\nexit 1\n")
    dbt.chmod(0o755)
    project = DbtProject(project_dir=tmp_path, database=tmp_path / "shop.duckdb", dbt=str(dbt))

    def model(name: str, parents: list[str], event_time: str | None = "day") -> dict[str, Any]:
        return {"unique_id": f"model.shop.{name}", "name": name, "resource_type": "model",
                "schema": "main", "config": {"event_time": event_time},
                "depends_on": {"nodes": parents}, "checksum": {"checksum": name}}

    manifest = {
        "metadata": {"project_name": "shop"},
        "nodes": {
            "model.shop.stg_orders": model("stg_orders", ["source.shop.raw.orders"]),
            "model.shop.fx": model("fx", [], event_time=None),
            "seed.shop.countries": {"unique_id": "seed.shop.countries", "name": "countries",
                                    "resource_type": "seed", "schema": "main",
                                    "checksum": {"checksum": "c"}},
            "model.shop.revenue": model("revenue", ["model.shop.stg_orders", "model.shop.fx",
                                                    "seed.shop.countries"]),
        },
        "sources": {"source.shop.raw.orders": {
            "unique_id": "source.shop.raw.orders", "name": "orders", "identifier": "orders",
            "schema": "raw", "resource_type": "source", "config": {"event_time": "day"}}},
    }
    resolved = DbtManifest(project, manifest, ("model.shop.stg_orders", "model.shop.revenue"))
    inputs: dict[str, list[tuple[str, str]]] = {}
    for stage in plan_stages(resolved):  # one node per stage, each its own twice run
        pipeline = build_stage(resolved, stage)
        client = _Captured()
        listener = OpenLineageListener(pipeline, client=client, namespace="dbt-tests")
        for task in pipeline.tasks:
            listener(AttemptStarted(f"uow-{task}", task, day(), attempt=1, generation=1,
                                    job_id=None, token=1))
        assert [e.eventType.value for e in client.events] == ["START", "START"]
        assert client.events[0].job.name == pipeline.name  # the twice run first
        inputs.update({e.job.name.rsplit(".", 1)[-1]: [(d.namespace, d.name) for d in e.inputs]
                       for e in client.events[1:]})
    namespace = f"duckdb://{tmp_path / 'shop.duckdb'}"
    assert inputs["stg_orders"] == [(namespace, "shop.raw.orders")]
    assert sorted(inputs["revenue"]) == sorted([
        (namespace, "shop.main.stg_orders"), (namespace, "shop.main.fx"),
        (namespace, "shop.main.countries")])
