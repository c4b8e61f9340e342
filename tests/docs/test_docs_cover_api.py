"""The reference pages cover what the code exposes.

- Every name in ``twice.__all__`` has a ``::: twice.NAME`` block in docs/reference/api.md (or
  sits in a module the page documents whole: ``::: twice`` or the defining module listed in
  ``twice._EXPORTS``), and the page documents no top-level name that is not public.
- Every destination scheme twice can open (the registry ``twice.core.schemes.ENGINE_MODULES``,
  read from the code, not copied here) has a row in the scheme table of
  docs/reference/destinations.md and an example of its ``scheme:`` form.

So adding a public name or a destination engine without documenting it fails here. Whether
each ``:::`` block renders is checked by ``mkdocs build --strict`` (a CI gate in ``.ci/run``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import twice
from twice.core.schemes import ENGINE_MODULES

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "reference" / "api.md"
DESTINATIONS_PAGE = ROOT / "docs" / "reference" / "destinations.md"

DIRECTIVE = re.compile(r"^:::[ \t]+([A-Za-z_][\w.]*)[ \t]*$", re.MULTILINE)


def directives(markdown: str) -> set[str]:
    """The identifiers of the page's mkdocstrings blocks (``::: twice.Pipeline``)."""
    return set(DIRECTIVE.findall(markdown))


def undocumented_names(markdown: str, public: list[str], exports: dict[str, str]) -> list[str]:
    """Public names with neither a block of their own nor a block for a module covering them."""
    blocks = directives(markdown)
    return sorted(
        name for name in public
        if f"twice.{name}" not in blocks and "twice" not in blocks
        and exports.get(name) not in blocks
    )


def undocumented_schemes(markdown: str, schemes: list[str]) -> list[str]:
    """Schemes without a row in the scheme table (``| `scheme` |``) and a ``scheme:`` example."""
    missing = []
    for scheme in schemes:
        row = re.search(rf"^\|\s*`{re.escape(scheme)}`\s*\|", markdown, re.MULTILINE)
        example = re.search(rf"`{re.escape(scheme)}:[^`]+`", markdown)
        if row is None or example is None:
            missing.append(scheme)
    return sorted(missing)


def test_every_public_name_is_documented() -> None:
    missing = undocumented_names(API_PAGE.read_text(encoding="utf-8"), list(twice.__all__),
                                 dict(twice._EXPORTS))
    assert not missing, (
        f"public names without a '::: twice.NAME' block in {API_PAGE.relative_to(ROOT)}: "
        f"{missing}"
    )


def test_api_page_documents_only_public_names() -> None:
    """A top-level ``twice.X`` block must be a public name (a removed one must leave the page)."""
    blocks = directives(API_PAGE.read_text(encoding="utf-8"))
    top_level = {b.split(".", 1)[1] for b in blocks if b.count(".") == 1 and b.startswith("twice.")}
    stale = sorted(top_level - set(twice.__all__))
    assert not stale, f"{API_PAGE.relative_to(ROOT)} documents names not in twice.__all__: {stale}"


def test_every_destination_scheme_is_documented() -> None:
    schemes = sorted(ENGINE_MODULES)
    assert schemes, "the scheme registry is empty: the test would prove nothing"
    missing = undocumented_schemes(DESTINATIONS_PAGE.read_text(encoding="utf-8"), schemes)
    assert not missing, (
        f"destination schemes twice accepts but {DESTINATIONS_PAGE.relative_to(ROOT)} does not "
        f"document (a table row and a 'scheme:...' example each): {missing}"
    )


# The checks themselves: a new name or scheme without docs is caught.


@pytest.mark.parametrize(
    ("page", "missing"),
    [
        ("::: twice.Pipeline\n\n::: twice.Ledger\n", ["Brand"]),
        ("::: twice\n", []),
        ("::: twice.define.pipeline\n::: twice.Ledger\n", ["Brand"]),
        ("::: twice.define.pipeline\n::: twice.Ledger\n::: twice.Brand\n", []),
        ("text mentioning twice.Brand and ::: twice.Brand inline\n::: twice.Pipeline\n"
         "::: twice.Ledger\n", ["Brand"]),
    ],
)
def test_a_new_public_name_without_docs_is_caught(page: str, missing: list[str]) -> None:
    public = ["Pipeline", "Ledger", "Brand"]
    exports = {"Pipeline": "twice.define.pipeline", "Ledger": "twice.ledger",
               "Brand": "twice.core.brand"}
    assert undocumented_names(page, public, exports) == missing


def test_a_new_scheme_without_docs_is_caught() -> None:
    page = (
        "| scheme | form |\n|---|---|\n"
        "| `sqlite` | `sqlite:///abs/path.db#table` |\n"
        "| `iceberg` | (no example) |\n"
        "mentions `delta:///x` without a row\n"
    )
    assert undocumented_schemes(page, ["sqlite", "iceberg", "delta", "hudi"]) == [
        "delta", "hudi", "iceberg",
    ]
