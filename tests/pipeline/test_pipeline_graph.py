"""Dependency graph: topological order, dependents for backfills, and subsets."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.define.pipeline import Pipeline, PipelineError, TaskContext
from twice.define.schedule import Schedule


def noop(ctx: TaskContext) -> None:
    return None


def build(edges: dict[str, list[str]], order: list[str] | None = None) -> Pipeline:
    pipeline = Pipeline("graph", schedule=Schedule.daily())
    for name in order or list(edges):
        pipeline.task(name=name, depends_on=edges[name], timeout=5)(noop)
    return pipeline


FUNDS = {
    "extract_positions": [],
    "extract_prices": [],
    "transform": ["extract_positions", "extract_prices"],
    "load": ["transform"],
    "report": ["load"],
    "audit": ["extract_prices"],
}


def test_topological_order_keeps_definition_order_on_ties() -> None:
    assert build(FUNDS).topological_order() == [
        "extract_positions",
        "extract_prices",
        "transform",
        "load",
        "report",
        "audit",
    ]


def test_dependencies_may_be_defined_later() -> None:
    order = ["report", "load", "transform", "audit", "extract_prices", "extract_positions"]
    pipeline = build(FUNDS, order)
    pipeline.validate()
    result = pipeline.topological_order()
    assert result.index("transform") > result.index("extract_prices")


def test_dependents_are_transitive_and_exclude_the_start() -> None:
    pipeline = build(FUNDS)
    assert pipeline.dependents_of("extract_prices") == {"transform", "load", "report", "audit"}
    assert pipeline.dependents_of(["load"]) == {"report"}
    assert pipeline.dependents_of(["report"]) == set()
    assert pipeline.dependents_of(["transform", "load"]) == {"load", "report"}
    assert pipeline.dependencies_of("load") == {"transform", "extract_positions", "extract_prices"}


def test_unknown_names_in_graph_queries() -> None:
    with pytest.raises(PipelineError, match=r"no task 'lod'; did you mean 'load'\?"):
        build(FUNDS).dependents_of(["lod"])


def test_subset_with_dependents_keeps_ids_and_marks_external_dependencies() -> None:
    pipeline = build(FUNDS)
    part = pipeline.subset(["transform"])
    assert list(part.tasks) == ["transform", "load", "report"]
    assert part.external_dependencies == {"extract_positions", "extract_prices", "audit"}
    part.validate()  # dependencies on left-out tasks count as satisfied
    assert part.topological_order() == ["transform", "load", "report"]
    interval = pipeline.schedule.interval_for(date(2026, 11, 30))
    assert part.unit_of_work("load", interval).uow_id == (
        pipeline.unit_of_work("load", interval).uow_id
    )
    assert part.get_task("load") is pipeline.get_task("load")


def test_subset_without_dependents() -> None:
    part = build(FUNDS).subset("transform", with_dependents=False)
    assert list(part.tasks) == ["transform"]
    assert part.dependents_of("transform") == set()


def test_subset_of_a_subset_remembers_all_left_out_tasks() -> None:
    part = build(FUNDS).subset(["transform"]).subset(["load"])
    assert list(part.tasks) == ["load", "report"]
    assert "extract_prices" in part.external_dependencies
    part.validate()


@st.composite
def dags(draw: st.DrawFn) -> tuple[dict[str, list[str]], list[str]]:
    """A random DAG (task i may depend only on tasks < i), defined in a random order."""
    size = draw(st.integers(1, 14))
    names = [f"t{i}" for i in range(size)]
    edges = {
        name: draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
        for i, name in enumerate(names)
    }
    return edges, draw(st.permutations(names))


@settings(max_examples=150, deadline=None)
@given(dags())
def test_topological_order_puts_every_task_after_its_dependencies(
    dag: tuple[dict[str, list[str]], list[str]],
) -> None:
    edges, order = dag
    pipeline = build(edges, order)
    result = pipeline.topological_order()
    assert sorted(result) == sorted(edges)
    position = {name: i for i, name in enumerate(result)}
    for name, deps in edges.items():
        assert all(position[dep] < position[name] for dep in deps)
    assert pipeline.topological_order() == result  # deterministic


@settings(max_examples=100, deadline=None)
@given(dags(), st.data())
def test_dependents_match_brute_force_reachability(
    dag: tuple[dict[str, list[str]], list[str]], data: st.DataObject
) -> None:
    edges, order = dag
    pipeline = build(edges, order)
    start = data.draw(st.lists(st.sampled_from(order), min_size=1, unique=True))

    def downstream(name: str) -> set[str]:
        direct = {child for child, deps in edges.items() if name in deps}
        return direct.union(*(downstream(child) for child in direct))

    expected = set().union(*(downstream(name) for name in start))
    assert pipeline.dependents_of(start) == expected
    part = pipeline.subset(start)
    assert set(part.tasks) == set(start) | expected
    part.validate()
    position = {name: i for i, name in enumerate(part.topological_order())}
    for name in part.tasks:
        assert all(position[d] < position[name] for d in edges[name] if d in position)
