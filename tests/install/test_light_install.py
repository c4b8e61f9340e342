"""The light install (issue 37): ``pip install twice`` carries the embedded default only, and an
integration whose extra is not installed is one line naming it (``MissingExtraError``, exit 2).

The optional packages are made unimportable here (``without_extras``, or ``sys.modules``), as in
an environment that never installed them, so these tests fail if a core path imports one.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from twice.core.extras import require
from twice.errors import MissingExtraError, TwiceError

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("without_extras.py")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    for cut in "[<>=!~ ;":
        requirement = requirement.partition(cut)[0]
    return requirement.strip().lower()


def twice_without_extras(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.run([sys.executable, str(RUNNER), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_core_install_is_the_embedded_default_and_each_integration_an_extra() -> None:
    core = {_name(r) for r in PYPROJECT["dependencies"]}
    assert core == {"click", "rich", "sqlalchemy", "duckdb", "pyarrow", "numpy"}
    extras = PYPROJECT["optional-dependencies"]
    assert {"postgres", "spark", "bigquery", "delta", "iceberg", "dbt", "airflow", "lineage",
            "openlineage", "docs", "test"} <= set(extras)
    assert {_name(r) for r in extras["postgres"]} == {"psycopg"}
    assert extras["openlineage"] == ["twice[lineage]"]  # the name the lineage guide installs
    # the test suite still gets every integration that shares twice's environment
    assert "twice[postgres,spark,bigquery,iceberg,delta,lineage]" in extras["test"]


def test_the_cli_and_the_embedded_path_run_without_any_optional_package(tmp_path: Path) -> None:
    shown = twice_without_extras("demo", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "funds-positions" in shown.stdout.replace("\n", " "), (
        shown.stderr)
    made = twice_without_extras("init", "acme_orders", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ran = twice_without_extras("run", "acme_orders/pipeline.py", "--interval", "2026-11-02",
                               "--ledger", "acme_orders/ledger.db", "--deadline", "none",
                               "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    status = twice_without_extras("status", "--ledger", "acme_orders/ledger.db", cwd=tmp_path)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr


@pytest.mark.parametrize(("destination", "line"), [
    ("postgresql://etl@127.0.0.1:1/db?partition_column=day#public.t",
     "twice run: error: postgresql:// destinations need the postgres extra: "
     "pip install 'twice[postgres]'"),
    ("spark:///w?partition_column=day#t",
     "twice run: error: spark:// destinations need the spark extra: pip install 'twice[spark]'"),
    ("delta:///d?partition_column=day",
     "twice run: error: delta:// destinations need the delta extra: pip install 'twice[delta]'"),
    ("iceberg:///w?partition_column=day#ns.t",
     "twice run: error: iceberg:// destinations need the iceberg extra: "
     "pip install 'twice[iceberg]'"),
])
def test_a_destination_whose_extra_is_missing_is_one_line_and_exit_2(
        tmp_path: Path, destination: str, line: str) -> None:
    (tmp_path / "p.py").write_text(
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination={destination!r}, timeout=60)\n"
        "def load(ctx):\n    return []\n", encoding="utf-8")
    ran = twice_without_extras("run", "p.py", "--interval", "2026-11-23", "--ledger", "l.db",
                               "--deadline", "none", cwd=tmp_path)
    assert (ran.returncode, ran.stderr) == (2, line + "\n")


def test_a_postgresql_ledger_without_the_extra_is_one_line_and_exit_2(tmp_path: Path) -> None:
    ran = twice_without_extras("status", "--ledger", "postgresql://etl@127.0.0.1:1/twice",
                               cwd=tmp_path)
    assert (ran.returncode, ran.stderr) == (
        2, "twice status: error: PostgreSQL ledgers need the postgres extra: "
           "pip install 'twice[postgres]'\n")


Hide = Callable[..., None]


@pytest.fixture
def missing(monkeypatch: pytest.MonkeyPatch) -> Hide:
    """``missing("psycopg")``: the package (and twice modules importing it at load) is gone."""

    def hide(*names: str) -> None:
        for name in names:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                monkeypatch.delitem(sys.modules, loaded)
            monkeypatch.setitem(sys.modules, name, None)  # import raises ModuleNotFoundError
        for engine in ("postgres", "spark", "delta", "iceberg"):
            monkeypatch.delitem(sys.modules, f"twice.destinations.{engine}", raising=False)

    return hide


def test_require_names_the_extra_and_keeps_the_cause(missing: Hide) -> None:
    missing("psycopg")
    with pytest.raises(MissingExtraError) as raised:
        require("psycopg", extra="postgres", who="postgresql:// destinations")
    assert str(raised.value) == ("postgresql:// destinations need the postgres extra: "
                                 "pip install 'twice[postgres]'")
    assert isinstance(raised.value, TwiceError) and raised.value.extra == "postgres"
    assert isinstance(raised.value.__cause__, ImportError)
    assert require("json", extra="x", who="y").__name__ == "json"


def test_a_module_whose_own_dependency_is_missing_says_which(
        missing: Hide, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_py4j.py").write_text("import py4j\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    missing("py4j")
    with pytest.raises(MissingExtraError, match=r"twice\[spark\]' \(.*py4j"):
        require("needs_py4j", extra="spark", who="spark:// destinations")


def test_open_destination_names_each_missing_extra(missing: Hide, tmp_path: Path) -> None:
    from twice.destinations import open_destination

    missing("psycopg", "pyspark", "deltalake", "pyiceberg")
    for spec, extra in [("postgresql://etl@127.0.0.1:1/db#public.t", "postgres"),
                        (f"spark://{tmp_path}/w#t", "spark"), (f"delta://{tmp_path}/d", "delta"),
                        (f"iceberg://{tmp_path}/w#ns.t", "iceberg")]:
        with pytest.raises(MissingExtraError, match=rf"pip install 'twice\[{extra}\]'$"):
            open_destination(spec)


def test_other_integrations_name_their_extra(missing: Hide,
                                            caplog: pytest.LogCaptureFixture) -> None:
    import twice.drivers.airflow as airflow_driver
    from twice import Pipeline, RetryPolicy, Schedule
    from twice.engine.lineage import lineage_listeners
    from twice.interop.translations import to_tenacity_retrying
    from twice.ledger.engine import create_ledger_engine, resolve_url
    from twice.remote.bigquery import BigQueryJobs

    missing("google", "airflow", "openlineage", "tenacity", "psycopg")
    with pytest.raises(MissingExtraError, match=r"^BigQuery jobs need the bigquery extra"):
        BigQueryJobs(object())._job_config({"query": "SELECT 1"})  # type: ignore[arg-type]
    with pytest.raises(MissingExtraError, match=r"^Airflow DAGs .* 'twice\[airflow\]'$"):
        airflow_driver.to_dag  # noqa: B018
    with pytest.raises(MissingExtraError, match=r"^tenacity Retrying objects need tenacity: "
                                                r"pip install tenacity$"):
        to_tenacity_retrying(RetryPolicy(max_attempts=2))
    with pytest.raises(MissingExtraError, match=r"^PostgreSQL ledgers need the postgres extra"):
        create_ledger_engine(resolve_url("postgresql://etl@127.0.0.1:1/twice"))
    # lineage only observes: the run goes on, the warning names the extra
    with caplog.at_level(logging.WARNING, logger="twice.lineage"):
        listeners = lineage_listeners(Pipeline("p", schedule=Schedule.daily("UTC")),
                                      environ={"OPENLINEAGE_URL": "http://x"})
    assert listeners == [] and "pip install 'twice[lineage]'" in caplog.text
