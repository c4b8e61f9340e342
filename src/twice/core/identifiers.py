"""Identifier validation and per-dialect quoting.

Table, schema, column and partition names come from users, configuration and URLs. They are
checked against one strict pattern and then quoted for the target dialect; they are never
interpolated unchecked, and *values* are never interpolated at all (always bound parameters).
A name that fails is refused with an error naming the field it came from, so the operator sees
``column name 'x; DROP TABLE y' ...`` instead of a database parse error or worse.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from twice.errors import DestinationSpecError

IDENTIFIER_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Hive partition values become directory names: no separators, no "..", no "=", no spaces.
PATH_VALUE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}")


class IdentifierError(DestinationSpecError):
    """A name is not a safe identifier; the message names the field and the rule."""


def validate_identifier(name: object, field: str) -> str:
    """Return ``name`` if it is a plain identifier, else raise :class:`IdentifierError`.

    The pattern (``[A-Za-z_][A-Za-z0-9_]{0,62}``) fits every supported engine: 63 is
    PostgreSQL's limit, and no quote, dot, space or semicolon can reach generated SQL.
    """
    if not isinstance(name, str):
        raise IdentifierError(f"{field} must be a string, got {type(name).__name__}")
    if not IDENTIFIER_PATTERN.fullmatch(name):
        raise IdentifierError(
            f"{field} {name!r} is not a safe identifier: use letters, digits and '_', "
            "starting with a letter or '_', at most 63 characters"
        )
    return name


def validate_identifiers(names: Iterable[object], field: str) -> tuple[str, ...]:
    """Validate several names (e.g. key columns); duplicates are refused too."""
    checked = tuple(validate_identifier(name, field) for name in names)
    seen: set[str] = set()
    for name in checked:
        if name.lower() in seen:
            raise IdentifierError(f"{field} {name!r} is listed twice")
        seen.add(name.lower())
    return checked


def quote_identifier(name: str, dialect: str = "ansi") -> str:
    """Quote a *validated* identifier for ``dialect`` (sqlite, duckdb, postgresql: ``"name"``).

    Validation runs again here, so a caller cannot quote an unchecked name by mistake; the
    doubled-quote escaping is belt and braces, since the pattern already excludes quotes.
    A name already quoted is remembered (a write quotes the same hundred names every unit);
    a refused one raises every time.
    """
    if type(name) is str:
        return _quoted(name, dialect)
    return _quote(name, dialect)


@functools.lru_cache(maxsize=4096)
def _quoted(name: str, dialect: str) -> str:
    return _quote(name, dialect)


def _quote(name: str, dialect: str) -> str:
    validate_identifier(name, "identifier")
    if dialect in ("ansi", "sqlite", "duckdb", "postgresql"):
        return '"' + name.replace('"', '""') + '"'
    raise IdentifierError(f"no quoting rule for dialect {dialect!r}")


def validate_path_value(value: str, field: str) -> str:
    """Check a Hive partition value that will become part of a directory name.

    Refuses separators, ``..``, ``=``, whitespace and control characters, so a value can never
    escape the dataset directory or be read back as a different key.
    """
    if not PATH_VALUE_PATTERN.fullmatch(value) or ".." in value:
        raise IdentifierError(
            f"{field} {value!r} cannot be a partition directory name: use letters, digits and "
            "'_.:+-' (no '/', '\\', '..', '=', spaces), at most 128 characters"
        )
    return value
