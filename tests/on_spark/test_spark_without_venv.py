"""Spark's Python workers run twice's interpreter, not whatever ``python3`` is on PATH.

Found by issue 39: without an activated virtual environment, Spark started its Python workers
with the system ``python3``, which has no twice: they failed "No module named 'twice'" after
the data was written, and the unit was failed-permanent. The session twice starts now names
its own interpreter for the workers (unless ``PYSPARK_PYTHON`` says otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    from datetime import date
    from twice.define.schedule import Schedule
    from twice.destinations import open_destination
    from twice.destinations.fingerprint import fingerprint
    day = Schedule.daily("UTC").interval_for(date(2026, 11, 1))
    spec = "spark://{warehouse}?partition_column=day#t_novenv"
    with open_destination(spec) as dest:
        dest.replace_partition([{{"day": date(2026, 11, 1), "x": 1.5}}], day, stamp=None)
        print("rows", dest.row_count(day), "fingerprint", fingerprint(dest, day).row_count)
""")


def test_a_spark_write_needs_no_activated_venv(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime")
    system_path = "/usr/local/bin:/usr/bin:/bin"
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = system_path
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    script = SCRIPT.format(warehouse=tmp_path / "warehouse")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rows 1 fingerprint 1" in done.stdout
