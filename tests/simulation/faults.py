"""Named crash points and the faults the simulated world injects at them (issue 36).

Every place where the world may interrupt the real engine is a named point, listed once in
``CRASH_POINTS`` with the faults allowed there. Reaching a point is one simulation step. A
``Crash`` is a SIGKILL: it is a ``BaseException`` (task code and the engine's ``except
Exception`` handlers do not swallow it), the transaction it interrupts rolls back, and every
later ledger or destination write, task call or delivery by the crashed holder raises
``Crash`` again, so nothing more it does becomes durable; the harness then starts a fresh
executor in its place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.simulation.world import World


class Crash(BaseException):
    """The holder was killed (SIGKILL) at a crash point."""


#: point -> the faults the world may inject there. ``crash``: SIGKILL; ``lost_ack``: the write
#: committed but its caller hears an error of unknown outcome; ``ledger_fault``: a transient
#: ``LedgerUnavailableError`` (nothing recorded); ``task_error``: a transient error raised by
#: task code; ``pause``: the holder stops past its lease TTL while another holder runs (a zombie).
CRASH_POINTS: dict[str, tuple[str, ...]] = {
    "ledger.write.begin": ("crash", "ledger_fault", "pause"),
    "ledger.write.before_commit": ("crash",),
    "ledger.write.after_commit": ("crash", "lost_ack"),
    "dest.write.begin": ("crash",),
    "dest.write.before_commit": ("crash",),
    "dest.write.after_commit": ("crash", "lost_ack"),
    "task.start": ("crash", "task_error"),
    "task.before_output": ("crash", "task_error", "pause"),
    "effect.before_send": ("crash", "task_error", "pause"),
    "effect.after_send": ("crash", "lost_ack"),
    "remote.after_submit": ("crash", "lost_ack", "pause"),
}


_world: World | None = None


def current_world() -> World | None:
    return _world


@contextmanager
def active(world: World) -> Iterator[None]:
    """Make ``world`` the one the destination hooks report to (one simulation at a time)."""
    global _world
    _install_destination_hooks()
    previous, _world = _world, world
    try:
        yield
    finally:
        _world = previous


_installed = False


def _install_destination_hooks() -> None:
    """Wrap the embedded destinations' write transaction (SQLite and DuckDB): the points
    before it starts, before its COMMIT and after it. Outside a simulation it is unchanged."""
    global _installed
    if _installed:
        return
    from twice.destinations.embedded import EmbeddedSqlDestination

    original = EmbeddedSqlDestination._transaction

    @contextmanager
    def transaction(self: Any) -> Iterator[Any]:
        world = _world
        if world is None:
            with original(self) as tx:
                yield tx
            return
        world.point("dest.write.begin")
        world.dest_depth += 1
        try:
            with original(self) as tx:
                yield tx
                world.point("dest.write.before_commit")
        finally:
            world.dest_depth -= 1
        world.destination_committed(self.spec)
        world.point("dest.write.after_commit", spec=self.spec)

    EmbeddedSqlDestination._transaction = transaction  # type: ignore[method-assign]
    _installed = True


def hook_ledger(ledger: Any, world: World) -> None:
    """Wrap one holder's ledger: every write transaction (``Session.scope``) passes the points
    before it starts, before its COMMIT and after it. Reads are not faulted."""
    session = ledger._session
    original = session.scope

    @contextmanager
    def scope(*, read_only: bool, isolation: str | None = None, retry_start: bool = False,
              what: str = "") -> Iterator[Any]:
        if read_only:
            with original(read_only=True, isolation=isolation, retry_start=retry_start,
                          what=what) as conn:
                yield conn
            return
        world.point("ledger.write.begin")
        with original(read_only=False, isolation=isolation, retry_start=retry_start,
                      what=what) as conn:
            yield conn
            world.point("ledger.write.before_commit")
        world.point("ledger.write.after_commit")

    session.scope = scope
