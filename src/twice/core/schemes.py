"""Destination schemes twice can open and own (stdlib only: read by definitions, which must not
import the engines).

A task whose destination uses one of these schemes has an *owned* output: twice writes it with a
commit record, verifies it and settles unknown outcomes from it. Any other destination string
(``bq:project.dataset.table``) only names where a remote job writes: twice cannot see into it,
so such a task needs ``reconcile=`` (see ``twice.destinations.commits``).
"""

from __future__ import annotations

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


def is_owned(spec: str) -> bool:
    """Whether twice can open ``spec`` (and so own, fingerprint and reconcile its writes)."""
    return scheme_of(spec) in ENGINE_MODULES
