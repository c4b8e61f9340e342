"""A real SparkSession (``local[2]``) for the Spark destination tests, started once per run.

Kept fast: 2 shuffle partitions, no UI, no progress bars, quiet logs. Missing pyspark or Java
skips these tests locally and fails them under CI (``CI`` set), where Spark must be present.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Spark tests must run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        _unavailable("pyspark is not installed (pip install 'twice[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _unavailable("no Java runtime (pyspark needs Java 17+)")
    session = (
        SparkSession.builder.master("local[2]").appName("twice-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def spec(spark: Any, tmp_path: Path) -> str:
    """A fresh table spec (unique name: the session catalog is shared by all tests)."""
    return f"spark://{tmp_path}/warehouse?partition_column=day#t_{uuid.uuid4().hex[:10]}"
