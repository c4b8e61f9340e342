"""OpenLineage dataset names of twice's destinations, by the OpenLineage naming spec.

A lineage backend joins the datasets of different producers (Airflow, Spark, dbt, twice) only
when they name a table alike, so a destination is named the way the naming spec
(https://openlineage.io/docs/spec/naming) names its data store, through the client's own
``openlineage.client.naming.dataset`` classes where the spec has an entry:

=========================================  =============================  =======================
twice destination                          namespace                      name
=========================================  =============================  =======================
``postgresql://u@HOST:PORT/DB#S.T``        ``postgres://HOST:PORT``       ``DB.S.T`` (S default
                                                                          ``public``, PORT 5432)
``bq:P.D.T`` / ``bigquery:P.D.T``          ``bigquery``                   ``P.D.T``
``parquet:///abs/dir``                     ``file``                       ``/abs/dir``
``delta:///abs/table``                     ``file``                       ``/abs/table``
``iceberg:///abs/wh#NS.T``                 ``file``                       ``/abs/wh/NS/T`` (the
                                                                          table's location)
``spark:///abs/wh#T``                      ``file``                       ``/abs/wh/T`` (the
                                                                          table's location)
``duckdb:///abs/F.duckdb#S.T``             ``duckdb:///abs/F.duckdb``     ``F.S.T`` (S default
                                                                          ``main``)
``sqlite:///abs/F.db#T``                   ``sqlite:///abs/F.db``         ``T``
``s3://B/K``, ``gs://B/K``, ``file:///p``  ``s3://B``, ``gs://B``,        ``K``, ``K``, ``/p``
                                           ``file``
anything else ``scheme://authority/path``  ``scheme://authority``         ``path`` (``path.T``
                                                                          with ``#T``)
=========================================  =============================  =======================

The spec has no entry for DuckDB or SQLite: DuckDB is named as OpenLineage's dbt integration
names dbt-duckdb relations (the file as namespace, ``catalog.schema.table`` as name, the catalog
being the file's stem), SQLite alike without a catalog. File formats are named by their
directory, as OpenLineage's Spark integration names path-based tables. No name ever carries a
password: every spec is reduced to its public identity first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from twice.core.secrets import public_spec
from twice.errors import InputError

POSTGRES_PORT = 5432
POSTGRES_SCHEMA = "public"
DUCKDB_SCHEMA = "main"
ICEBERG_NAMESPACE = "default"  # twice.destinations.iceberg.DEFAULT_NAMESPACE


@dataclass(frozen=True)
class DatasetName:
    """An OpenLineage dataset's identity: ``namespace`` (the data source) and ``name``."""

    namespace: str
    name: str


def dataset_naming(spec: str) -> DatasetName:
    """The OpenLineage dataset a destination spec (or a declared input) names (module table)."""
    from openlineage.client.naming import dataset as naming

    public = public_spec(spec)
    scheme = public.partition(":")[0].lower() if ":" in public else ""
    rest = public[len(scheme) + 1:] if scheme else public
    location, _, fragment = rest.partition("#")
    location = location.partition("?")[0]
    path = _local_path(location)
    found: naming.DatasetNaming
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(public)
        schema, _, table = fragment.rpartition(".")
        found = naming.Postgres(host=parts.hostname or "localhost",
                                port=str(parts.port or POSTGRES_PORT),
                                database=unquote(parts.path.lstrip("/")) or "postgres",
                                schema=schema or POSTGRES_SCHEMA, table=table)
    elif scheme in ("bq", "bigquery"):
        parts3 = location.lstrip("/").replace("/", ".").split(".", 2)
        if len(parts3) != 3 or not all(parts3):
            raise InputError(f"{public!r}: a BigQuery table is bq:project.dataset.table")
        project, dataset, table = parts3
        found = naming.BigQuery(project_id=project, dataset_name=dataset, table_name=table)
    elif scheme in ("parquet", "delta", "file"):
        found = naming.LocalFileSystem(path=path)
    elif scheme == "spark":
        found = naming.LocalFileSystem(path=str(PurePosixPath(path) / fragment))
    elif scheme == "iceberg":
        namespace, _, table = fragment.rpartition(".")
        found = naming.LocalFileSystem(
            path=str(PurePosixPath(path) / (namespace or ICEBERG_NAMESPACE) / table))
    elif scheme == "duckdb":
        schema, _, table = fragment.rpartition(".")
        catalog = PurePosixPath(path).stem or "memory"
        return DatasetName(f"duckdb://{path}", f"{catalog}.{schema or DUCKDB_SCHEMA}.{table}")
    elif scheme == "sqlite":
        return DatasetName(f"sqlite://{path}", fragment)
    elif scheme == "s3":
        parts = urlsplit(public)
        found = naming.S3(bucket_name=parts.netloc, object_key=parts.path.lstrip("/"))
    elif scheme == "gs":
        parts = urlsplit(public)
        found = naming.GCS(bucket_name=parts.netloc, object_key=parts.path.lstrip("/"))
    else:  # the spec's general rule: namespace scheme://authority, name the path
        parts = urlsplit(public.partition("#")[0].partition("?")[0])
        path_name = parts.path.strip("/")
        name = ".".join(p for p in (path_name.replace("/", "."), fragment) if p) if fragment \
            else path_name or public
        return DatasetName(f"{parts.scheme}://{parts.netloc}" if parts.netloc else scheme, name)
    return DatasetName(found.get_namespace(), found.get_name())


def _local_path(location: str) -> str:
    """The path of ``///abs/path`` or ``//localhost/abs/path`` (as written otherwise)."""
    if location.startswith("//"):
        host, slash, rest = location[2:].partition("/")
        location = slash + rest if host in ("", "localhost") else location
    return unquote(location)
