"""Logging for the command line: the ``twice`` logger hierarchy on standard error.

twice's modules log with the standard :mod:`logging` module under ``twice.*`` (``twice.engine``
for what happens to a unit of work, ``twice.worker``, ``twice.ledger``, ``twice.lineage``);
results go to standard output, logs never do. ``--log-level`` (``TWICE_LOG_LEVEL``, default
``warning``) and ``--log-format`` (``TWICE_LOG_FORMAT``: ``text`` or ``json``) are taken by
the ``twice`` group and by every command, so they can be given before or after the command's
name. ``json`` prints one object per line: ``time`` (ISO-8601 UTC), ``level``, ``logger``,
``message`` and the structured fields a record carries (``uow_id``, ``task``, ``interval``,
``attempt``, ...; :data:`FIELDS`), for a log shipper to index without parsing sentences.

Every line is inert like everything else the CLI prints (text through ``twice.core.inert``,
JSON as ASCII with ``\\u`` escapes): an error message from outside twice cannot drive the
operator's terminal or forge a line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import click

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
#: structured fields a ``twice`` log record may carry (``extra=``), in the order shown
FIELDS = ("pipeline", "uow_id", "task", "interval", "attempt", "outcome", "job_id", "worker",
          "state", "basis", "error")

_HANDLER_NAME = "twice-cli"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (a progress display
    replaces it while it runs; a test's runner too)."""

    def __init__(self) -> None:
        super().__init__()
        self.set_name(_HANDLER_NAME)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in FIELDS
            if getattr(record, name, None) is not None}


def _time(record: logging.LogRecord) -> str:
    at = datetime.fromtimestamp(record.created, UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then its fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _time(record), "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in _fields(record).items():
            document[name] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        # ASCII only: every control or bidirectional character is a \\u escape, inert as is
        return json.dumps(document, ensure_ascii=True)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: message (field=value ...)`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        from twice.core.inert import inert

        message = record.getMessage()
        # a field the message already says (an error) is not repeated
        fields = " ".join(f"{name}={value}" for name, value in _fields(record).items()
                          if str(value) not in message)
        line = (f"{_time(record)} {record.levelname.lower():<7} {record.name}: {message}"
                + (f" ({fields})" if fields else ""))
        if record.exc_info:
            line += " | " + self.formatException(record.exc_info)
        return inert(line)


def configure(level: str = "warning", fmt: str = "text") -> None:
    """Send the ``twice`` logger's records at ``level`` and above to standard error in
    ``fmt``; called again, it replaces the handler it installed (never another's)."""
    logger = logging.getLogger("twice")
    reset()
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())


def reset() -> None:
    """Remove the handler :func:`configure` installed and the level it set (when the command
    ends: a program that runs the CLI in-process keeps its own logging as it was)."""
    logger = logging.getLogger("twice")
    for handler in list(logger.handlers):
        if handler.get_name() == _HANDLER_NAME:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)


def _apply(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Callback of both options: remember the value given (on the root context, so a later
    default does not undo an earlier choice) and configure logging with both."""
    root = ctx.find_root()
    if "twice.logs" not in root.meta:
        root.call_on_close(reset)
    settings = root.meta.setdefault("twice.logs", {"level": "warning", "format": "text"})
    from click.core import ParameterSource

    source = ctx.get_parameter_source(param.name or "")
    if value is not None and source not in (ParameterSource.DEFAULT, None):
        settings["level" if param.name == "log_level" else "format"] = value
    configure(settings["level"], settings["format"])


def log_options() -> list[click.Option]:
    """``--log-level`` and ``--log-format``: fresh options for one command (not passed to its
    callback)."""
    return [
        click.Option(["--log-level"], type=click.Choice(LEVELS, case_sensitive=False),
                     default="warning", show_default=True, envvar="TWICE_LOG_LEVEL",
                     show_envvar=True, expose_value=False, is_eager=True, callback=_apply,
                     help="Log records of this level and above on standard error."),
        click.Option(["--log-format"], type=click.Choice(FORMATS, case_sensitive=False),
                     default="text", show_default=True, envvar="TWICE_LOG_FORMAT",
                     show_envvar=True, expose_value=False, is_eager=True, callback=_apply,
                     help="text: one line per record; json: one object per line (time, "
                          "level, logger, message, uow_id, task, interval, attempt, ...)."),
    ]
