"""Load a user's pipeline file (e.g. ``pipelines/funds.py``) into a validated ``Pipeline``.

The file is ordinary Python: it builds a module-level ``Pipeline``, by convention named
``pipeline`` (or it is the only Pipeline in the module). Running it is like running a script:
its folder goes on ``sys.path`` so it can import helper modules next to it.

Every failure becomes one ``PipelineFileError`` whose message names the file and line and says
what went wrong, because the operator reading it at 05:40 needs the cause, not a traceback. The
original exception stays chained (``__cause__``) for a ``--debug`` view.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback
import warnings
from pathlib import Path
from types import ModuleType

from twice.define.pipeline import Pipeline, PipelineError
from twice.errors import InputError

CONVENTIONAL_NAME = "pipeline"
class PipelineFileError(InputError):
    """A pipeline file could not be loaded; the message names the file (and line if known)."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


def load_pipeline(
    path: str | os.PathLike[str], *, attribute: str | None = None, validate: bool = True
) -> Pipeline:
    """Import the file at ``path`` and return its Pipeline, validated.

    ``attribute`` names the module variable to use when a file defines several pipelines.
    With ``validate`` (the default) ``Pipeline.validate()`` runs and its problems are reported
    against the file, so nothing downstream sees a half-valid definition.
    """
    shown = os.fspath(path)
    module = load_module(shown)
    file = Path(module.__file__ or shown)
    pipeline = _find_pipeline(module, shown, attribute)
    pipeline.source_file = file
    if validate:
        for line in definition_warnings(pipeline, shown):
            warnings.warn(f"{shown}: {line}", DefinitionWarning, stacklevel=2)
    return pipeline


def definition_warnings(pipeline: Pipeline, shown: str) -> list[str]:
    """``Pipeline.validate()`` of the pipeline loaded from ``shown``: its problems as one
    ``PipelineFileError`` naming the file, else its warnings (one line each, naming the task),
    then ``unseen_effects()``: what ``load_pipeline`` warns about, and ``twice check``
    lists."""
    try:
        advice = pipeline.validate()
    except PipelineError as exc:
        lines = "\n".join(f"  - {p}" for p in exc.problems)
        raise PipelineFileError(
            f"{shown}: pipeline {pipeline.name!r} is invalid:\n{lines}", path=shown
        ) from None
    return [*advice, *pipeline.unseen_effects()]


def load_module(path: str | os.PathLike[str]) -> ModuleType:
    """Execute the pipeline file at ``path`` as a module, as ``load_pipeline`` does, and return
    it (for the other names it defines). Its folder goes on ``sys.path`` first, as for a
    script, so it imports the modules next to it by their plain names. Errors:
    ``PipelineFileError``, naming the file and line."""
    shown = os.fspath(path)
    return _execute(_check_file(Path(shown), shown), shown)


class DefinitionWarning(UserWarning):
    """A pipeline definition that runs but that twice cannot fully protect (printed by the CLI
    as ``warning: ...``)."""


def _check_file(path: Path, shown: str) -> Path:
    if not path.exists():
        raise PipelineFileError(
            f"pipeline file not found: {shown} (looked in {Path.cwd()})", path=shown
        )
    if path.is_dir():
        raise PipelineFileError(
            f"{shown} is a directory; name the .py file that defines the pipeline", path=shown
        )
    if path.suffix != ".py":
        raise PipelineFileError(
            f"{shown} is not a Python file (expected a .py file defining a Pipeline)", path=shown
        )
    return path.resolve()


def _module_name(file: Path) -> str:
    # A private name, so a file called json.py or twice.py cannot shadow a real module.
    return "twice_pipeline_" + re.sub(r"\W", "_", file.stem)


def _execute(file: Path, shown: str) -> ModuleType:
    try:
        source = file.read_bytes()
    except OSError as exc:
        raise PipelineFileError(f"cannot read {shown}: {exc.strerror}", path=shown) from None
    try:
        code = compile(source, str(file), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise PipelineFileError(_syntax_message(shown, exc), path=shown, line=exc.lineno) from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise PipelineFileError(f"{shown}: not valid Python source: {exc}", path=shown) from None
    name = _module_name(file)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    previous = sys.modules.get(name)
    sys.modules[name] = module  # dataclasses and typing look the module up while it runs
    try:
        exec(code, module.__dict__)
    except BaseException as exc:  # the file's own BaseException subclasses too; not Ctrl-C
        if isinstance(exc, KeyboardInterrupt | GeneratorExit):
            raise
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        line = _line_in_file(exc, str(file))
        raise PipelineFileError(_runtime_message(shown, line, exc), path=shown, line=line) from exc
    return module


def _syntax_message(shown: str, exc: SyntaxError) -> str:
    where = f"{shown}:{exc.lineno}" if exc.lineno else shown
    if exc.lineno and exc.offset:
        where += f":{exc.offset}"
    message = f"{where}: syntax error: {exc.msg}"
    if exc.text and exc.text.strip():
        text = exc.text.rstrip("\n")
        stripped = text.lstrip()
        caret = max((exc.offset or 1) - 1 - (len(text) - len(stripped)), 0)
        message += f"\n    {stripped}\n    {' ' * caret}^"
    return message


def _line_in_file(exc: BaseException, filename: str) -> int | None:
    """The innermost line of the user's file on the way to ``exc``."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return lines[-1] if lines else None


def _runtime_message(shown: str, line: int | None, exc: BaseException) -> str:
    """What went wrong while the file loaded, its passwords masked: a file that fails to
    connect at import time may print its connection string (``twice.core.secrets``)."""
    from twice.core.secrets import redact

    return redact(_loading_failure(shown, line, exc))


def _loading_failure(shown: str, line: int | None, exc: BaseException) -> str:
    where = f"{shown}:{line}" if line else shown
    if isinstance(exc, SyntaxError):  # in a module the file imports
        origin = f"{exc.filename}:{exc.lineno}" if exc.filename else "an imported module"
        return f"{where}: import failed: syntax error in {origin}: {exc.msg}"
    if isinstance(exc, ImportError):
        return f"{where}: import failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, PipelineError):
        return f"{where}: invalid pipeline definition: {exc}"
    if isinstance(exc, SystemExit):
        return f"{where}: the file called exit({exc.code!r}) while loading"
    return f"{where}: error while loading the file: {type(exc).__name__}: {exc}"


def _find_pipeline(module: ModuleType, shown: str, attribute: str | None) -> Pipeline:
    namespace = vars(module)
    if attribute is not None:
        if attribute not in namespace:
            raise PipelineFileError(f"{shown}: has no variable {attribute!r}", path=shown)
        return _as_pipeline(namespace[attribute], attribute, shown)
    conventional = namespace.get(CONVENTIONAL_NAME)
    # `from twice.define import pipeline` binds a module under the conventional name: not a choice.
    if conventional is not None and not isinstance(conventional, ModuleType):
        return _as_pipeline(conventional, CONVENTIONAL_NAME, shown)
    found: dict[int, tuple[str, Pipeline]] = {}
    for var, value in namespace.items():
        if isinstance(value, Pipeline) and id(value) not in found:
            found[id(value)] = (var, value)
    if not found:
        raise PipelineFileError(
            f"{shown}: no Pipeline found; define one at module level, e.g. "
            "`pipeline = Pipeline('my_pipeline', schedule=Schedule.daily('UTC'))`",
            path=shown,
        )
    if len(found) > 1:
        names = ", ".join(f"{var} ({p.name!r})" for var, p in found.values())
        raise PipelineFileError(
            f"{shown}: several Pipelines found: {names}; name the one to run `pipeline` "
            "(or pass attribute=...)",
            path=shown,
        )
    return next(iter(found.values()))[1]


def _as_pipeline(value: object, var: str, shown: str) -> Pipeline:
    if not isinstance(value, Pipeline):
        raise PipelineFileError(
            f"{shown}: `{var}` is a {type(value).__name__}, not a twice Pipeline", path=shown
        )
    return value
