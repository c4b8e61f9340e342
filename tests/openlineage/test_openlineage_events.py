"""OpenLineage run events for a faulted run, through the real client's FILE transport.

A small pipeline runs through the Executor with three faults: a transient error then a success
(``flaky``), an outcome unknown settled by ``reconcile=`` finding the job succeeded (``remote``),
and an output that fails its acceptance criteria (``checked``). The file transport is configured
the standard way (``OPENLINEAGE__TRANSPORT__*`` in the environment); every event it wrote is
validated against the OpenLineage JSON schemas the client's classes name in ``_schemaURL``
(vendored in ``schemas/``: the client ships the URLs, not the files; the test checks each
vendored file's ``$id`` is the very URL the client stamps), then the runs are checked: one run
per attempt, its event types, and its facets' values.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.openlineage.helpers import day, table, write_rows
from twice.core.policy import RetryPolicy
from twice.define.acceptance import AcceptanceCriteria
from twice.define.pipeline import Pipeline, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor, RunResult
from twice.errors import OutcomeUnknownError
from twice.ledger import Ledger

pytest.importorskip("openlineage.client")
jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

SCHEMAS = Path(__file__).parent / "schemas"


def faulted_pipeline(tmp_path: Path) -> Pipeline:
    pipeline = Pipeline("faulted", schedule=Schedule.daily("UTC"))
    flaky_errors = iter([ConnectionError("warehouse connection reset"), None])

    @pipeline.task(destination=table(tmp_path, "flaky"), safe_repeat=True, timeout=30,
                   retry=RetryPolicy(max_attempts=2, transient=(ConnectionError,)),
                   acceptance=AcceptanceCriteria(min_rows=1, max_rejected_rows=0))
    def flaky(ctx: TaskContext) -> Any:
        error = next(flaky_errors)
        if error is not None:
            raise error
        return write_rows(ctx, 3)

    def reconcile(job_id: str, ctx: TaskContext) -> RemoteState:
        return RemoteState.SUCCEEDED  # the service says: that job ran to completion

    @pipeline.task(reconcile=reconcile, timeout=30)
    def remote(ctx: TaskContext) -> None:
        raise OutcomeUnknownError(f"acknowledgement of job {ctx.job_id} lost")

    @pipeline.task(destination=table(tmp_path, "checked"), timeout=30,
                   acceptance=AcceptanceCriteria(min_rows=5, max_rejected_rows=None,
                                                 required_non_null=("v",)))
    def checked(ctx: TaskContext) -> Any:
        return write_rows(ctx, 2)

    return pipeline


def run_faulted(tmp_path: Path, ledger: Ledger) -> tuple[RunResult, Any]:
    from twice.engine.lineage import lineage_listeners, lineage_run

    pipeline = faulted_pipeline(tmp_path)
    listeners = lineage_listeners(pipeline)
    assert len(listeners) == 1  # on: the transport is configured the standard way
    clock = ledger.now
    with lineage_run(listeners):
        result = Executor(pipeline, ledger, clock=clock, sleep=lambda s: None,
                          poll_interval=0.01, max_workers=1, listeners=listeners).run(day())
    return result, listeners[0]


def schema_registry() -> Any:
    from referencing import Registry, Resource

    resources = []
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


def validate(event: dict[str, Any], registry: Any) -> None:
    """The event against the RunEvent schema, and every facet against its own schema."""
    from jsonschema import Draft202012Validator

    def check(instance: Any, url: str) -> None:
        validator = Draft202012Validator({"$ref": url}, registry=registry)
        errors = sorted(validator.iter_errors(instance), key=str)
        assert not errors, f"{url}: {errors[0].message} at {list(errors[0].absolute_path)}"

    check(event, event["schemaURL"])
    facets = [*event["run"]["facets"].values(), *event["job"]["facets"].values()]
    for output in [*event["inputs"], *event["outputs"]]:
        facets += [*output.get("facets", {}).values(), *output.get("outputFacets", {}).values()]
    for facet in facets:
        # a facet's _schemaURL is "<schema $id>#/$defs/<Facet>": validate against that definition
        check(facet, facet["_schemaURL"])


def test_vendored_schemas_are_the_ones_the_client_names() -> None:
    from openlineage.client.event_v2 import RunEvent
    from openlineage.client.facet_v2 import (
        data_quality_assertions_dataset,
        error_message_run,
        external_query_run,
        job_type_job,
        nominal_time_run,
        output_statistics_output_dataset,
        parent_run,
        schema_dataset,
        tags_run,
    )

    ids = {json.loads(p.read_text())["$id"] for p in SCHEMAS.glob("*.json")}
    named = [RunEvent._get_schema()] + [
        cls._get_schema() for cls in (
            data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet,
            error_message_run.ErrorMessageRunFacet, external_query_run.ExternalQueryRunFacet,
            job_type_job.JobTypeJobFacet, nominal_time_run.NominalTimeRunFacet,
            output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet,
            parent_run.ParentRunFacet, schema_dataset.SchemaDatasetFacet,
            tags_run.TagsRunFacet,  # the client adds its version as a tag
        )
    ]
    assert {url.partition("#")[0] for url in named} == ids


def test_a_faulted_run_emits_one_valid_run_per_attempt(
    tmp_path: Path, ledger: Ledger, lineage_file: Path
) -> None:
    from twice.engine.lineage import attempt_run_id

    result, listener = run_faulted(tmp_path, ledger)
    assert [u.outcome for u in result.units] == ["succeeded", "succeeded", "failed-permanent"]
    assert listener.failures == 0

    events = [json.loads(line) for line in lineage_file.read_text().splitlines()]
    registry = schema_registry()
    for event in events:
        validate(event, registry)

    # the twice run itself: START before every attempt's event, FAIL after (a unit failed)
    assert events[0]["job"]["name"] == events[-1]["job"]["name"] == "faulted"
    assert [events[0]["eventType"], events[-1]["eventType"]] == ["START", "FAIL"]
    assert {events[0]["run"]["runId"], events[-1]["run"]["runId"]} == {listener.parent.run_id}
    assert events[0]["job"]["facets"]["jobType"]["jobType"] == "PIPELINE"
    assert "checked" in events[-1]["run"]["facets"]["errorMessage"]["message"]
    events = events[1:-1]
    assert all(e["job"]["name"] != "faulted" for e in events)

    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        runs[event["run"]["runId"]].append(event)
    by_attempt = {}
    for unit in result.units:
        assert unit.uow_id is not None
        for attempt in ledger.attempts(unit.uow_id):
            run_id = attempt_run_id(unit.uow_id, attempt.number, day())
            by_attempt[(unit.task, attempt.number)] = (run_id, attempt)
    # one run per attempt, and no other run
    assert set(runs) == {run_id for run_id, _ in by_attempt.values()}
    assert len(by_attempt) == 4  # flaky x2, remote x1, checked x1

    def types(task: str, number: int) -> list[str]:
        return [e["eventType"] for e in runs[by_attempt[(task, number)][0]]]

    assert types("flaky", 1) == ["START", "FAIL"]
    assert types("flaky", 2) == ["START", "COMPLETE"]
    assert types("remote", 1) == ["START", "OTHER", "COMPLETE"]  # unknown, then reconciled
    assert types("checked", 1) == ["START", "FAIL"]

    interval = day()
    for (task, _number), (run_id, attempt) in by_attempt.items():
        for event in runs[run_id]:
            facets = event["run"]["facets"]
            assert event["job"] == {**event["job"], "namespace": "etl-tests",
                                    "name": f"faulted.{task}"}
            assert facets["nominalTime"]["nominalStartTime"] == interval.start.isoformat()
            assert facets["nominalTime"]["nominalEndTime"] == interval.end.isoformat()
            assert facets["externalQuery"]["externalQueryId"] == attempt.job_id
            assert facets["externalQuery"]["source"] == "twice"
            parent = facets["parent"]
            assert (parent["job"]["namespace"], parent["job"]["name"]) == ("etl-tests", "faulted")
            assert parent["run"]["runId"] == listener.parent.run_id
    # every attempt's run has the one twice run as parent
    assert len({e["run"]["facets"]["parent"]["run"]["runId"] for e in events}) == 1

    def event(task: str, number: int, kind: str) -> dict[str, Any]:
        [found] = [e for e in runs[by_attempt[(task, number)][0]] if e["eventType"] == kind]
        return found

    failed = event("flaky", 1, "FAIL")
    assert "warehouse connection reset" in failed["run"]["facets"]["errorMessage"]["message"]
    assert failed["run"]["facets"]["errorMessage"]["programmingLanguage"] == "python"

    done = event("flaky", 2, "COMPLETE")
    [output] = done["outputs"]
    assert (output["namespace"], output["name"]) == (f"duckdb://{tmp_path / 'flaky.duckdb'}",
                                                     "flaky.main.flaky")
    assert [(f["name"], f["type"]) for f in output["facets"]["schema"]["fields"]] == [
        ("day", "date"), ("v", "integer")]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 3
    assertions = output["facets"]["dataQualityAssertions"]["assertions"]
    assert {(a["assertion"], a["success"], a["actual"]) for a in assertions} == {
        ("row_count", True, "3"), ("rejected_rows", True, "0"), ("nonfatal_errors", True, "0")}

    other = event("remote", 1, "OTHER")
    assert "outcome is unknown" in other["run"]["facets"]["errorMessage"]["message"]
    assert event("remote", 1, "COMPLETE")["outputs"] == []  # no destination: a remote job

    refused = event("checked", 1, "FAIL")
    assert "acceptance failed" in refused["run"]["facets"]["errorMessage"]["message"]
    [output] = refused["outputs"]
    assert "outputStatistics" not in output.get("outputFacets", {})
    checks = {a["name"]: a for a in output["facets"]["dataQualityAssertions"]["assertions"]}
    assert checks["rows >= 5"]["success"] is False and checks["rows >= 5"]["actual"] == "2"
    assert checks["nulls in 'v' <= 0"] == {**checks["nulls in 'v' <= 0"], "assertion": "not_null",
                                           "column": "v", "success": True}


def test_a_transport_that_fails_never_fails_the_run(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch, lineage_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a file transport whose directory does not exist: every emit raises in the client
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH",
                       str(tmp_path / "missing" / "events.ndjson"))
    with caplog.at_level("WARNING", logger="twice.lineage"):
        result, listener = run_faulted(tmp_path, ledger)
    assert [u.outcome for u in result.units] == ["succeeded", "succeeded", "failed-permanent"]
    assert listener.failures == 11  # every event of the faulted run (see the test above)
    assert "OpenLineage event for flaky not emitted" in caplog.text


def test_the_same_attempt_has_the_same_run_id_everywhere() -> None:
    from twice.engine.lineage import attempt_run_id

    first = attempt_run_id("uow-1", 1, day())
    assert first == attempt_run_id("uow-1", 1, day())
    assert first != attempt_run_id("uow-1", 2, day()) != attempt_run_id("uow-2", 1, day())
    assert first[14] == "7"  # a UUIDv7, as the spec recommends


@pytest.mark.parametrize(("env", "files", "on"), [
    ({}, [], False),
    ({"OPENLINEAGE_URL": "http://marquez:5000"}, [], True),
    ({"OPENLINEAGE_CONFIG": "/etc/ol.yml"}, [], True),
    ({"OPENLINEAGE__TRANSPORT__TYPE": "console"}, [], True),
    ({}, ["openlineage.yml"], True),
    ({}, [".openlineage/openlineage.yml"], True),
    ({"TWICE_OPENLINEAGE": "1"}, [], True),
    ({"TWICE_OPENLINEAGE": "0", "OPENLINEAGE_URL": "http://marquez:5000"}, [], False),
    ({"OPENLINEAGE_DISABLED": "true", "OPENLINEAGE_URL": "http://marquez:5000"}, [], False),
])
def test_emitting_is_on_when_openlineage_is_configured_the_standard_way(
    tmp_path: Path, env: dict[str, str], files: list[str], on: bool
) -> None:
    from twice.engine.lineage import openlineage_configured

    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("transport:\n  type: console\n")
    assert openlineage_configured(env, cwd=tmp_path, home=tmp_path) is on


@pytest.mark.parametrize("value", ["disabled", "nope", "2"])
def test_a_switch_value_that_is_neither_on_nor_off_is_refused(tmp_path: Path,
                                                              value: str) -> None:
    """Ignored, ``TWICE_OPENLINEAGE=disabled`` would emit whenever OpenLineage is configured:
    the opposite of what it says. Refused, naming the variable, wherever it is read (the
    CLI and the Airflow operator)."""
    from twice.engine.lineage import openlineage_configured
    from twice.errors import InputError

    (tmp_path / "openlineage.yml").write_text("transport:\n  type: console\n")
    with pytest.raises(InputError, match=r"TWICE_OPENLINEAGE: .* is not one of its values"):
        openlineage_configured({"TWICE_OPENLINEAGE": value}, cwd=tmp_path, home=tmp_path)


def test_a_password_never_reaches_the_dataset_name() -> None:
    from twice.engine.lineage import dataset_name

    namespace, name = dataset_name("postgresql://etl:s3cret@db:5432/warehouse#public.orders")
    assert (namespace, name) == ("postgres://db:5432", "warehouse.public.orders")
    namespace, name = dataset_name("postgresql://etl@db/warehouse?password=s3cret#orders")
    assert "s3cret" not in namespace + name


def test_nothing_configured_imports_no_openlineage(tmp_path: Path) -> None:
    """The CLI stays fast: with OpenLineage not configured the client is never imported."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from twice.define.pipeline import Pipeline\n"
        "from twice.define.schedule import Schedule\n"
        "from twice.engine.lineage import lineage_listeners\n"
        "assert lineage_listeners(Pipeline('p', schedule=Schedule.daily('UTC'))) == []\n"
        "assert not [m for m in sys.modules if m.startswith('openlineage')], 'imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE", "TWICE_OPEN"))}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_configured_without_the_client_warns_and_runs_without_lineage(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sys

    from twice.engine.lineage import lineage_listeners

    monkeypatch.setitem(sys.modules, "openlineage.client", None)  # "not installed"
    with caplog.at_level("WARNING", logger="twice.lineage"):
        listeners = lineage_listeners(Pipeline("p", schedule=Schedule.daily("UTC")),
                                      environ={"OPENLINEAGE_URL": "http://x"})
    assert listeners == []
    assert "openlineage-python is not installed" in caplog.text


def test_an_unknown_outcome_settled_from_the_commit_record_completes_its_run(
    tmp_path: Path, ledger: Ledger, lineage_file: Path
) -> None:
    """The write landed, then the acknowledgement was lost: the run stays open (OTHER) until
    the commit record settles it, then COMPLETE with the rows the verified output holds."""
    from twice.engine.lineage import lineage_listeners

    pipeline = Pipeline("acked", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=table(tmp_path, "acked"), timeout=30)
    def load(ctx: TaskContext) -> None:
        write_rows(ctx, 6)
        raise OutcomeUnknownError("the warehouse dropped the connection after the commit")

    result = Executor(pipeline, ledger, clock=ledger.now, sleep=lambda s: None,
                      listeners=lineage_listeners(pipeline)).run(day())
    assert result.unit("load").outcome == "succeeded"
    events = [json.loads(line) for line in lineage_file.read_text().splitlines()]
    # outside lineage_run the twice run still starts before its first attempt (never ends)
    assert (events[0]["job"]["name"], events[0]["eventType"]) == ("acked", "START")
    events = events[1:]
    assert [e["eventType"] for e in events] == ["START", "OTHER", "COMPLETE"]
    assert len({e["run"]["runId"] for e in events}) == 1
    [output] = events[-1]["outputs"]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 6
