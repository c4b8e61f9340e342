"""The body of an attempt: run the task under its write stamp, then land its returned output.

twice owns the write (see ``twice.destinations.commits`` for the protocol): while the task
runs, its :class:`~twice.destinations.commits.WriteStamp` is active, so every write it makes
through ``open_destination`` commits a commit record with the rows. A task declared with
``write=`` returns its output instead, and twice writes it here, inside the attempt (its
timeout covers the write): ``replace`` the interval's slice, ``upsert`` by the destination's
key columns (rows must lie inside the interval when the destination is partitioned), or
``append`` exactly once per unit and generation.

Acceptance decides before anything lands. With criteria, every owned write to the task's
destination is admitted (``twice.destinations.landing``) just before it commits, on the slice
as it will be, by one rule: ``twice.engine.verification.check_before_landing``. A write of the
returned output is decided on every criterion; a write the task makes itself while it runs,
on the non-fatal errors recorded so far (the rest is decided after the attempt). A refused
write commits nothing and the attempt fails with ``AcceptanceFailed``.

A task declared ``intermediate=`` runs through :func:`intermediate_body` instead: the
materialize-or-reuse logic (``twice.engine.intermediates``) reuses the stored slice without
calling the task while its version and integrity fingerprint match, and otherwise calls it and
writes its returned output as ``write="replace"`` does, under the same stamp, pins and admission.

Inputs are pinned before the task runs (``twice.engine.inputs``): a returned output is written
only if every upstream still holds the version the unit was identified on after the task
returned; a write the task makes itself, only if they hold as it commits. Otherwise nothing
lands (``InputsChangedError``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twice.destinations.commits import WriteStamp, stamped
from twice.destinations.landing import Admission, admitting
from twice.engine import inputs

if TYPE_CHECKING:
    from twice.define.pipeline import Task, TaskContext
    from twice.destinations.base import WriteResult
    from twice.destinations.landing import Landing
    from twice.engine.intermediates import IntermediateUse
    from twice.ledger import Ledger


@dataclass(frozen=True)
class Landed:
    """What the attempt body returns when twice wrote the output: the task's own value and
    the write's evidence (None: an intermediate reused, nothing written), and for an
    ``intermediate=`` task what the materialize-or-reuse logic did."""

    value: Any
    write: WriteResult | None
    intermediate: IntermediateUse | None = None


def run_body(task: Task, ctx: TaskContext) -> Any:
    """Pin the attempt's inputs (``twice.engine.inputs``), call the task with its stamp and
    admission active; land a returned output when ``task.write`` is set."""
    stamp = ctx.stamp if isinstance(ctx.stamp, WriteStamp) else None
    with stamped(stamp), inputs.pinned(ctx.inputs):
        with admitting(admission(task, ctx, complete=False)):
            value = task.fn(ctx)
        if task.write is None:
            return value
        return Landed(value, land(task, ctx, value))


def intermediate_body(ledger: Ledger) -> Callable[[Task, TaskContext], Any]:
    """The attempt body of an ``intermediate=`` task, recording in ``ledger``'s catalog."""

    def body(task: Task, ctx: TaskContext) -> Any:
        return run_intermediate(ledger, task, ctx)

    return body


def run_intermediate(ledger: Ledger, task: Task, ctx: TaskContext) -> Landed:
    """Reuse the task's stored slice if it is provably intact, else run the task and write it.

    ``materialize_or_reuse`` decides: the same version (the unit's identity) whose integrity
    fingerprint still matches is reused and the task is not called; a copy that changed is
    refused (recorded with both fingerprints), a copy past its retention or of another
    version is not used, and then the task runs and its output replaces the slice. On reuse
    the returned value is the stored slice read back (what ``ctx.upstream`` then holds)."""
    from twice.destinations import open_destination
    from twice.engine.intermediates import materialize_or_reuse

    declared = task.intermediate
    assert declared is not None  # the executor chooses this body for such tasks only
    stamp = ctx.stamp if isinstance(ctx.stamp, WriteStamp) else None
    returned: list[Any] = []

    def compute() -> Any:
        with admitting(admission(task, ctx, complete=False)):
            value = task.fn(ctx)
        returned.append(value)
        return returned_rows(task, value, declared="intermediate= stores the returned output",
                             empty="an empty table stores nothing")

    with stamped(stamp), inputs.pinned(ctx.inputs) as pins, \
            open_destination(task.destination) as dest, \
            admitting(admission(task, ctx, complete=True)):
        if pins is not None:  # a copy keyed by these inputs is reused only while they hold
            pins.confirm()
        use = materialize_or_reuse(
            ledger, declared.catalog_name(task.name), ctx.unit, compute=compute, store=dest,
            owner=declared.owner, retention=declared.retention,
            fingerprint_columns=declared.fingerprint_columns, partition=ctx.interval,
        )
        value = returned[0] if returned else dest.read_partition(ctx.interval)
    return Landed(value, use.written, use)


def returned_rows(task: Task, value: Any, *, declared: str, empty: str) -> Any:
    """The rows a task's returned ``value`` writes, once its pinned inputs are confirmed
    (after every read the task made, before the write begins); None is refused, naming what
    the task ``declared`` and what an ``empty`` table would do instead."""
    if value is None:
        from twice.destinations.errors import DestinationError

        raise DestinationError(f"task {task.name!r}: {declared} but the task returned None; "
                               f"return the interval's rows ({empty})")
    rows = rows_of(value)
    pins = inputs.active()
    if pins is not None:
        pins.confirm()
    return rows


def admission(task: Task, ctx: TaskContext, *, complete: bool) -> Admission | None:
    """What decides the task's owned writes before they commit: a write the task makes
    itself while it runs lands only while its pinned inputs still hold (a returned output is
    confirmed by ``land`` before its write begins); then its acceptance criteria, for writes
    to its own destination only (the criteria are declared against it). None when nothing
    decides. ``complete``: the write lands the whole returned output."""
    criteria = task.acceptance
    pins = None if complete else inputs.active()
    if criteria is None and pins is None:
        return None
    own: list[str] = []  # the destination's canonical spec, read at the first write

    def decide(landing: Landing) -> None:
        from twice.destinations import open_destination
        from twice.engine import verification

        if pins is not None:
            pins.confirm()
        if criteria is None:
            return
        if not own:
            with open_destination(task.destination) as dest:
                own.append(dest.spec)
        if landing.destination != own[0]:
            return
        # looked up at each write: the rule is one function, replaced whole by a simulation
        verification.check_before_landing(criteria, landing, nonfatal_errors=ctx.nonfatal_count,
                                          complete=complete)

    return decide


def land(task: Task, ctx: TaskContext, value: Any) -> WriteResult:
    """Write ``value`` to the task's destination as ``task.write`` says (stamped by the caller)."""
    from twice.destinations import open_destination
    from twice.destinations.errors import DestinationError

    rows = returned_rows(task, value, declared=f"write={task.write!r}",
                         empty="an empty table replaces the slice with nothing")
    with open_destination(task.destination) as dest, \
            admitting(admission(task, ctx, complete=True)):
        partition = ctx.interval if dest.partition_column else None
        if task.write == "replace":
            if partition is None:
                raise DestinationError(
                    f"task {task.name!r}: write='replace' replaces the interval's slice; the "
                    f"destination {task.destination!r} needs ?partition_column=NAME"
                )
            return dest.replace_partition(rows, partition)
        if task.write == "upsert":
            return dest.upsert(rows, partition=partition)
        return dest.append(rows, partition=partition)


def rows_of(value: Any) -> Any:
    """Accept what ``twice.destinations.rows.to_arrow`` accepts, plus batches and relations."""
    import pyarrow as pa

    if isinstance(value, pa.RecordBatchReader):
        return value.read_all()
    if hasattr(value, "__arrow_c_stream__") and not isinstance(value, pa.Table):
        # a stream is read once: read it whole here, as the one table the write converts
        return pa.RecordBatchReader.from_stream(value).read_all()
    if type(value).__module__.split(".")[0] == "duckdb" and hasattr(value, "arrow"):
        table = value.arrow()  # a DuckDB relation
        return table.read_all() if isinstance(table, pa.RecordBatchReader) else table
    if isinstance(value, list | tuple) and value and all(
        isinstance(item, pa.RecordBatch) for item in value
    ):
        return pa.Table.from_batches(list(value))
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | dict) and hasattr(
        value, "__next__"
    ):
        items = list(value)
        if items and all(isinstance(item, pa.RecordBatch) for item in items):
            return pa.Table.from_batches(items)
        return items
    return value
