"""The ``twice`` command line.

Each subcommand lives in its own module under ``twice.cli`` and is imported only when it is
invoked (or when ``--help`` lists it), so start-up never pays for SQLAlchemy, DuckDB or PyArrow.
The Click application is in ``twice.cli.app``; this module only dispatches.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    """Console-script entry point.

    ``twice decide`` with no options is the lab program: it skips Click entirely so that its
    start-up stays close to a bare ``python3 run.py``.
    """
    if sys.argv[1:] == ["decide"]:
        from twice.interop.lab import main as lab_main

        sys.exit(lab_main())
    import warnings

    from twice.cli.app import cli

    def show(message: Warning | str, category: type[Warning], *_args: object,
             **_kwargs: object) -> None:
        print(f"warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    try:
        cli()
    finally:
        _leave_the_heap()


def _leave_the_heap() -> None:
    """The command has ended and closed what it opened: freeze the objects left, so that the
    interpreter's exit does not walk them all looking for cycles to collect (about 0.2 s after
    a run with its libraries loaded, paid by every process of a fleet of workers ending at
    once); the operating system frees them with the process. Python never promised to
    finalise what is still alive at exit, and twice closes its ledgers and destinations
    itself."""
    import gc

    gc.freeze()


def __getattr__(name: str) -> Any:
    if name in ("cli", "COMMANDS", "LazyGroup"):
        from twice.cli import app

        return getattr(app, name)
    raise AttributeError(f"module 'twice.cli' has no attribute {name!r}")
