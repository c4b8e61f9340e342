"""The lab's reference program, when the seed text is beside the checkout.

The project does not contain the program: it is extracted at test time from the seed text
(``../shared/seeds/retry-window-pt.txt``, or ``$TWICE_LAB_SEED``) to compare outputs byte for
byte. Under CI the seed is always there and a missing seed is a failure, not a skip.
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


def reference_source() -> str | None:
    for candidate in SEED_CANDIDATES:
        if candidate is not None and candidate.is_file():
            text = candidate.read_text(encoding="utf-8")
            match = re.search(r'"""Original offline.*?sys\.exit\(2\)\n', text, re.S)
            if match:
                return match.group(0)
    return None


@pytest.fixture(scope="session")
def reference() -> types.ModuleType:
    source = reference_source()
    if source is None:
        if os.environ.get("CI"):
            pytest.fail("lab seed text not found beside the checkout (../shared/seeds)")
        pytest.skip("lab seed text not found")
    module = types.ModuleType("lab_reference")
    exec(compile(source, "lab_reference.py", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="session")
def reference_file(tmp_path_factory: pytest.TempPathFactory, reference: types.ModuleType) -> Path:
    path = tmp_path_factory.mktemp("lab") / "reference_run.py"
    path.write_text(reference_source() or "")
    return path
