"""Objects that hold something open (a database, connections, running jobs) until closed.

A ``with`` block closes them on the way out however it exits, so each class only says what
closing releases, not how the block ends.
"""

from __future__ import annotations

from typing import Self


class Closeable:
    """``with`` support for anything with ``close()``: the block gets the object itself."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what the object holds open (by default, nothing)."""
