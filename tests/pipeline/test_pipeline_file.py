"""Loading a user's pipeline file: the happy path and every error a data engineer will make."""

from __future__ import annotations

import multiprocessing
import pickle
import sys
import textwrap
from datetime import date
from pathlib import Path

import pytest

from twice.define.load import PipelineFileError, load_pipeline
from twice.define.pipeline import NonFatal, Pipeline
from twice.engine.attempt import TaskCallResult, call_task

HEADER = """\
from datetime import timedelta
from twice import Pipeline
from twice import Schedule
"""

GOOD = (
    HEADER
    + """
pipeline = Pipeline("funds_positions", schedule=Schedule.daily("Europe/Lisbon"),
                    workflow_timeout=timedelta(minutes=30))

@pipeline.task(timeout=60)
def extract(ctx):
    return 1

@pipeline.task(depends_on=[extract], timeout=60)
def load(ctx):
    return 2
"""
)


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # load_pipeline puts the file's folder on sys.path (like running a script); undo per test.
    monkeypatch.setattr(sys, "path", list(sys.path))


def write(tmp_path: Path, source: str, name: str = "funds.py") -> Path:
    path = tmp_path / "pipelines" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def load_error(path: Path | str, **kwargs: object) -> PipelineFileError:
    with pytest.raises(PipelineFileError) as info:
        load_pipeline(path, **kwargs)  # type: ignore[arg-type]
    assert "Traceback" not in str(info.value)
    return info.value


def test_loads_the_conventional_pipeline(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    pipeline = load_pipeline(path)
    assert isinstance(pipeline, Pipeline)
    assert pipeline.name == "funds_positions"
    assert pipeline.topological_order() == ["extract", "load"]
    assert pipeline.source_file == path.resolve()
    assert pipeline.get_task("load").fn(None) == 2  # type: ignore[arg-type]


def test_loads_the_only_pipeline_under_another_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        GOOD.replace("pipeline", "funds"),
    )
    assert load_pipeline(str(path)).name == "funds_positions"


def test_from_twice_import_pipeline_does_not_count_as_the_pipeline(tmp_path: Path) -> None:
    source = "from twice.define import pipeline\n" + GOOD.replace("pipeline =", "funds =").replace(
        "@pipeline.", "@funds."
    )
    assert load_pipeline(write(tmp_path, source)).name == "funds_positions"


def test_several_pipelines_need_a_pipeline_variable(tmp_path: Path) -> None:
    two = (
        HEADER
        + """
a = Pipeline("first", schedule=Schedule.daily())
b = Pipeline("second", schedule=Schedule.daily())
alias = a
"""
    )
    error = load_error(write(tmp_path, two), validate=False)
    assert str(error) == (
        f"{tmp_path / 'pipelines' / 'funds.py'}: several Pipelines found: a ('first'), "
        "b ('second'); name the one to run `pipeline` (or pass attribute=...)"
    )
    chosen = two + "pipeline = b\n"
    assert load_pipeline(write(tmp_path, chosen), validate=False).name == "second"
    assert load_pipeline(write(tmp_path, two), attribute="a", validate=False).name == "first"


def test_missing_file(tmp_path: Path) -> None:
    error = load_error(tmp_path / "pipelines" / "nope.py")
    assert str(error).startswith(f"pipeline file not found: {tmp_path / 'pipelines' / 'nope.py'}")


def test_directory_and_not_python(tmp_path: Path) -> None:
    (tmp_path / "pipelines").mkdir()
    assert "is a directory" in str(load_error(tmp_path / "pipelines"))
    yaml = tmp_path / "funds.yaml"
    yaml.write_text("pipeline: funds\n")
    assert str(load_error(yaml)) == (
        f"{yaml} is not a Python file (expected a .py file defining a Pipeline)"
    )


def test_syntax_error_shows_file_line_and_message(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER + "\npipeline = Pipeline('p', schedule=Schedule.daily(\ndef load(ctx):\n    pass\n",
    )
    error = load_error(path)
    message = str(error)
    assert message.startswith(f"{path}:5:")
    assert "syntax error: '(' was never closed" in message
    assert error.line == 5
    assert error.__cause__ is None  # nothing to dig into: the message is the whole story


def test_indentation_error_points_at_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "x = 1\n  y = 2\n")
    message = str(load_error(path))
    assert message.startswith(f"{path}:2:")
    assert "unexpected indent" in message
    assert message.endswith("    y = 2\n    ^")


def test_import_error_inside_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "import pandsa\n")
    error = load_error(path)
    assert str(error) == (f"{path}:4: import failed: ModuleNotFoundError: No module named 'pandsa'")
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_helper_modules_next_to_the_file_are_importable(tmp_path: Path) -> None:
    write(tmp_path, "TIMEOUT = 42\n", name="helpers_ok.py")
    path = write(
        tmp_path,
        GOOD.replace("timeout=60)\ndef extract", "timeout=helpers_ok.TIMEOUT)\ndef extract")
        + "import helpers_ok\n",
    )
    # helpers_ok is imported at the bottom, after use: show that a NameError is reported ...
    assert "NameError" in str(load_error(path))
    path = write(
        tmp_path,
        "import helpers_ok\n"
        + GOOD.replace("timeout=60)\ndef extract", "timeout=helpers_ok.TIMEOUT)\ndef extract"),
    )
    # ... and that importing it first works
    assert load_pipeline(path).get_task("extract").timeout == 42


def test_syntax_error_in_an_imported_helper(tmp_path: Path) -> None:
    helper = write(tmp_path, "def broken(:\n", name="helpers_bad.py")
    path = write(tmp_path, "import helpers_bad\n")
    assert str(load_error(path)) == (
        f"{path}:1: import failed: syntax error in {helper.resolve()}:1: invalid syntax"
    )


def test_error_while_running_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "x = 1\ny = x / 0\n")
    assert str(load_error(path)) == (
        f"{path}:2: error while loading the file: ZeroDivisionError: division by zero"
    )


def test_definition_error_in_the_file_names_the_line(tmp_path: Path) -> None:
    source = GOOD + "\n@pipeline.task(name='load')\ndef again(ctx):\n    pass\n"
    path = write(tmp_path, source)
    message = str(load_error(path))
    # the decorator line
    assert message.startswith(f"{path}:16: invalid pipeline definition: task 'load': defined ")


def test_exit_in_the_file_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "import sys\nsys.exit(3)\n")
    assert str(load_error(path)) == f"{path}:2: the file called exit(3) while loading"


def test_a_base_exception_of_the_files_own_is_reported(tmp_path: Path) -> None:
    """Found by issue 39: a custom ``BaseException`` subclass raised at import printed a raw
    traceback; it is reported like any error in the file (Ctrl-C still interrupts)."""
    path = write(tmp_path, "class Halt(BaseException):\n    pass\n\nraise Halt('stop here')\n")
    message = str(load_error(path))
    assert message.startswith(f"{path}:4: ") and "Halt: stop here" in message, message


def test_ctrl_c_while_loading_still_interrupts(tmp_path: Path) -> None:
    path = write(tmp_path, "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_pipeline(str(path))


def test_no_pipeline_found(tmp_path: Path) -> None:
    path = write(tmp_path, "x = 1\n")
    assert str(load_error(path)).startswith(f"{path}: no Pipeline found; define one at module")


def test_pipeline_variable_of_the_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "pipeline = {'name': 'funds'}\n")
    assert str(load_error(path)) == f"{path}: `pipeline` is a dict, not a twice Pipeline"
    assert str(load_error(path, attribute="other")) == f"{path}: has no variable 'other'"


def test_invalid_pipeline_is_reported_against_the_file(tmp_path: Path) -> None:
    source = GOOD.replace("depends_on=[extract]", "depends_on=['extrct']").replace(
        "timeout=60)\ndef extract", "timeout=3600)\ndef extract"
    )
    path = write(tmp_path, source)
    message = str(load_error(path))
    assert message.startswith(f"{path}: pipeline 'funds_positions' is invalid:\n  - ")
    assert "task 'load': depends_on 'extrct' is not a task" in message
    assert "task 'extract': timeout 3600 s must be smaller than the workflow_timeout" in message
    assert load_pipeline(path, validate=False).name == "funds_positions"


def test_loading_twice_gives_fresh_independent_pipelines(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    first, second = load_pipeline(path), load_pipeline(path)
    assert first is not second
    assert first.topological_order() == second.topological_order()


def test_main_guard_does_not_run_on_load(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "\nif __name__ == '__main__':\n    raise SystemExit(1)\n")
    assert load_pipeline(path).name == "funds_positions"


def test_call_task_runs_a_file_task_in_a_spawned_child(tmp_path: Path) -> None:
    source = GOOD.replace(
        "def load(ctx):\n    return 2",
        "def load(ctx):\n    ctx.nonfatal('2 rows skipped', count=2)\n"
        "    return (ctx.job_id, dict(ctx.upstream))",
    )
    path = write(tmp_path, source)
    pipeline = load_pipeline(path)
    interval = pipeline.schedule.interval_for(date(2026, 11, 30))
    ctx = pipeline.context("load", interval, attempt=2, upstream={"extract": 1})
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(1) as pool:
        result = pool.apply(call_task, (str(path), "load", ctx))
    assert result == TaskCallResult(
        value=(ctx.job_id, {"extract": 1}), nonfatals=(NonFatal("2 rows skipped", 2),)
    )


def test_task_context_pickles_with_its_records() -> None:
    from twice.define.schedule import Schedule

    pipeline = Pipeline("p", schedule=Schedule.daily("Europe/Lisbon"))
    pipeline.task(name="a")(lambda ctx: None)
    ctx = pipeline.context("a", pipeline.schedule.interval_for(date(2026, 1, 1)), params={"k": 1})
    ctx.nonfatal("late feed")
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy.unit == ctx.unit and copy.job_id == ctx.job_id
    assert copy.params == {"k": 1} and copy.nonfatals == ctx.nonfatals
    with pytest.raises(TypeError):
        copy.params["k"] = 2


def test_an_append_task_declared_safe_repeat_is_warned_about(tmp_path: Path) -> None:
    """Found by a probe: ``write='append'`` with ``safe_repeat=True`` was accepted silently,
    and every forced rerun or backfill appended the interval's rows again."""
    import warnings

    from twice.define.load import DefinitionWarning, load_pipeline

    for safe, expected in ((True, 1), (False, 0)):
        path = tmp_path / f"p{safe}.py"
        path.write_text(
            "from twice import Pipeline, Schedule\n"
            "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
            f"@pipeline.task(destination='sqlite:///{tmp_path}/w.db?partition_column=day#t',\n"
            f"               write='append', safe_repeat={safe})\n"
            "def t(ctx):\n    return []\n")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load_pipeline(str(path))
        said = [str(w.message) for w in caught if issubclass(w.category, DefinitionWarning)]
        assert sum("appends its rows again" in text for text in said) == expected, said


def test_the_definitions_advisory_warnings_reach_the_loader(tmp_path: Path) -> None:
    """Found by issue 39: ``validate()`` found "no timeout" and "neither estimated_duration
    nor timeout: the deadline planner assumes an attempt takes 0 s", but ``load_pipeline``
    dropped them, so the CLI never said why a finish time equalled the start."""
    import warnings

    from twice.define.load import DefinitionWarning, load_pipeline

    path = tmp_path / "silent.py"
    path.write_text(
        "from datetime import time\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'), deadline=time(6, 0))\n"
        "@pipeline.task(safe_repeat=True)\n"
        "def t(ctx):\n    return None\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_pipeline(str(path))
    said = [str(w.message) for w in caught if issubclass(w.category, DefinitionWarning)]
    assert any("task 't': no timeout" in text for text in said), said
    assert any("assumes an attempt takes 0 s" in text for text in said), said
    assert all(text.startswith(f"{path}: ") for text in said)
