"""Text from outside twice, made inert before an operator reads it.

Error messages, notes, operator names, job ids, owners and descriptions come from task code,
services and people. Shown raw on a terminal, an escape sequence in one can clear the screen,
retitle the window or hide the rest of a line; a carriage return or a newline can forge a line
of a report; a bidirectional override can reverse what follows it. Every report shows such
text through :func:`inert`: each control or bidirectional-formatting character becomes its
escape (``\\x1b``, ``\\n``, ``\\u202e``), visible and copyable. The ledger and the JSON
documents keep the text as recorded (JSON escapes control characters itself).

Standard library only, like the rest of ``twice.core``.
"""

from __future__ import annotations

import re

#: C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional marks,
#: embeddings, overrides and isolates.
_FORMATTING = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ANY = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMATTING}]")
_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMATTING}]")  # keeps \t and \n
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def inert(text: str, *, lines: bool = False) -> str:
    """``text`` with every control and bidirectional-formatting character escaped; with
    ``lines``, tabs and newlines are kept (a document of several lines that twice composed)."""
    return (_BUT_LINES if lines else _ANY).sub(_escaped, text)


def html_text(text: str, *, quote: bool = True) -> str:
    """``text`` for an HTML page (the report, its SVG timelines): inert, tabs and newlines
    kept, then HTML-escaped (``quote``: quotes too, for attribute values)."""
    import html

    return html.escape(inert(str(text), lines=True), quote=quote)
