"""OpenLineage run events for every attempt: a listener of the engine's typed events.

One OpenLineage *run* per twice *attempt*, sent through the official ``openlineage-python``
client configured the standard way (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, an
``openlineage.yml``, ``OPENLINEAGE__TRANSPORT__...``: console, file, http and every other
transport the client has). docs/guides/lineage.md describes it for users; in short:

==========================================  ====================================================
engine event                                OpenLineage event (same ``runId`` for one attempt)
==========================================  ====================================================
``AttemptStarted``                          START
``AttemptFinished`` succeeded               COMPLETE, output statistics (row count) and data
                                            quality assertions (acceptance) on the destination
``AttemptFinished`` failed-transient /      FAIL, error message (and the failed assertions when
failed-permanent                            acceptance refused the output)
``AttemptFinished`` unknown                 OTHER, error message: the outcome is not known yet,
                                            so the run stays open (the spec allows one terminal
                                            event per run)
``Reconciled`` succeeded                    COMPLETE, with the output the engine verified after
                                            reconciling (FAIL if acceptance then refused it)
``Reconciled`` failed                       FAIL (the job finished with an error)
``Reconciled`` not-found                    ABORT (the write never committed / the request never
                                            reached the service: nothing ran to completion)
``Reconciled`` running / unknown            nothing: still open
==========================================  ====================================================

Every event carries: nominal time = the unit's interval; external query = the attempt's
deterministic job id (source ``twice``); parent run = the twice run that drives the unit (one
per listener, job ``<pipeline>``, also the root) or, under Airflow, the Airflow task instance's
run (:class:`ParentRun`); inputs = the destinations of the task's upstream tasks, then the
datasets its ``metadata[INPUTS_METADATA]`` declares; output = the task's destination. Datasets
are named by the OpenLineage naming spec (:mod:`twice.engine.dataset_naming`, never a password);
a ``COMPLETE`` output carries its schema as the destination holds it after the write. The twice
run itself is emitted too (``START`` before its first attempt's event, ``COMPLETE``/``FAIL``
when :func:`lineage_run` ends), unless the parent is given (Airflow emits its own).
``runId`` is deterministic (:func:`attempt_run_id`): the same attempt always has the same run id,
so a later process that reconciles it closes the run the first one opened.

Emitting never changes an attempt: an error building or sending an event is logged (logger
``twice.lineage``) and counted in ``failures``, never raised. ``openlineage`` is imported only
when a listener is made, so the CLI starts as fast without it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twice.core.extras import require
from twice.core.secrets import redact
from twice.engine.dataset_naming import dataset_naming
from twice.engine.events import (
    AttemptFinished,
    AttemptStarted,
    Event,
    Listener,
    OutputRejected,
    OutputVerified,
    Reconciled,
    UnitSettled,
)
from twice.errors import InputError, MissingExtraError

if TYPE_CHECKING:
    from twice.core.interval import Interval
    from twice.define.acceptance import Assertion
    from twice.define.pipeline import Pipeline, Task

log = logging.getLogger("twice.lineage")

SWITCH = "TWICE_OPENLINEAGE"
"""``1``/``true``/``on``: emit even with no OpenLineage configuration (the client then prints
to the console); ``0``/``false``/``off``: never emit. Unset: emit when OpenLineage is
configured (:func:`openlineage_configured`)."""

PRODUCER = "urn:twice:openlineage:0.1.0"
LINEAGE = "OpenLineage events"
"""The ``producer`` of every event twice emits (a URI, as the spec requires)."""

EXTERNAL_QUERY_SOURCE = "twice"

INPUTS_METADATA = "lineage_inputs"
"""The key of ``Task.metadata`` listing datasets a task reads besides its upstream tasks'
destinations (destination-like specs: ``postgresql://db:5432/wh#public.t``, ``bq:p.d.t``,
``s3://bucket/key``, ...): declared inputs, named by :mod:`twice.engine.dataset_naming`. The
dbt driver fills it with a model's sources, seeds and models twice does not run."""
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ParentRun:
    """The run an attempt's run nests under: ``namespace``/``name`` of its job and its
    ``run_id``; ``root`` the run at the top of the hierarchy (an Airflow DAG run), if known."""

    namespace: str
    name: str
    run_id: str
    root: ParentRun | None = None


def openlineage_configured(environ: Mapping[str, str] | None = None,
                           cwd: Path | None = None, home: Path | None = None) -> bool:
    """Whether twice emits OpenLineage events (no import of ``openlineage`` here).

    ``TWICE_OPENLINEAGE`` decides when set (on/off; any other value is ``InputError``);
    ``OPENLINEAGE_DISABLED=true`` turns it
    off, as it does the client; otherwise it is on when OpenLineage is configured the way the
    client reads it: ``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, any ``OPENLINEAGE__TRANSPORT``
    variable, or an ``openlineage.yml`` in the working directory or ``~/.openlineage/``.
    """
    env = os.environ if environ is None else environ
    switch = env.get(SWITCH, "").strip().lower()
    if switch and switch not in _ON | _OFF:
        # ignoring it would emit events when OpenLineage is configured, whatever
        # "disabled" or "nope" was meant to say
        raise InputError(
            f"{SWITCH}: {env.get(SWITCH)!r} is not one of its values: "
            f"{', '.join(sorted(_ON))} emit OpenLineage events, {', '.join(sorted(_OFF))} "
            "never emit; unset it to emit when OpenLineage is configured")
    if switch in _OFF:
        return False
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if switch in _ON:
        return True
    if env.get("OPENLINEAGE_URL") or env.get("OPENLINEAGE_CONFIG"):
        return True
    if any(name.startswith("OPENLINEAGE__TRANSPORT") for name in env):
        return True
    where = [(cwd or Path.cwd()) / "openlineage.yml",
             (home or Path.home()) / ".openlineage" / "openlineage.yml"]
    return any(path.is_file() for path in where)


def lineage_listeners(pipeline: Pipeline, *, parent: ParentRun | None = None,
                      environ: Mapping[str, str] | None = None) -> list[Listener]:
    """The OpenLineage listener for ``pipeline`` when emitting is on, else no listener.

    On but ``openlineage-python`` missing, or its configuration unreadable: a warning is logged
    and the pipeline runs without lineage (observing never stops the work).
    """
    if not openlineage_configured(environ):
        return []
    try:
        return [OpenLineageListener(pipeline, parent=parent)]
    except MissingExtraError as exc:
        log.warning("OpenLineage is configured but openlineage-python is not installed (%s): no "
                    "lineage events are emitted", exc)
    except Exception as exc:
        log.warning("OpenLineage client could not be configured (%s: %s): no lineage events "
                    "are emitted", type(exc).__name__, redact(str(exc)))
    return []


@contextmanager
def lineage_run(listeners: Iterable[Listener]) -> Iterator[None]:
    """The block that is one twice run for the OpenLineage listeners among ``listeners``: their
    parent run's ``START`` on entry, ``COMPLETE``/``FAIL`` on exit (``FAIL`` when an exception
    leaves the block, or a unit did not succeed). Other listeners are left alone."""
    runs = [listener for listener in listeners if isinstance(listener, OpenLineageListener)]
    for run in runs:
        run.start_run()
    try:
        yield
    except BaseException as exc:
        for run in runs:
            run.finish_run(exc)
        raise
    for run in runs:
        run.finish_run()


def attempt_run_id(uow_id: str, attempt: int, interval: Interval) -> str:
    """The OpenLineage ``runId`` of attempt ``attempt`` of unit ``uow_id``: a UUIDv7 (the
    spec's recommendation) from the client's ``generate_static_uuid``, its time part the
    interval's start and its random part a hash of ``twice.<uow_id>.<attempt>``, so the same
    attempt has the same run id in every process (Airflow's task run ids are made alike)."""
    uuid = require("openlineage.client.uuid", extra="lineage", who=LINEAGE)

    instant = max(interval.start, _EPOCH)
    return str(uuid.generate_static_uuid(instant, f"twice.{uow_id}.{attempt}".encode()))


def dataset_name(destination: str) -> tuple[str, str]:
    """``(namespace, name)`` of a destination's dataset by the OpenLineage naming spec
    (:mod:`twice.engine.dataset_naming`), from its public identity (never a password)."""
    found = dataset_naming(destination)
    return found.namespace, found.name


@dataclass
class _Attempt:
    """What the listener knows of one attempt until its run's terminal event."""

    interval: Interval
    job_id: str | None
    verified: OutputVerified | None = None
    rejected: OutputRejected | None = None
    reconciled: bool = False  # Reconciled(succeeded) seen: the output check decides the end


class OpenLineageListener:
    """Maps the engine's events for ``pipeline`` to OpenLineage run events (module docstring).

    ``client``: an ``OpenLineageClient`` (default: one configured from the environment, the
    standard way). ``namespace``: of the jobs (default ``OPENLINEAGE_NAMESPACE``, else the
    pipeline's name); job names are ``<pipeline>.<task>``. ``parent``: the run every attempt
    nests under; by default this twice run (job ``<pipeline>``, one new run id per listener),
    whose own events the listener emits too: ``START`` before its first attempt's, and
    ``COMPLETE``/``FAIL`` at :meth:`finish_run` (or leaving ``with listener:``). A given
    ``parent`` (an Airflow task's run) is its scheduler's to emit.
    """

    def __init__(self, pipeline: Pipeline, *, client: Any = None, namespace: str | None = None,
                 parent: ParentRun | None = None) -> None:
        require("openlineage.client", extra="lineage", who=LINEAGE)
        from openlineage.client import OpenLineageClient
        from openlineage.client.uuid import generate_new_uuid

        self.pipeline = pipeline
        self.client = client if client is not None else OpenLineageClient()
        self.namespace = namespace or os.environ.get("OPENLINEAGE_NAMESPACE") or pipeline.name
        self.emits_parent = parent is None
        self.parent = parent or ParentRun(self.namespace, pipeline.name, str(generate_new_uuid()))
        self.failures = 0
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._run_state = "new"  # new -> started -> finished (the parent run's own events)
        self._unsettled: list[str] = []  # "<task> <interval> (<outcome>)" of units that failed

    def __call__(self, event: Event) -> None:
        try:
            with self._lock:
                self._start_parent()
                self._handle(event)
        except Exception as exc:  # observing never changes the outcome
            self.failures += 1
            log.warning("OpenLineage event for %s not emitted: %s: %s", event.task,
                        type(exc).__name__, redact(str(exc)))

    def __enter__(self) -> OpenLineageListener:
        self.start_run()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: object) -> None:
        self.finish_run(error)

    def start_run(self) -> None:
        """Emit the parent run's ``START`` (once; the first attempt's event does it anyway)."""
        self._guarded("START", self._start_parent)

    def finish_run(self, error: BaseException | None = None) -> None:
        """Emit the parent run's terminal event: ``FAIL`` when ``error`` ended the run or a
        unit it drove did not succeed, else ``COMPLETE``. Once; nothing if it never started."""
        self._guarded("COMPLETE/FAIL", lambda: self._finish_parent(error))

    def _guarded(self, what: str, step: Any) -> None:
        try:
            with self._lock:
                step()
        except Exception as exc:  # observing never changes the outcome
            self.failures += 1
            log.warning("OpenLineage %s of run %s not emitted: %s: %s", what,
                        self.pipeline.name, type(exc).__name__, redact(str(exc)))

    def _start_parent(self) -> None:
        if self._run_state != "new":
            return
        self._run_state = "started"
        if self.emits_parent:
            self._emit_parent("START")

    def _finish_parent(self, error: BaseException | None) -> None:
        if self._run_state != "started":
            return
        self._run_state = "finished"
        if not self.emits_parent:
            return
        if error is not None:
            self._emit_parent("FAIL", f"{type(error).__name__}: {error}")
        elif self._unsettled:
            shown = ", ".join(self._unsettled[:10])
            more = f" and {len(self._unsettled) - 10} more" if len(self._unsettled) > 10 else ""
            self._emit_parent("FAIL", f"{len(self._unsettled)} unit(s) did not succeed: "
                                      f"{shown}{more}")
        else:
            self._emit_parent("COMPLETE")

    # -- mapping --------------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        if isinstance(event, AttemptStarted):
            key = (event.uow_id, event.attempt)
            self._attempts[key] = _Attempt(event.interval, event.job_id)
            self._emit("START", event.uow_id, event.task, event.attempt, self._attempts[key])
        elif isinstance(event, OutputVerified | OutputRejected):
            state = self._state(event.uow_id, event.attempt, event.interval, None)
            if isinstance(event, OutputVerified):
                state.verified = event
            else:
                state.rejected = event
            if state.reconciled:  # the output check after a reconcile decides the run's end
                self._end_checked(event.uow_id, event.task, event.attempt, state, None)
        elif isinstance(event, AttemptFinished):
            state = self._state(event.uow_id, event.attempt, event.interval, None)
            if event.outcome == "succeeded":
                self._end("COMPLETE", event.uow_id, event.task, event.attempt, state)
            elif event.outcome == "unknown":
                self._emit("OTHER", event.uow_id, event.task, event.attempt, state,
                           error=(event.error or "outcome unknown")
                           + "; the outcome is unknown until twice reconciles it by job id")
            else:
                self._end_checked(event.uow_id, event.task, event.attempt, state,
                                  event.error or event.outcome)
        elif isinstance(event, Reconciled):
            state = self._state(event.uow_id, event.attempt, event.interval, event.job_id)
            why = f"reconciled ({event.basis})"
            if event.state == "succeeded":
                state.reconciled = True
            elif event.state == "failed":
                self._end("FAIL", event.uow_id, event.task, event.attempt, state,
                          error=f"{why}: the job finished with an error")
            elif event.state == "not-found":
                self._end("ABORT", event.uow_id, event.task, event.attempt, state,
                          error=f"{why}: nothing of this attempt landed; safe to retry")
        elif isinstance(event, UnitSettled):
            if event.outcome != "succeeded":
                self._unsettled.append(f"{event.task} {event.interval.label} ({event.outcome})")
            for key in [k for k in self._attempts if k[0] == event.uow_id]:
                state = self._attempts[key]
                if state.reconciled:  # no output check followed (e.g. superseded): it succeeded
                    self._end("COMPLETE", key[0], event.task, key[1], state)
                else:  # still open (unknown): a later run's Reconciled closes it
                    del self._attempts[key]

    def _state(self, uow_id: str, attempt: int, interval: Interval,
               job_id: str | None) -> _Attempt:
        state = self._attempts.get((uow_id, attempt))
        if state is None:  # started in another process (settled here) or before this listener
            state = self._attempts[(uow_id, attempt)] = _Attempt(interval, job_id)
        elif job_id and not state.job_id:
            state.job_id = job_id
        return state

    def _end_checked(self, uow_id: str, task: str, attempt: int, state: _Attempt,
                     error: str | None) -> None:
        if state.rejected is not None:
            self._end("FAIL", uow_id, task, attempt, state, error=error or state.rejected.reason)
        elif error is not None:
            self._end("FAIL", uow_id, task, attempt, state, error=error)
        else:
            self._end("COMPLETE", uow_id, task, attempt, state)

    def _end(self, kind: str, uow_id: str, task: str, attempt: int, state: _Attempt,
             error: str | None = None) -> None:
        self._attempts.pop((uow_id, attempt), None)
        self._emit(kind, uow_id, task, attempt, state, error=error)

    # -- building ---------------------------------------------------------------------------------

    def _emit_parent(self, kind: str, error: str | None = None) -> None:
        from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
        from openlineage.client.facet_v2 import error_message_run, job_type_job

        run_facets: dict[str, Any] = {}
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=redact(error), programmingLanguage="python",
            )
        self.client.emit(RunEvent(
            eventType=RunState[kind],
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=self.parent.run_id, facets=run_facets),
            job=Job(namespace=self.parent.namespace, name=self.parent.name, facets={
                "jobType": job_type_job.JobTypeJobFacet(
                    processingType="BATCH", integration="TWICE", jobType="PIPELINE"),
            }),
            producer=PRODUCER,
        ))

    def _emit(self, kind: str, uow_id: str, task_name: str, attempt: int, state: _Attempt,
              error: str | None = None) -> None:
        from openlineage.client.event_v2 import Job, OutputDataset, Run, RunEvent, RunState
        from openlineage.client.facet_v2 import (
            error_message_run,
            external_query_run,
            job_type_job,
            nominal_time_run,
            parent_run,
        )

        interval = state.interval
        run_facets: dict[str, Any] = {
            "nominalTime": nominal_time_run.NominalTimeRunFacet(
                nominalStartTime=interval.start.isoformat(),
                nominalEndTime=interval.end.isoformat(),
            ),
            "parent": self._parent_facet(parent_run),
        }
        if state.job_id:
            run_facets["externalQuery"] = external_query_run.ExternalQueryRunFacet(
                externalQueryId=state.job_id, source=EXTERNAL_QUERY_SOURCE,
            )
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=redact(error), programmingLanguage="python",
            )
        job = Job(namespace=self.namespace, name=f"{self.pipeline.name}.{task_name}", facets={
            "jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="TWICE",
                                                    jobType="TASK"),
        })
        task = self.pipeline.get_task(task_name) if task_name in self.pipeline else None
        outputs = []
        if task is not None and task.destination:
            named = dataset_naming(task.destination)
            facets, output_facets = self._output_facets(kind, state)
            if kind == "COMPLETE":
                facets.update(_schema_facet(task.destination))
            outputs.append(OutputDataset(namespace=named.namespace, name=named.name,
                                         facets=facets, outputFacets=output_facets))
        self.client.emit(RunEvent(
            eventType=RunState[kind],
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=attempt_run_id(uow_id, attempt, interval), facets=run_facets),
            job=job,
            inputs=self._inputs(task) if task is not None else [],
            outputs=outputs,
            producer=PRODUCER,
        ))

    def _inputs(self, task: Task) -> list[Any]:
        """What the task reads: its upstream tasks' destinations, then the datasets its
        ``metadata[INPUTS_METADATA]`` declares; each dataset once, in that order."""
        from openlineage.client.event_v2 import InputDataset

        specs = [self.pipeline.get_task(dep).destination for dep in task.depends_on
                 if dep in self.pipeline]
        declared = task.metadata.get(INPUTS_METADATA) or ()
        specs += [declared] if isinstance(declared, str) else list(declared)
        named = dict.fromkeys(dataset_naming(spec) for spec in specs if spec)
        return [InputDataset(namespace=n.namespace, name=n.name) for n in named]

    def _parent_facet(self, parent_run: Any) -> Any:
        parent = self.parent
        top = parent.root or parent  # this twice run is its own root when nothing is above it
        return parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent.run_id),
            job=parent_run.Job(namespace=parent.namespace, name=parent.name),
            root=parent_run.Root(
                run=parent_run.RootRun(runId=top.run_id),
                job=parent_run.RootJob(namespace=top.namespace, name=top.name),
            ),
        )

    def _output_facets(self, kind: str, state: _Attempt) -> tuple[dict[str, Any], dict[str, Any]]:
        """Dataset facets (data quality assertions: the acceptance criteria checked) and output
        facets (statistics: the rows of the slice, from the recorded fingerprint)."""
        from openlineage.client.facet_v2 import (
            data_quality_assertions_dataset,
            output_statistics_output_dataset,
        )

        facets: dict[str, Any] = {}
        output_facets: dict[str, Any] = {}
        if kind not in ("COMPLETE", "FAIL"):
            return facets, output_facets
        checked: tuple[Assertion, ...] = ()
        if kind == "COMPLETE" and state.verified is not None:
            checked = state.verified.assertions
            rows = getattr(state.verified.diff, "rows_after", None)
            if isinstance(rows, int):
                output_facets["outputStatistics"] = (
                    output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                        rowCount=rows)
                )
        elif kind == "FAIL" and state.rejected is not None:
            checked = state.rejected.assertions
        if checked:
            facets["dataQualityAssertions"] = (
                data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(assertions=[
                    data_quality_assertions_dataset.Assertion(
                        assertion=check.kind, success=check.passed, column=check.column,
                        name=check.rule, severity="error",
                        expected=f"{'>=' if check.at_least else '<='} {check.limit}",
                        actual=None if check.observed is None else str(check.observed),
                    )
                    for check in checked
                ])
            )
        return facets, output_facets


def _schema_facet(destination: str) -> dict[str, Any]:
    """``{"schema": SchemaDatasetFacet}`` of the destination's columns as it stands after the
    write, each with twice's column kind as its type (``integer``, ``decimal(12,2)``, ...);
    empty when the table cannot be read (the event goes out without it)."""
    from openlineage.client.facet_v2 import schema_dataset

    from twice.destinations import open_destination

    try:
        with open_destination(destination) as dest:
            columns = dest.schema()
    except Exception as exc:
        log.info("schema of %s not read for OpenLineage: %s: %s", redact(destination),
                 type(exc).__name__, redact(str(exc)))
        return {}
    if not columns:
        return {}
    return {"schema": schema_dataset.SchemaDatasetFacet(fields=[
        schema_dataset.SchemaDatasetFacetFields(
            name=name, type=ctype.engine_type if ctype.kind == "unsupported" else str(ctype))
        for name, ctype in columns.items()
    ])}
