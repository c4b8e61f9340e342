"""Every option ``@pipeline.task(...)`` accepts at run time is in its typed overload, so a
user's type checker accepts a valid task (``write=`` was once missing: mypy rejected the
recommended owned-write style)."""

from __future__ import annotations

import inspect
import typing

from twice.define.pipeline import _OPTIONAL_FIELDS, Pipeline


def test_the_typed_task_decorator_takes_every_task_option() -> None:
    with_options = [o for o in typing.get_overloads(Pipeline.task)
                    if "destination" in inspect.signature(o).parameters]
    assert len(with_options) == 1
    typed = set(inspect.signature(with_options[0]).parameters)
    assert _OPTIONAL_FIELDS <= typed, sorted(_OPTIONAL_FIELDS - typed)
    assert {"name", "depends_on", "retry", "timeout"} <= typed
