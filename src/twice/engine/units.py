"""Identifying a unit of work: its input version covers its upstream outputs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Pipeline, Task
from twice.engine import snapshots

if TYPE_CHECKING:
    from twice.ledger import FingerprintRecord, Ledger


def identify_unit(
    pipeline: Pipeline, ledger: Ledger, task_name: str, interval: Interval, *,
    upstream: Mapping[str, FingerprintRecord | None] | None = None,
) -> UnitOfWork:
    """The unit of work of ``task_name`` for ``interval`` as the ledger stands now (see
    ``Executor.unit_for``); drivers and plans use this so they name the units the engine runs.
    ``upstream``: the upstreams' recorded versions (``upstream_fingerprints``) when the caller
    has read them already."""
    base = pipeline.unit_of_work(task_name, interval)
    task = pipeline.get_task(task_name)
    deps = [dep for dep in task.depends_on if dep in pipeline]
    version = base.input_version
    if deps:
        if upstream is None:
            upstream = upstream_fingerprints(pipeline, ledger, task_name, base.interval)
        versions = {dep: _output_version(pipeline, ledger, dep, base.interval, upstream)
                    for dep in deps}
        digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]
        version = f"{version}+up:{digest}" if version else f"up:{digest}"
    if task.snapshot is not None:
        suffix = snapshots.input_version_suffix(ledger, pipeline.name, task_name, base.interval)
        version = f"{version}{suffix}" if version or not suffix else suffix[1:]
    if version == base.input_version:
        return base
    return pipeline.unit_of_work(task_name, interval, input_version=version)


def upstream_fingerprints(pipeline: Pipeline, ledger: Ledger, task_name: str,
                          interval: Interval) -> dict[str, FingerprintRecord | None]:
    """The latest recorded version of each upstream slice with a destination (None: nothing
    recorded): what a dependent's unit is keyed by (``twice.engine.inputs`` pins it)."""
    task = pipeline.get_task(task_name)
    out: dict[str, FingerprintRecord | None] = {}
    for dep in task.depends_on:
        if dep in pipeline and pipeline.get_task(dep).owns_output:
            out[dep] = ledger.latest_fingerprint(pipeline.get_task(dep).destination,
                                                 interval.label)
    return out


def overwritten_by(ledger: Ledger, task: Task, unit: UnitOfWork) -> FingerprintRecord | None:
    """The latest recorded version of ``unit``'s destination partition when ANOTHER unit of
    the same task and interval wrote it (so ``unit``'s success no longer stands for its slot:
    e.g. a source reverted to an earlier version); None while the slot holds ``unit``'s output
    or the task owns no destination. Every driver applies it (the engine, ``twice worker``)."""
    if not task.owns_output:
        return None
    latest = ledger.latest_fingerprint(task.destination, unit.interval.label)
    if latest is None or latest.uow_id in (None, unit.uow_id):
        return None
    return latest


def _output_version(pipeline: Pipeline, ledger: Ledger, dep: str, interval: Interval,
                    upstream: Mapping[str, FingerprintRecord | None]) -> str:
    """What a dependency's output for ``interval`` is now: its partition's latest recorded
    fingerprint (``upstream``), or (no destination) its own unit id."""
    task = pipeline.get_task(dep)
    if task.owns_output:
        record = upstream[dep]
        if record is None:
            return "fp:none"
        version = f"fp:{record.algorithm}:{record.row_count}:{record.checksum}"
        shape = _reshaped(ledger, record)
        return version if shape is None else f"{version}:shape:{shape}"
    return f"unit:{identify_unit(pipeline, ledger, dep, interval).uow_id}"


def _reshaped(ledger: Ledger, record: FingerprintRecord) -> str | None:
    """A digest of ``record``'s columns when they differ from the partition's first recorded
    version's (a column renamed or retyped, the change accepted): the checksum hashes values
    only, so without it a renamed column would leave dependents on the old shape. None while
    the columns are as first recorded (or either version predates recorded columns): such a
    partition keeps the version string earlier releases gave it."""
    if record.version <= 1:
        return None
    first = ledger.fingerprints(record.destination, record.partition)[0]
    shape: object
    original: object
    if record.schema is not None and first.schema is not None:
        shape, original = record.schema, first.schema
    else:
        shape, original = record.columns, first.columns
    if shape is None or original is None or shape == original:
        return None
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:12]
