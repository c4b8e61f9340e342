"""The dry-run plan table built as text (``backfill_cmd._plain_table``) is Rich's own output
byte for byte, or is not used: it checks all cells as one text, so a newline or an emoji code
in any one cell must still send the table to Rich."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table

from twice.cli.backfill_cmd import PLAN_COLUMNS, _plain_table
from twice.cli.console import make_console

# plain characters, and the ones that matter: markup, emoji-code colons and names, newlines
_CELL = st.lists(st.sampled_from([*"ab0:+-T [/]\n", "smile", "-emoji", "é"]),
                 max_size=8).map("".join)
_ROWS = st.lists(st.tuples(_CELL, _CELL, _CELL, _CELL), min_size=1, max_size=6)


def _rich(cells: list[tuple[str, str, str, str]], title: str | None, show_header: bool) -> str:
    out = io.StringIO()
    console = make_console(file=out)
    table = Table(title=title, show_header=show_header)
    for column in PLAN_COLUMNS:
        table.add_column(column)
    for cell in cells:
        table.add_row(*cell)
    console.print(table)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(cells=_ROWS, title=st.one_of(st.none(), _CELL), show_header=st.booleans())
def test_the_text_table_is_rich_byte_for_byte_or_not_used(
    cells: list[tuple[str, str, str, str]], title: str | None, show_header: bool
) -> None:
    console = make_console(file=io.StringIO())
    plain = _plain_table(console, PLAN_COLUMNS, cells, title or None, show_header=show_header)
    if plain is not None:
        assert plain == _rich(cells, title or None, show_header)


def test_one_cell_with_a_newline_or_an_emoji_code_sends_the_table_to_rich() -> None:
    console = make_console(file=io.StringIO())
    good = [("2026-01-01T00:00:00+00:00", "load", "run", "never run")]
    assert _plain_table(console, PLAN_COLUMNS, good, None, show_header=True) is not None
    for bad in ("two\nlines", "a :smile: here", "[bold]x"):
        cells = [*good, ("2026-01-02T00:00:00+00:00", "load", "run", bad)]
        assert _plain_table(console, PLAN_COLUMNS, cells, None, show_header=True) is None
