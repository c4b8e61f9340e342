"""Fixture generators shared by the lab-compatibility tests: valid, boundary and malformed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

CASE_PATH = Path(__file__).resolve().parents[2] / "labs" / "pde-retry-window" / "case.json"
TOP = ("asOf", "deadline", "maxObservationAge", "policy", "tasks")
POLICY = ("maxAttempts", "initialDelay", "maxDelay", "multiplier")
TASK = ("id", "state", "safeRepeat", "attempts", "observedAt", "lastFinishedAt", "duration",
        "validation")
STATES = ("running", "unknown", "succeeded", "retryable", "terminal")


def lab_case() -> dict[str, Any]:
    return json.loads(CASE_PATH.read_text())


# Values that sit on or next to every boundary the lab checks, plus every wrong JSON type.
edge_ints = st.sampled_from(
    [-1, 0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 20, 21, 48, 49, 89, 90, 99, 100, 101, 103, 139, 140,
     141, 999_999, 1_000_000, 1_000_001, 999_999_999, 1_000_000_000, 1_000_000_001, 2**63]
)
wrong_types = st.sampled_from(
    [None, True, False, 1.0, 100.0, 0.5, -0.0, "1", "", "running", [], [1], {}, {"a": 1},
     float("inf"), 1e300]
).map(copy.deepcopy)  # a fresh list or dict per draw: a mutation must never make one circular
any_value = st.one_of(edge_ints, wrong_types, st.integers(-5, 200))
task_ids = st.one_of(
    st.sampled_from(["a", "A-b_c", "x" * 48, "x" * 49, "", "a b", "é", "a\n", "report", "load",
                     "ä", "0", "-", "_"]),
    st.text(alphabet="abcXYZ09_-", min_size=1, max_size=6),
)


@st.composite
def valid_tasks(draw: st.DrawFn, as_of: int) -> dict[str, Any]:
    state = draw(st.sampled_from(STATES))
    observed = draw(st.integers(0, as_of))
    ended = None if state in ("running", "unknown") else draw(st.integers(0, observed))
    return {
        "id": draw(task_ids.filter(lambda s: 1 <= len(s) <= 48 and s.isascii()
                                   and all(c.isalnum() or c in "_-" for c in s))),
        "state": state,
        "safeRepeat": draw(st.booleans()),
        "attempts": draw(st.integers(1, 10)),
        "observedAt": observed,
        "lastFinishedAt": ended,
        "duration": draw(st.integers(1, 1_000_000)),
        "validation": draw(st.integers(0, 1_000_000)),
    }


@st.composite
def valid_fixtures(draw: st.DrawFn) -> dict[str, Any]:
    """Fixtures the lab accepts (ids may still collide: that case is then invalid)."""
    as_of = draw(st.one_of(st.integers(0, 200), st.integers(0, 1_000_000_000)))
    initial = draw(st.integers(1, 1_000_000))
    tasks = draw(st.lists(valid_tasks(as_of), min_size=1, max_size=20,
                          unique_by=lambda task: task["id"]))
    return {
        "asOf": as_of,
        "deadline": draw(st.integers(0, 1_000_000_000)),
        "maxObservationAge": draw(st.one_of(st.integers(0, 20), st.integers(0, 1_000_000_000))),
        "policy": {
            "maxAttempts": draw(st.integers(1, 10)),
            "initialDelay": initial,
            "maxDelay": draw(st.integers(initial, 1_000_000)),
            "multiplier": draw(st.integers(1, 5)),
        },
        "tasks": tasks,
    }


@st.composite
def mutated_fixtures(draw: st.DrawFn) -> Any:
    """A valid or lab fixture with one to three mutations anywhere in it."""
    base = draw(st.one_of(st.just(lab_case()), valid_fixtures()))
    fixture = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(
            ["top", "policy", "task", "drop", "extra", "tasks-size", "dup-id", "replace-root"]
        ))
        if not isinstance(fixture, dict):
            break
        if kind == "top":
            fixture[draw(st.sampled_from(TOP))] = draw(any_value)
        elif kind == "policy" and isinstance(fixture.get("policy"), dict):
            fixture["policy"][draw(st.sampled_from(POLICY))] = draw(any_value)
        elif kind == "task" and isinstance(fixture.get("tasks"), list) and fixture["tasks"]:
            task = draw(st.sampled_from(fixture["tasks"]))
            if isinstance(task, dict):
                field = draw(st.sampled_from(TASK))
                if field == "id":
                    task[field] = draw(st.one_of(task_ids, any_value))
                elif field == "state":
                    task[field] = draw(st.one_of(st.sampled_from(STATES), any_value))
                else:
                    task[field] = draw(any_value)
        elif kind == "drop":
            target = draw(st.sampled_from(["top", "policy", "task"]))
            if target == "top":
                fixture.pop(draw(st.sampled_from(TOP)), None)
            elif target == "policy" and isinstance(fixture.get("policy"), dict):
                fixture["policy"].pop(draw(st.sampled_from(POLICY)), None)
            elif isinstance(fixture.get("tasks"), list) and fixture["tasks"]:
                task = fixture["tasks"][0]
                if isinstance(task, dict):
                    task.pop(draw(st.sampled_from(TASK)), None)
        elif kind == "extra":
            fixture[draw(st.sampled_from(["extra", "schema", "asof"]))] = 1
        elif kind == "tasks-size" and isinstance(fixture.get("tasks"), list) and fixture["tasks"]:
            size = draw(st.sampled_from([0, 1, 20, 21]))
            first = fixture["tasks"][0]
            fixture["tasks"] = [
                dict(first, id=f"t{i}") if isinstance(first, dict) else first for i in range(size)
            ]
        elif kind == "dup-id" and isinstance(fixture.get("tasks"), list) and fixture["tasks"]:
            fixture["tasks"].append(copy.deepcopy(fixture["tasks"][0]))
        elif kind == "replace-root":
            fixture = draw(st.sampled_from([[], None, 1, "x", [fixture]]))
    return fixture


def raw_texts(fixture: Any, *, deep: bool = False) -> st.SearchStrategy[str]:
    """Text forms of a fixture: plain, pretty, truncated, garbage-edited, duplicate keys.

    ``deep`` adds a duplicate key whose discarded value is nested 990 levels (near the parser's
    recursion limit), which only a separate process can compare fairly.
    """
    text = json.dumps(fixture)
    forms = [st.just(text), st.just(json.dumps(fixture, indent=2))]
    if text:
        forms.append(st.integers(0, len(text) - 1).map(lambda n: text[:n]))
        forms.append(st.tuples(st.integers(0, len(text)), st.sampled_from(
            ["x", ",", "]", "}", "\ufeff", "\x00", "NaN", "1e999", " "])).map(
            lambda pair: text[: pair[0]] + pair[1] + text[pair[0]:]))
    if isinstance(fixture, dict) and text.startswith("{"):
        forms.append(st.sampled_from(TOP).map(lambda key: f'{{"{key}": 0, {text[1:]}'))
        forms.append(st.sampled_from(TOP).map(lambda key: f'{text[:-1]}, "{key}": 0}}'))
    if deep and isinstance(fixture, dict) and text.startswith("{"):
        forms.append(st.sampled_from(TOP).map(lambda key: f'{{"{key}": {"[" * 990}{"]" * 990}, '
                                               f'{text[1:]}'))
    return st.one_of(forms)
