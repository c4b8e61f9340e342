"""The layer map of docs/architecture.md, enforced: which twice package may import which.

Every import counts, including those inside functions and under ``TYPE_CHECKING``: a lazy import
is still a dependency. A package may always import itself and the error root (``twice.errors``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "twice"

#: package -> the other twice packages it may import (besides itself and twice.errors)
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "define": frozenset({"core"}),
    "destinations": frozenset({"core"}),
    "remote": frozenset({"core"}),
    "ledger": frozenset({"core"}),
    "interop": frozenset({"core"}),
    "engine": frozenset({"core", "define", "destinations", "remote", "ledger"}),
    "reports": frozenset({"core", "define", "ledger", "engine"}),
    "drivers": frozenset({"core", "define", "destinations", "remote", "ledger", "engine",
                          "interop"}),
    "testing": frozenset({"core", "define", "destinations", "remote", "ledger", "engine"}),
    "cli": frozenset({"core", "define", "destinations", "remote", "ledger", "engine",
                      "drivers", "reports", "interop", "testing"}),
}


def imported_modules(path: Path) -> set[str]:
    """Every ``twice...`` module a file imports, at any depth of the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "twice" or name.startswith("twice.")}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def files_of(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


def test_every_package_has_a_rule() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_follow_the_layer_map(package: str) -> None:
    allowed = ALLOWED[package] | {package, "errors"}
    wrong = []
    for path in files_of(package):
        for module in sorted(imported_modules(path)):
            target = package_of(module)
            if target is None or not ((SRC / target).exists() or (SRC / f"{target}.py").exists()):
                continue  # ``from twice import X``: a public name, not a package
            if target not in allowed:
                wrong.append(f"{path.relative_to(SRC)} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_drivers_never_import_each_other() -> None:
    drivers = {p.stem if p.is_file() else p.name for p in (SRC / "drivers").iterdir()
               if p.name != "__init__.py" and not p.name.startswith("__")}
    wrong = []
    for path in files_of("drivers"):
        rel = path.relative_to(SRC / "drivers")
        own = rel.parts[0].removesuffix(".py")
        for module in imported_modules(path):
            parts = module.split(".")
            if len(parts) > 2 and parts[1] == "drivers" and parts[2] in drivers and parts[2] != own:
                wrong.append(f"drivers/{rel} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_core_is_standard_library_only() -> None:
    """Nothing but the standard library (and itself): the planner must run anywhere."""
    import sys

    wrong = []
    for path in files_of("core"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top != "twice" and top not in sys.stdlib_module_names:
                    wrong.append(f"core/{path.name} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    """The checker itself can fail: a core module importing the engine is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from twice.engine.executor import Executor\n")
    assert "twice.engine.executor" in imported_modules(bad)
    assert package_of("twice.engine.executor") not in ALLOWED["core"]


#: the modules of one unit's lifecycle (docs/architecture.md, "The lifecycle as a state machine")
LIFECYCLE = ("executor", "lifecycle", "claim", "hold", "gates", "slots", "attempting", "verify",
             "settlement", "settle", "drive", "phase")


@pytest.mark.parametrize("module", LIFECYCLE)
def test_lifecycle_modules_stay_small(module: str) -> None:
    """Each lifecycle module fits in a few screens, and no class holds the whole lifecycle."""
    path = SRC / "engine" / f"{module}.py"
    lines = path.read_text().splitlines()
    assert len(lines) <= 600, f"{path.name}: {len(lines)} lines"
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= 400, f"{path.name}: class {node.name} is {size} lines"
