"""docs/guides/lineage.md runs as written, and its naming table covers every engine (issue 37).

The guide's ```bash blocks run in order, in one shell, in a fresh directory holding the
repository's ``examples``, the way tests/readme runs the README (same parser, same directives);
the listing its "Try it" section prints must be the ```text block that follows. Every scheme
twice can open has a row in the "Dataset names" table, named there as the code names it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme.runner import blocks, script
from twice.core.schemes import ENGINE_MODULES

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guides" / "lineage.md"

pytest.importorskip("openlineage.client")


def shown_listing(text: str) -> list[str]:
    """The ```text block right after the "Try it" section's ```bash block."""
    section = text[text.index("## Try it"):]
    return section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def test_every_command_of_the_guide_runs_as_written(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    text = GUIDE.read_text(encoding="utf-8")
    commands, left_out, ran_commands = script("lineage.md", blocks(text), set())
    (tmp_path / "guide.sh").write_text(commands)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TWICE_", "OPENLINEAGE", "AIRFLOW"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)  # no ~/.openlineage/openlineage.yml of the machine
    ran = subprocess.run(["bash", "guide.sh"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert len(left_out) == 1  # the pip install
    printed = "".join((tmp_path / ".docs-test" / f"{stem}.out").read_text()
                      for stem, _ in ran_commands)
    listing = [line for line in printed.splitlines() if re.match(r"(START|COMPLETE) ", line)]
    assert listing == shown_listing(text)


def test_the_naming_table_has_a_row_per_engine_named_as_the_code_names_it() -> None:
    from twice.engine.dataset_naming import dataset_naming

    text = GUIDE.read_text(encoding="utf-8")
    table = text[text.index("## Dataset names"):text.index("## Declared inputs")]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    named = {}
    for destination, namespace, name in ((r[0], r[1], r[2]) for r in rows):
        spec = re.search(r"`([^`]+)`", destination)
        assert spec is not None
        named[spec.group(1).partition(":")[0]] = spec.group(1)
        if "," not in namespace and "scheme" not in spec.group(1):
            found = dataset_naming(spec.group(1))
            assert f"`{found.namespace}`" == namespace.strip()
            assert name.strip().startswith(f"`{found.name}`")
    aliases = {"postgres": "postgresql"}  # a row names both
    assert {aliases.get(s, s) for s in ENGINE_MODULES} <= set(named)
