"""The lab fixture and every boundary its text names, through the real lab boundary."""

from __future__ import annotations

import copy
import io
import itertools
import json
from typing import Any

import pytest

from tests.decide.lab_cases import lab_case
from twice.interop.lab import main


def run(fixture: Any) -> tuple[int, dict[str, Any] | None, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(io.StringIO(json.dumps(fixture)), out, err)
    return code, json.loads(out.getvalue()) if code == 0 else None, err.getvalue()


def decisions(fixture: Any) -> dict[str, dict[str, Any]]:
    code, report, err = run(fixture)
    assert code == 0, err
    assert report is not None
    return {task["id"]: task for task in report["tasks"]}


def task(fixture: dict[str, Any], identifier: str) -> dict[str, Any]:
    return next(t for t in fixture["tasks"] if t["id"] == identifier)


def test_shipped_fixture_gives_the_decisions_the_text_states() -> None:
    got = decisions(lab_case())
    assert got["report"] == {"id": "report", "decision": "wait-backoff", "backoff": 8,
                             "earliestStart": 103, "estimatedFinish": 128}
    assert got["load"] == {"id": "load", "decision": "retry-eligible", "backoff": 4,
                           "earliestStart": 100, "estimatedFinish": 140}
    assert got["append"]["decision"] == "reconcile-remote"
    assert got["archive"]["decision"] == "attempts-exhausted"
    assert got["monitor"]["decision"] == "refresh-observation"
    assert got["transform"]["decision"] == "validate-output"
    assert list(got) == sorted(got)


def test_output_flags_never_overclaim() -> None:
    _, report, _ = run(lab_case())
    assert report is not None
    assert report["deadlinePassed"] is False
    for flag in ("jobsExecuted", "idempotencyProven", "completionGuaranteed",
                 "productionApproval"):
        assert report[flag] is False


def test_deadline_139_makes_load_infeasible() -> None:
    fixture = lab_case()
    fixture["deadline"] = 139
    assert decisions(fixture)["load"]["decision"] == "deadline-infeasible"
    assert decisions(fixture)["load"]["estimatedFinish"] == 140


def test_as_of_101_makes_load_infeasible() -> None:
    fixture = lab_case()
    fixture["asOf"] = 101
    got = decisions(fixture)["load"]
    assert (got["decision"], got["earliestStart"], got["estimatedFinish"]) == (
        "deadline-infeasible", 101, 141)


def test_validation_counts_in_the_finish() -> None:
    fixture = lab_case()
    task(fixture, "load")["validation"] = 6
    assert decisions(fixture)["load"]["decision"] == "deadline-infeasible"
    task(fixture, "load")["validation"] = 4
    assert decisions(fixture)["load"]["decision"] == "retry-eligible"


def test_as_of_103_ends_reports_backoff() -> None:
    fixture = lab_case()
    fixture["asOf"] = 103
    got = decisions(fixture)["report"]
    assert (got["decision"], got["earliestStart"], got["estimatedFinish"]) == (
        "retry-eligible", 103, 128)
    fixture["asOf"] = 102
    assert decisions(fixture)["report"]["decision"] == "wait-backoff"


def test_as_of_103_with_an_old_observation_refreshes_instead() -> None:
    fixture = lab_case()
    fixture["asOf"] = 103
    fixture["maxObservationAge"] = 4  # report observed at 98 is now 5 s old
    assert decisions(fixture)["report"]["decision"] == "refresh-observation"


@pytest.mark.parametrize(("observed", "expected"), [(90, "observe-running"),
                                                    (89, "refresh-observation")])
def test_observation_age_boundary(observed: int, expected: str) -> None:
    fixture = lab_case()
    task(fixture, "monitor")["observedAt"] = observed
    assert decisions(fixture)["monitor"]["decision"] == expected


def test_future_observation_is_invalid_input() -> None:
    fixture = lab_case()
    fixture["tasks"][2]["observedAt"] = 101
    code, report, err = run(fixture)
    assert (code, report) == (2, None)
    assert err.splitlines()[0].startswith(
        "Invalid retry fixture: tasks[2].observedAt (101) is after asOf (100)")


def test_safe_repeat_false_requires_effect_reconciliation() -> None:
    fixture = lab_case()
    task(fixture, "load")["safeRepeat"] = False
    assert decisions(fixture)["load"]["decision"] == "reconcile-effects"


def test_unknown_needs_reconciliation_even_when_safe_repeat() -> None:
    fixture = lab_case()
    assert task(fixture, "append")["safeRepeat"] is True
    assert decisions(fixture)["append"]["decision"] == "reconcile-remote"


def test_all_720_orders_give_identical_output() -> None:
    base = lab_case()
    outputs = set()
    for order in itertools.permutations(base["tasks"]):
        fixture = copy.deepcopy(base)
        fixture["tasks"] = list(order)
        out = io.StringIO()
        assert main(io.StringIO(json.dumps(fixture)), out, io.StringIO()) == 0
        outputs.add(out.getvalue())
    assert len(outputs) == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.update(asOf=True), "asOf must be an integer, got boolean"),
        (lambda f: f.update(deadline=140.0), "deadline must be an integer, got number"),
        (lambda f: f.pop("policy"), "fixture fields: missing policy"),
        (lambda f: f.update(extra=1), "fixture fields: unexpected extra"),
        (lambda f: f.update(tasks=[]), "tasks must hold 1..20 tasks, got 0"),
        (lambda f: f.update(tasks=[dict(f["tasks"][0], id=f"t{i}") for i in range(21)]),
         "tasks must hold 1..20 tasks, got 21"),
        (lambda f: f["tasks"].append(dict(f["tasks"][0])),
         "tasks[6].id 'report' duplicates tasks[0].id"),
        (lambda f: f["policy"].update(maxDelay=3), "policy.maxDelay (3) must be between"),
        (lambda f: f["policy"].update(multiplier=6), "policy.multiplier (6) must be between"),
        (lambda f: f["tasks"][0].update(state="failed"), "tasks[0].state 'failed' must be one"),
        (lambda f: f["tasks"][0].update(safeRepeat=1), "tasks[0].safeRepeat must be a boolean"),
        (lambda f: f["tasks"][0].update(lastFinishedAt=99), "tasks[0].lastFinishedAt (99) is "
                                                            "after observedAt (98)"),
        (lambda f: f["tasks"][2].update(lastFinishedAt=96), "tasks[2].lastFinishedAt must be "
                                                            "null while state is unknown"),
        (lambda f: f["tasks"][0].update(id="a b"), "tasks[0].id 'a b' must be 1-48"),
        (lambda f: f["tasks"][0].update(attempts=0), "tasks[0].attempts (0) must be between"),
        (lambda f: f["tasks"][0].update(duration=0), "tasks[0].duration (0) must be between"),
    ],
)
def test_invalid_fixtures_name_the_field(mutate: Any, message: str) -> None:
    fixture = lab_case()
    mutate(fixture)
    code, report, err = run(fixture)
    assert (code, report) == (2, None)
    assert err.startswith("Invalid retry fixture: ")
    assert message in err.splitlines()[0]


@pytest.mark.parametrize(
    ("raw", "message"),
    [("", "not JSON"), ("{", "not JSON"), ("[" * 100_000, "nested too deeply"),
     (" " * 1_000_001, "larger than 1000000 characters"), ("\ufeff{}", "not JSON")],
)
def test_unreadable_input_is_refused_with_a_reason(raw: str, message: str) -> None:
    err = io.StringIO()
    assert main(io.StringIO(raw), io.StringIO(), err) == 2
    assert err.getvalue().startswith("Invalid retry fixture: ")
    assert message in err.getvalue()
