"""Dry runs: estimate the bytes a query reads before it runs, as BigQuery's dry run does.

For Parquet datasets (hive partitions ``col=value/``) the estimate is the sum of the column
chunks' ``total_compressed_size`` of the columns the query references, in the partitions its
WHERE clause selects. The query is read with DuckDB's own parser (``json_serialize_sql``) and the
partition filter is evaluated by DuckDB over the partition listing, so no SQL is parsed by hand.

What moves the estimate, as in BigQuery's on-demand billing:

- column projection and partition filters reduce it;
- ``LIMIT`` does not (every selected chunk is still read); the estimate says so in its notes;
- a filter on a column the files are sorted/clustered by may let the engine skip row groups
  (min/max statistics), so the estimate is then marked an **upper bound**.

``twice.engine.cost`` compares an estimate with a task's limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twice.errors import InputError
from twice.remote.jobs import Estimate

if TYPE_CHECKING:
    from twice.core.interval import Interval

METHOD = "parquet column chunks (total_compressed_size)"


class CostError(InputError):
    """The query or dataset cannot be estimated (bad input: the message names the field)."""


# -- Parquet datasets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ParquetFile:
    """One data file with its hive partition values (``{}`` for an unpartitioned dataset)."""

    path: Path
    partition: tuple[tuple[str, str], ...]

    @property
    def partition_key(self) -> str:
        return "/".join(f"{k}={v}" for k, v in self.partition) or "(unpartitioned)"


@dataclass(frozen=True)
class ParquetDataset:
    """A directory of Parquet files, hive-partitioned or not, queried under ``name``.

    ``clustered_by`` declares sort/cluster columns in addition to those the files' row-group
    ``sorting_columns`` metadata records.
    """

    name: str
    root: Path
    clustered_by: tuple[str, ...] = ()

    def files(self) -> list[ParquetFile]:
        root = Path(self.root)
        if not root.is_dir():
            raise CostError(f"--parquet: {str(root)!r} is not a directory")
        found: list[ParquetFile] = []
        for path in sorted(root.rglob("*.parquet")):
            parts = path.relative_to(root).parts[:-1]
            pairs = tuple((key, value) for key, _, value in
                          (part.partition("=") for part in parts if "=" in part))
            found.append(ParquetFile(path, pairs))
        if not found:
            raise CostError(f"--parquet: no .parquet files under {str(root)!r}")
        keys = {tuple(k for k, _ in f.partition) for f in found}
        if len(keys) > 1:
            raise CostError(f"--parquet: {str(root)!r} mixes partition layouts {sorted(keys)}")
        return found


def _walk(node: Any) -> Any:
    """Every dict node of a serialized DuckDB AST."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _parse(sql: str) -> dict[str, Any]:
    import duckdb

    if not isinstance(sql, str) or not sql.strip():
        raise CostError("--sql: the query is empty")
    with duckdb.connect() as conn:
        row = conn.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    assert row is not None
    tree = json.loads(row[0])
    if tree.get("error"):
        raise CostError(f"--sql: {tree.get('error_message', 'cannot parse the query')}")
    statements = tree["statements"]
    if len(statements) != 1:
        raise CostError(f"--sql: expected one SELECT statement, got {len(statements)}")
    return tree


def _single_table(node: dict[str, Any]) -> tuple[str, str]:
    if node.get("type") != "SELECT_NODE":
        raise CostError("--sql: only a single SELECT (no UNION/set operations) is estimated")
    source = node.get("from_table") or {}
    if source.get("type") != "BASE_TABLE":
        raise CostError(
            "--sql: only a query over one dataset (FROM <name>, no joins or subqueries) is "
            "estimated"
        )
    if node.get("cte_map", {}).get("map"):
        raise CostError("--sql: WITH (CTEs) is not supported by the estimator")
    return source["table_name"], source.get("alias") or source["table_name"]


def _column_refs(node: Any, table: str, alias: str) -> tuple[set[str], bool]:
    """Columns referenced anywhere in ``node`` (lower-cased) and whether ``*`` appears."""
    names: set[str] = set()
    star = False
    for item in _walk(node):
        if item.get("class") == "STAR":
            star = True
        elif item.get("class") == "COLUMN_REF":
            parts = [str(p) for p in item["column_names"]]
            if len(parts) > 1 and parts[0].lower() in (table.lower(), alias.lower()):
                parts = parts[1:]
            names.add(parts[0].lower())
    return names, star


def _conjuncts(where: dict[str, Any] | None) -> list[dict[str, Any]]:
    if where is None:
        return []
    if where.get("type") == "CONJUNCTION_AND":
        out: list[dict[str, Any]] = []
        for child in where["children"]:
            out.extend(_conjuncts(child))
        return out
    return [where]


def _selected_partitions(
    files: list[ParquetFile], keys: list[str], filters: list[dict[str, Any]]
) -> set[str]:
    """Partition keys kept by the partition-only WHERE conjuncts, evaluated by DuckDB."""
    import duckdb

    every = {f.partition_key for f in files}
    if not keys or not filters:
        return every
    where: dict[str, Any] = (
        filters[0] if len(filters) == 1 else
        {"class": "CONJUNCTION", "type": "CONJUNCTION_AND", "alias": "",
         "query_location": 0, "children": filters}
    )
    with duckdb.connect() as conn:
        row = conn.execute(
            "SELECT json_serialize_sql('SELECT __twice_key FROM __twice_partitions WHERE TRUE')"
        ).fetchone()
        assert row is not None
        template = json.loads(row[0])
        template["statements"][0]["node"]["where_clause"] = where
        back = conn.execute("SELECT json_deserialize_sql(?)", [json.dumps(template)]).fetchone()
        assert back is not None
        values = sorted({(f.partition_key, *(v for _, v in f.partition)) for f in files})
        cols = ", ".join(f'"{k}" VARCHAR' for k in keys)
        conn.execute(f"CREATE TEMP TABLE __raw (__twice_key VARCHAR, {cols})")
        conn.executemany(f"INSERT INTO __raw VALUES ({', '.join('?' * (len(keys) + 1))})",
                         [list(v) for v in values])
        typed = [f"{_hive_cast(conn, k)} AS \"{k}\"" for k in keys]
        conn.execute(
            f"CREATE TEMP TABLE __twice_partitions AS SELECT __twice_key, {', '.join(typed)} "
            "FROM __raw"
        )
        try:
            rows = conn.execute(back[0]).fetchall()
        except duckdb.Error as exc:
            raise CostError(f"--sql: the partition filter cannot be evaluated: {exc}") from exc
    return {r[0] for r in rows}


def _hive_cast(conn: Any, key: str) -> str:
    """The type DuckDB's hive partitioning would give ``key``: BIGINT, DATE, else VARCHAR."""
    for sql_type in ("BIGINT", "DOUBLE", "DATE", "TIMESTAMP"):
        row = conn.execute(
            f'SELECT count(*) FROM __raw WHERE TRY_CAST("{key}" AS {sql_type}) IS NULL'
        ).fetchone()
        if row is not None and row[0] == 0:
            return f'CAST("{key}" AS {sql_type})'
    return f'"{key}"'


def estimate_parquet(
    sql: str, datasets: Mapping[str, ParquetDataset | str | Path]
) -> Estimate:
    """Bytes ``sql`` would read from the Parquet ``datasets`` it names (see module docstring)."""
    import pyarrow.parquet as pq

    tree = _parse(sql)
    node = tree["statements"][0]["node"]
    table, alias = _single_table(node)
    named = {k.lower(): v for k, v in datasets.items()}
    if table.lower() not in named:
        raise CostError(
            f"--sql: table {table!r} is not a known dataset (known: {sorted(datasets)})"
        )
    dataset = named[table.lower()]
    if not isinstance(dataset, ParquetDataset):
        dataset = ParquetDataset(table, Path(dataset))
    files = dataset.files()
    keys = [k for k, _ in files[0].partition]
    key_set = {k.lower() for k in keys}
    referenced, star = _column_refs(
        {k: v for k, v in node.items() if k != "from_table"}, table, alias
    )
    filters = []
    for conjunct in _conjuncts(node.get("where_clause")):
        refs, _ = _column_refs(conjunct, table, alias)
        if refs and refs <= key_set:
            filters.append(conjunct)
    selected = _selected_partitions(files, keys, filters)
    schema = pq.read_schema(files[0].path)
    data_columns = [name for name in schema.names if name.lower() not in key_set]
    if star:
        wanted = set(data_columns)
    else:
        wanted = {c for c in data_columns if c.lower() in referenced}
        unknown = referenced - key_set - {c.lower() for c in data_columns}
        if unknown:
            raise CostError(f"--sql: unknown column(s) {sorted(unknown)} in {table!r}")
    per_column = dict.fromkeys(sorted(wanted), 0)
    sorted_columns: set[str] = {c.lower() for c in dataset.clustered_by}
    for item in files:
        if item.partition_key not in selected:
            continue
        meta = pq.ParquetFile(item.path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for sc in group.sorting_columns or ():
                sorted_columns.add(meta.schema.column(sc.column_index).path.split(".")[0].lower())
            for i in range(group.num_columns):
                chunk = group.column(i)
                top = chunk.path_in_schema.split(".")[0]
                if top in per_column:
                    per_column[top] += int(chunk.total_compressed_size)
    notes: list[str] = []
    if any(m.get("type") == "LIMIT_MODIFIER" for m in node.get("modifiers", [])):
        notes.append("LIMIT does not reduce bytes read: every selected column chunk is read")
    if star:
        notes.append("SELECT * reads every column: name the columns needed to read less")
    if keys:
        notes.append(
            f"partition filter on {', '.join(keys)} selects {len(selected)} of "
            f"{len({f.partition_key for f in files})} partition(s)"
            if filters else f"no filter on partition column(s) {', '.join(keys)}: all read"
        )
    where_refs, _ = _column_refs(node.get("where_clause"), table, alias)
    clustered_filter = sorted((where_refs & sorted_columns) - key_set)
    if clustered_filter:
        notes.append(
            f"filter on sorted/clustered column(s) {', '.join(clustered_filter)}: row groups may "
            "be skipped, so this is an upper bound"
        )
    return Estimate(
        bytes=sum(per_column.values()),
        method=METHOD,
        upper_bound=bool(clustered_filter),
        columns=per_column,
        partitions=tuple(sorted(selected)),
        partitions_total=len({f.partition_key for f in files}),
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class ParquetQuery:
    """A task's ``cost_estimate``: ``sql`` formatted with ``{start}``/``{end}`` (dates) and
    ``{interval}``, estimated over ``datasets``. The same SQL the task runs should be used."""

    sql: str
    datasets: Mapping[str, ParquetDataset | str | Path]

    def render(self, interval: Interval) -> str:
        return self.sql.format(
            start=interval.start.date().isoformat(), end=interval.end.date().isoformat(),
            interval=interval,
        )

    def __call__(self, interval: Interval) -> Estimate:
        return estimate_parquet(self.render(interval), self.datasets)


CostEstimator = Callable[["Interval"], Estimate]
