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
per listener, job ``<pipeline>``) or, under Airflow, the Airflow task instance's run
(:class:`ParentRun`); the destination's public identity (never a password) as output dataset.
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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twice.core.extras import require
from twice.core.secrets import public_spec, redact
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
    from twice.define.pipeline import Pipeline

log = logging.getLogger("twice.lineage")

SWITCH = "TWICE_OPENLINEAGE"
"""``1``/``true``/``on``: emit even with no OpenLineage configuration (the client then prints
to the console); ``0``/``false``/``off``: never emit. Unset: emit when OpenLineage is
configured (:func:`openlineage_configured`)."""

PRODUCER = "urn:twice:openlineage:0.1.0"
LINEAGE = "OpenLineage events"
"""The ``producer`` of every event twice emits (a URI, as the spec requires)."""

EXTERNAL_QUERY_SOURCE = "twice"
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


def attempt_run_id(uow_id: str, attempt: int, interval: Interval) -> str:
    """The OpenLineage ``runId`` of attempt ``attempt`` of unit ``uow_id``: a UUIDv7 (the
    spec's recommendation) from the client's ``generate_static_uuid``, its time part the
    interval's start and its random part a hash of ``twice.<uow_id>.<attempt>``, so the same
    attempt has the same run id in every process (Airflow's task run ids are made alike)."""
    uuid = require("openlineage.client.uuid", extra="lineage", who=LINEAGE)

    instant = max(interval.start, _EPOCH)
    return str(uuid.generate_static_uuid(instant, f"twice.{uow_id}.{attempt}".encode()))


def dataset_name(destination: str) -> tuple[str, str]:
    """``(namespace, name)`` of a destination's dataset, from its public identity (never a
    password): the spec up to the table is the namespace (without query parameters), the
    table (after ``#``) the name; a spec without a table is ``(scheme, rest)``."""
    spec = public_spec(destination)
    base, _, table = spec.partition("#")
    base = base.partition("?")[0]
    if table:
        return base, table
    scheme, _, rest = base.partition(":")
    return scheme, rest.lstrip("/") or spec


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
    nests under (default: this twice run, job ``<pipeline>``, one new run id per listener).
    """

    def __init__(self, pipeline: Pipeline, *, client: Any = None, namespace: str | None = None,
                 parent: ParentRun | None = None) -> None:
        require("openlineage.client", extra="lineage", who=LINEAGE)
        from openlineage.client import OpenLineageClient
        from openlineage.client.uuid import generate_new_uuid

        self.pipeline = pipeline
        self.client = client if client is not None else OpenLineageClient()
        self.namespace = namespace or os.environ.get("OPENLINEAGE_NAMESPACE") or pipeline.name
        self.parent = parent or ParentRun(self.namespace, pipeline.name, str(generate_new_uuid()))
        self.failures = 0
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, int], _Attempt] = {}

    def __call__(self, event: Event) -> None:
        try:
            with self._lock:
                self._handle(event)
        except Exception as exc:  # observing never changes the outcome
            self.failures += 1
            log.warning("OpenLineage event for %s not emitted: %s: %s", event.task,
                        type(exc).__name__, redact(str(exc)))

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
            namespace, name = dataset_name(task.destination)
            facets, output_facets = self._output_facets(kind, state)
            outputs.append(OutputDataset(namespace=namespace, name=name, facets=facets,
                                         outputFacets=output_facets))
        self.client.emit(RunEvent(
            eventType=RunState[kind],
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=attempt_run_id(uow_id, attempt, interval), facets=run_facets),
            job=job,
            outputs=outputs,
            producer=PRODUCER,
        ))

    def _parent_facet(self, parent_run: Any) -> Any:
        parent = self.parent
        root = None
        if parent.root is not None:
            root = parent_run.Root(
                run=parent_run.RootRun(runId=parent.root.run_id),
                job=parent_run.RootJob(namespace=parent.root.namespace, name=parent.root.name),
            )
        return parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent.run_id),
            job=parent_run.Job(namespace=parent.namespace, name=parent.name),
            root=root,
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
