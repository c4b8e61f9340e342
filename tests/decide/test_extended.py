"""The general planner format: ISO-8601 times, no task cap, reasons, the same precedence."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings

from tests.decide.lab_cases import lab_case, valid_fixtures
from twice.core.timescale import format_duration, parse_duration
from twice.interop.extended import main as extended_main
from twice.interop.lab import evaluate


def run(fixture: Any, output_format: str = "json") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = extended_main(output_format, io.StringIO(json.dumps(fixture)), out, err)
    return code, out.getvalue(), err.getvalue()


def iso_case() -> dict[str, Any]:
    """The lab fixture on a real clock: asOf 100 s after 05:00Z, durations as ISO text."""
    def at(seconds: int) -> str:
        minutes, secs = divmod(seconds, 60)
        return f"2026-12-01T05:{minutes:02d}:{secs:02d}Z"

    case = lab_case()
    case["asOf"], case["deadline"] = at(case["asOf"]), at(case["deadline"])
    case["maxObservationAge"] = "PT10S"
    case["policy"].update(initialDelay="PT4S", maxDelay="PT12S")
    for task in case["tasks"]:
        task["observedAt"] = at(task["observedAt"])
        if task["lastFinishedAt"] is not None:
            task["lastFinishedAt"] = at(task["lastFinishedAt"])
        task["duration"] = f"PT{task['duration']}S"
    return case


@settings(max_examples=150, deadline=None)
@given(valid_fixtures())
def test_extended_decides_like_the_lab_on_lab_input(fixture: dict[str, Any]) -> None:
    code, out, err = run(fixture)
    assert code == 0, err
    lab = json.loads(evaluate(json.dumps(fixture)))
    ours = json.loads(out)
    strip = [{k: v for k, v in t.items() if k != "reason"} for t in ours["tasks"]]
    assert strip == lab["tasks"]
    assert all(t["reason"] for t in ours["tasks"])


def test_iso_clock_gives_the_lab_decisions_in_real_time() -> None:
    code, out, err = run(iso_case())
    assert code == 0, err
    tasks = {t["id"]: t for t in json.loads(out)["tasks"]}
    assert tasks["report"]["decision"] == "wait-backoff"
    assert tasks["report"]["earliestStart"] == "2026-12-01T05:01:43Z"
    assert tasks["report"]["estimatedFinish"] == "2026-12-01T05:02:08Z"
    assert tasks["report"]["backoff"] == "PT8S"
    assert tasks["load"]["decision"] == "retry-eligible"
    assert tasks["load"]["estimatedFinish"] == "2026-12-01T05:02:20Z"  # exactly the deadline
    assert tasks["append"]["decision"] == "reconcile-remote"
    assert "deadline" in tasks["load"]["reason"]


def test_offsets_are_the_same_instant() -> None:
    case = iso_case()
    case["deadline"] = "2026-12-01T06:02:19+01:00"  # one second before the lab deadline
    code, out, _ = run(case)
    assert code == 0
    tasks = {t["id"]: t for t in json.loads(out)["tasks"]}
    assert tasks["load"]["decision"] == "deadline-infeasible"


def test_no_task_cap_and_long_ids() -> None:
    case = lab_case()
    template = case["tasks"][1]
    case["tasks"] = [dict(template, id=f"funds.load.20261130T0000.{i:06d}") for i in range(500)]
    code, out, _ = run(case)
    assert code == 0
    assert json.loads(out)["summary"] == {"retry-eligible": 500}


@pytest.mark.parametrize(
    ("base", "mutate", "message"),
    [
        ("lab", lambda f: f["tasks"][0].update(observedAt=105), "observedAt is after asOf"),
        ("iso", lambda f: f["tasks"][0].update(observedAt="2026-12-01T05:00:00"),
         "no UTC offset"),
        ("lab", lambda f: f.update(maxObservationAge="10 minutes"), "not an ISO-8601 duration"),
        ("lab", lambda f: f["policy"].update(multiplier=True),
         "policy.multiplier must be a number"),
        ("lab", lambda f: f.update(schema="v9"), "schema must be"),
        ("lab", lambda f: f.update(tasks=[]), "non-empty"),
        # values whose sums used to overflow datetime or print Infinity (found by the fuzz)
        ("iso", lambda f: f.update(maxObservationAge="P99999999999D"),
         "maxObservationAge: 'P99999999999D' is longer than"),
        ("iso", lambda f: f.update(deadline="9999-12-31T23:59:59Z"),
         "deadline (9999-12-31T23:59:59Z) must be before 9000-01-01"),
        ("iso", lambda f: f.update(asOf="9999-12-31T23:59:59-12:00"), "outside the years"),
        ("iso", lambda f: f["tasks"][0].update(duration="P36501D"),
         "tasks[0].duration must be at most 100 years"),
        ("iso", lambda f: f["policy"].update(maxDelay=1e308), "policy.maxDelay (1e+308) must"),
        ("lab", lambda f: f.update(deadline=1e308), "deadline (1e+308) must be between"),
    ],
)
def test_invalid_extended_input_names_the_field(base: str, mutate: Any, message: str) -> None:
    fixture = iso_case() if base == "iso" else lab_case()
    mutate(fixture)
    code, out, err = run(fixture)
    assert (code, out) == (2, "")
    assert err.startswith("Invalid retry fixture: ") and message in err


def test_mixed_clocks_are_refused() -> None:
    case = iso_case()
    case["tasks"][0]["observedAt"] = 98
    code, _, err = run(case)
    assert code == 2 and "tasks[0].observedAt must be an ISO-8601 instant" in err


@pytest.mark.parametrize("text", ["PT0S", "PT8S", "PT1H30M", "P1DT2H3M4S", "PT0.5S", "P2D"])
def test_duration_round_trip(text: str) -> None:
    micros = round(parse_duration(text).total_seconds() * 1_000_000)
    assert parse_duration(format_duration(micros)) == parse_duration(text)


def test_table_output_lists_each_reason_via_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twice.cli", "decide", "--extended", "--format", "table"],
        input=json.dumps(iso_case()), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for identifier in ("report", "load", "append", "archive", "monitor", "transform"):
        assert identifier in done.stdout
    assert "reconcile-remote" in done.stdout and "no job was executed" in done.stdout


def test_the_largest_accepted_times_still_print() -> None:
    """Instants just under the bound plus 100-year spans stay inside datetime's range."""
    fixture = iso_case()
    fixture.update(asOf="8999-12-31T23:59:59Z", deadline="8999-12-31T23:59:59Z")
    fixture["policy"].update(initialDelay="P36500D", maxDelay="P36500D")
    for task in fixture["tasks"]:
        task.update(observedAt="8999-12-31T23:59:59Z", duration="P36500D", validation="P36500D")
        if task["lastFinishedAt"] is not None:
            task["lastFinishedAt"] = "8999-12-31T23:59:59Z"
    assert run(fixture, "table")[0] == 0
    code, out, err = run(fixture)
    assert (code, err) == (0, ""), err
    finishes = {task["estimatedFinish"] for task in json.loads(out)["tasks"]}
    assert any(when is not None and when.startswith("92") for when in finishes), finishes
