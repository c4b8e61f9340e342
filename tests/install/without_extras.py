"""Run the twice CLI as the core install has it: every optional package (each extra's, and the
test suite's own) cannot be imported, as if it were not installed.

``python tests/install/without_extras.py ARGS...`` is ``twice ARGS...`` in such an environment:
a finder placed first on ``sys.meta_path`` answers ``ModuleNotFoundError`` for those packages
(what Python says of a package that is not installed), whatever this environment holds.
"""

from __future__ import annotations

import importlib.abc
import sys

#: The top-level modules of every extra and of the test tools: none is in the core install.
OPTIONAL = frozenset({
    "psycopg", "psycopg_binary", "pyspark", "py4j", "google", "pyiceberg", "deltalake",
    "openlineage", "airflow", "dbt", "pandas", "tenacity", "jsonschema", "hypothesis",
    "pytest", "mkdocs", "ruff", "mypy",
})


class NotInstalled(importlib.abc.MetaPathFinder):
    """Refuse the optional modules as an environment without them would."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname.partition(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def install() -> None:
    for name in list(sys.modules):
        if name.partition(".")[0] in OPTIONAL:
            del sys.modules[name]
    sys.meta_path.insert(0, NotInstalled())


if __name__ == "__main__":
    install()
    from twice.cli import main

    sys.argv[0] = "twice"
    main()
