"""Destination schemes twice can open and own (stdlib only: read by definitions, which must not
import the engines).

A task whose destination uses one of these schemes has an *owned* output: twice writes it with a
commit record, verifies it and settles unknown outcomes from it. Any other destination string
(``bq:project.dataset.table``) only names where a remote job writes: twice cannot see into it,
so such a task needs ``reconcile=`` (see ``twice.destinations.commits``).
"""

from __future__ import annotations

import functools
from urllib.parse import parse_qs, urlsplit, urlunsplit

# scheme -> module under twice.destinations
ENGINE_MODULES: dict[str, str] = {
    "sqlite": "sqlite",
    "duckdb": "duckdb",
    "postgresql": "postgres",
    "postgres": "postgres",
    "parquet": "parquet",
    "spark": "spark",
    "iceberg": "iceberg",
    "delta": "delta",
}


# schemes whose tables keep versions that map to twice's commit records (a write's key diff can
# be read back from them after the write: twice.destinations.diff.commit_diff)
VERSIONED_SCHEMES: frozenset[str] = frozenset({"delta", "iceberg"})


def scheme_of(spec: str) -> str:
    return spec.partition(":")[0].strip().lower() if ":" in spec else ""


@functools.lru_cache(maxsize=512)
def is_owned(spec: str) -> bool:
    """Whether twice can open ``spec`` (and so own, fingerprint and reconcile its writes)."""
    return scheme_of(spec) in ENGINE_MODULES


#: Schemes with no row-level update, and what to use instead: ``write="upsert"`` to one of them
#: is refused when the task is defined, and the destination refuses ``upsert`` with the same words.
NO_UPSERT: dict[str, str] = {
    "parquet": ("Parquet datasets support replace_partition only (and append); an upsert needs "
                "a table format with row-level updates (Delta, Iceberg) or a SQL destination"),
    "spark": ("Spark Parquet tables support replace_partition only; an upsert needs a table "
              "format with MERGE (Delta Lake, Iceberg) or a SQL destination"),
}


#: Schemes whose location is a local path (``scheme:///abs/path`` or ``scheme:rel/path``).
FILE_SCHEMES = frozenset({"sqlite", "duckdb", "parquet", "spark", "iceberg", "delta"})


def absolute(spec: str) -> str:
    """``spec`` with a relative file path made absolute against the working directory
    (``sqlite:rel.db#t`` -> ``sqlite:///cwd/rel.db#t``), so what a task records names the
    same file wherever it is read from (``twice verify`` run from another directory). Any
    other spec is returned unchanged."""
    import os

    scheme, colon, rest = spec.partition(":")
    if not colon or scheme.lower() not in FILE_SCHEMES or rest.startswith("/"):
        return spec
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    path, tail = rest[:cut], rest[cut:]
    if not path or path.startswith(":"):  # no path, or an in-memory database
        return spec
    return f"{scheme}://{os.path.abspath(os.path.expanduser(path))}{tail}"


def table_of(spec: str) -> str:
    """The table (or dataset) ``spec`` names, without its options: two specs of one table
    differ at most in their query (``partition_column=``, ``key_columns=``)."""
    parts = urlsplit(spec)
    return urlunsplit((parts.scheme.lower(), parts.netloc, parts.path, "", parts.fragment))


def query_option(spec: str, name: str) -> str | None:
    """The value of ``name`` in the spec's query (``...?key_columns=id,day#table``), if any."""
    values = parse_qs(urlsplit(spec).query).get(name)
    return values[-1] if values else None
