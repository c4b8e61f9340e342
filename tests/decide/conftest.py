"""The lab's reference program, the oracle the planner is compared with byte for byte.

A verbatim copy lives beside this file (``lab_reference.py.txt``) so a clone anywhere runs the
comparison. When the seed text is found (``$TWICE_LAB_SEED``, or ``shared/seeds`` beside the
checkout), the program is extracted from it and must equal the copy: the copy cannot drift from
the specification unnoticed.
"""

from __future__ import annotations

import os
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED_CANDIDATES = [
    Path(os.environ["TWICE_LAB_SEED"]) if os.environ.get("TWICE_LAB_SEED") else None,
    ROOT.parent / "shared" / "seeds" / "retry-window-pt.txt",
    ROOT.parent.parent / "shared" / "seeds" / "retry-window-pt.txt",
]


COPY = Path(__file__).with_name("lab_reference.py.txt")


def seed_source() -> str | None:
    """The program as the seed text holds it, or None where no seed text is found."""
    for candidate in SEED_CANDIDATES:
        if candidate is not None and candidate.is_file():
            text = candidate.read_text(encoding="utf-8")
            match = re.search(r'"""Original offline.*?sys\.exit\(2\)\n', text, re.S)
            if match:
                return match.group(0)
    return None


def reference_source() -> str:
    return COPY.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def reference() -> types.ModuleType:
    source = reference_source()
    module = types.ModuleType("lab_reference")
    exec(compile(source, "lab_reference.py", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="session")
def reference_file(tmp_path_factory: pytest.TempPathFactory, reference: types.ModuleType) -> Path:
    path = tmp_path_factory.mktemp("lab") / "reference_run.py"
    path.write_text(reference_source())
    return path
