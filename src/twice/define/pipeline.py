"""Pipeline definitions: tasks, their dependencies, pools, timeouts and deadlines.

A ``Pipeline`` is a declaration that the executor, the planner and the CLI read; it never runs
anything and does no I/O. Definition mistakes are caught as early as they can be: a field that is
wrong on its own fails at the ``@pipeline.task`` line, and cross-task problems (unknown dependency,
cycle, pool capacity, timeouts) are all listed at once by ``pipeline.validate()``, which
``twice.define.load.load_pipeline`` calls for you.

    pipeline = Pipeline("funds_positions", schedule=Schedule.daily("Europe/Lisbon"),
                        workflow_timeout=timedelta(minutes=30), deadline=time(6, 0))
    pipeline.pool("positions_db", slots=2)

    @pipeline.task(retry=RetryPolicy(max_attempts=4, transient=(ConnectionError,)), timeout=60,
                   pool="positions_db", destination="duckdb:///wh.duckdb#positions")
    def load(ctx: TaskContext) -> None:
        ...  # select input by ctx.interval, never by the clock

Tasks choose their data from ``ctx.interval`` only. ``TaskContext`` deliberately offers no "now":
a rerun next month must read and write exactly what the first run did.
"""

from __future__ import annotations

import difflib
import heapq
import inspect
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, time, timedelta
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar, overload

from twice.core.interval import Interval
from twice.core.outcomes import RemoteState
from twice.core.policy import RetryPolicy
from twice.core.unit import UnitOfWork
from twice.define.schedule import Schedule
from twice.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from twice.define.intermediate import Intermediate

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_SAMPLE = Interval(
    datetime.fromisoformat("2000-01-01T00:00+00:00"),
    datetime.fromisoformat("2000-01-02T00:00+00:00"),
)

TaskFunction = Callable[["TaskContext"], Any]
# How twice lands a returned output in the task's destination (see Task).
WriteMode = Literal["replace", "upsert", "append"]
WRITE_MODES: tuple[str, ...] = ("replace", "upsert", "append")
#: ``safe_repeat="same-job-id"``: the receiver deduplicates by ``ctx.job_id`` (an API with an
#: Idempotency-Key, BigQuery with a client-chosen job id), so sending again under the SAME job
#: id is safe, and an unknown outcome is settled that way (twice.engine.settle).
SAME_JOB_ID: Final = "same-job-id"
SafeRepeat = bool | Literal["same-job-id"]
F = TypeVar("F", bound=Callable[..., Any])
# Seconds as a number, or a timedelta.
Duration = float | int | timedelta
# str.format template over start/end/interval, or a function of the interval.
PartitionSpec = str | Callable[[Interval], str]
# Deadline: a delay after the interval end, a local time of day at/after it, or a function.
DeadlineSpec = timedelta | time | Callable[[Interval], datetime]


class PipelineError(InputError):
    """A pipeline definition is invalid. ``problems`` lists every problem found, each naming
    the pipeline or task and the field."""

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(
                "\n".join(
                    ["pipeline definition has problems:", *(f"  - {p}" for p in self.problems)]
                )
            )


Reconciler = Callable[[str, "TaskContext"], RemoteState | str]
#: ``cancel(job_id, ctx)``: asks the remote service to cancel ``job_id`` (``twice cancel``);
#: returns at once, whatever it returns (a ``JobStatus``, text) is recorded as the answer.
Canceller = Callable[[str, "TaskContext"], Any]


@dataclass(frozen=True)
class NonFatal:
    """A problem a task tolerated (e.g. rows skipped) but that the run report must show."""

    message: str
    count: int = 1


Recorder = Callable[[NonFatal], None]


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise PipelineError(
            f"{what}: {value!r} is not a valid name; use 1-64 letters, digits, '_' or '-' "
            "(names become part of job ids)"
        )
    return value


def _seconds(value: object, what: str, *, positive: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise PipelineError(f"{what}: expected seconds or a timedelta, got {value!r}")
    if not math.isfinite(seconds):
        raise PipelineError(f"{what}: must be finite, got {value!r}")
    if positive and seconds <= 0:
        raise PipelineError(f"{what}: must be > 0 seconds, got {value!r}")
    if seconds < 0:
        raise PipelineError(f"{what}: must be >= 0 seconds, got {value!r}")
    return seconds


def _fmt(seconds: float) -> str:
    return f"{seconds:g} s"


#: A timeout this many times an attempt's expected duration (its ``estimated_duration``, or
#: the median of its measured attempts: ``twice.engine.timeout_advice``) delays the detection
#: of a hung attempt; a warning, when it is also ``TIMEOUT_MIN_EXCESS_SECONDS`` above it.
TIMEOUT_FACTOR = 10
TIMEOUT_MIN_EXCESS_SECONDS = 300.0  # nor is a few minutes' margin worth a warning
SUGGESTED_TIMEOUT_FACTOR = 3  # the timeout a warning suggests, times the expected duration


def timeout_far_above(timeout: float, expected: float) -> bool:
    """Whether ``timeout`` is far enough above an attempt's ``expected`` duration to delay
    the detection of a hung attempt (:data:`TIMEOUT_FACTOR`)."""
    return expected > 0 and timeout > TIMEOUT_FACTOR * expected and (
        timeout - expected > TIMEOUT_MIN_EXCESS_SECONDS
    )


def _default_retry() -> RetryPolicy:
    return RetryPolicy(max_attempts=1)


@dataclass(frozen=True, eq=False)
class Task:
    """One step of a pipeline. Build it with ``@pipeline.task`` (or ``Task.create``).

    - ``retry``: defaults to one attempt; nothing is retried unless its exception class is listed
      in ``RetryPolicy.transient``. ``timeout`` (per attempt) lives in ``retry.attempt_timeout``.
    - ``pool``/``slots``: the task occupies ``slots`` of the named pool for each attempt.
    - ``transform_version``: bump it when the code changes what it writes; it is part of the unit
      of work, so a backfill after a fix is a new unit, not an "equivalent" rerun.
    - ``input_partition``/``input_version``: what is read for an interval and a fingerprint of
      it; both are part of the unit of work (a changed source means a new unit).
    - ``estimated_duration``/``validation_duration``: seconds, for the deadline-aware planner.
    - ``reconcile(job_id, ctx)``: asks the remote service what happened to ``job_id`` after a
      timeout or lost acknowledgement; returns a ``RemoteState``.
    - ``cancel(job_id, ctx)``: asks the remote service to cancel ``job_id``, for ``twice
      cancel``; a request, not an outcome (``twice.engine.cancel``).
    - ``acceptance``: ``twice.AcceptanceCriteria`` the executor checks, against what the attempt
      returned and what ``destination`` holds, before it records the attempt succeeded; a
      failed check makes it ``failed-permanent`` (needs ``destination``).
    - ``maximum_bytes_billed``/``cost_estimate``: the cost guard (``twice.engine.cost``):
      before each attempt the executor calls ``cost_estimate(interval)`` (a
      ``twice.remote.Estimate``) and refuses the attempt when it is over the limit; the limit is
      never raised on retry. Pass the same limit to the remote service (BigQuery
      ``maximumBytesBilled``) in the task.
    - ``write``: ``"replace"`` (the interval's slice), ``"upsert"`` (by the destination's
      ``key_columns``) or ``"append"`` (exactly once per unit and generation): the task RETURNS
      its output (PyArrow table or batches, pandas/polars DataFrame, DuckDB relation) and twice
      writes it, with a commit record (``twice.destinations.commits``). Writes a task makes
      itself through ``open_destination(ctx.destination)`` during an attempt are owned the same
      way; either kind is reconciled from the destination after an unknown outcome.
    - ``snapshot``: ``snapshot(interval)`` reads the interval's input from a source that
      overwrites history; twice stores it once per unit (Parquet, with its fingerprint) before
      the first attempt, every attempt and rerun reads it as ``ctx.snapshot.read()``, and the
      source is read again only when asked (``twice.engine.snapshots``).
    - ``timeout_is_failure``: a timeout raised INSIDE the task (``TimeoutError``,
      ``socket.timeout``, a client library's ``...Timeout``) is normally an unknown outcome (the
      request may have reached the service: reconcile first); True declares that such a timeout
      leaves nothing behind, so it is an ordinary failure classified by ``retry.transient``.
    - ``safe_repeat``: the author's *assertion* that running the task again for the same interval
      has no extra effect beyond what twice's own replace/upsert destination write undoes (no
      emails sent twice, no remote jobs submitted without a client-chosen id). Reports show it as
      "assumed by the caller", never as proven. Default False. ``"same-job-id"`` asserts
      more: the task's receiver deduplicates by ``ctx.job_id``, so an unknown outcome is
      also settled by sending again under the same job id, with no operator (``True`` leaves
      it to reconcile or an operator); a deliberate rerun takes a new generation, a new id.
    - ``intermediate``: ``twice.Intermediate(owner=..., retention=...)`` declares the returned
      output a materialized intermediate stored in ``destination`` (a partitioned sqlite,
      duckdb, postgresql or parquet table; ``write="replace"`` is implied): when the unit runs
      again, the stored slice is reused without running the task while its version and
      integrity fingerprint match, and recomputed otherwise (``twice.engine.intermediates``).
    """

    name: str
    fn: TaskFunction
    depends_on: tuple[str, ...] = ()
    retry: RetryPolicy = field(default_factory=_default_retry)
    pool: str | None = None
    slots: int = 1
    transform_version: str = "1"
    destination: str = ""
    input_partition: PartitionSpec | None = None
    input_version: Callable[[Interval], str] | None = None
    estimated_duration: float | None = None
    validation_duration: float = 0.0
    reconcile: Reconciler | None = None
    cancel: Canceller | None = None
    acceptance: Any = None
    safe_repeat: SafeRepeat = False
    timeout_is_failure: bool = False
    write: WriteMode | None = None
    maximum_bytes_billed: int | None = None
    cost_estimate: Callable[[Interval], Any] | None = None
    snapshot: Callable[[Interval], Any] | None = None
    intermediate: Intermediate | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        name = _check_name(self.name, "task name")
        where = f"task {name!r}"
        if not callable(self.fn):
            raise PipelineError(f"{where}: fn must be callable, got {self.fn!r}")
        _check_takes_context(self.fn, where)
        if isinstance(self.depends_on, str) or not all(isinstance(d, str) for d in self.depends_on):
            raise PipelineError(f"{where}: depends_on must be a tuple of task names")
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        if len(set(self.depends_on)) != len(self.depends_on):
            raise PipelineError(f"{where}: depends_on lists a task twice: {self.depends_on}")
        if not isinstance(self.retry, RetryPolicy):
            raise PipelineError(f"{where}: retry must be a twice.core.policy.RetryPolicy")
        if self.pool is not None:
            _check_name(self.pool, f"{where}: pool")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise PipelineError(f"{where}: slots must be an integer >= 1, got {self.slots!r}")
        if self.pool is None and self.slots != 1:
            raise PipelineError(f"{where}: slots={self.slots} needs a pool (slots are pool shares)")
        if not isinstance(self.transform_version, str) or not self.transform_version:
            raise PipelineError(f"{where}: transform_version must be a non-empty string")
        if not isinstance(self.destination, str):
            raise PipelineError(f"{where}: destination must be a string")
        # Issue 19: the task carries its destination's public identity (no password), which is
        # what units, fingerprints, commit records and reports hold; the spec as written is
        # registered so that only opening the destination uses the password.
        # A relative file path is made absolute here, against the working directory where the
        # pipeline is defined, which is where it would be opened (core.schemes.absolute).
        from twice.core.schemes import absolute
        from twice.core.secrets import remember

        object.__setattr__(self, "destination", remember(absolute(self.destination)))
        _check_partition(self.input_partition, where)
        for attr in ("input_version", "reconcile", "cancel"):
            value = getattr(self, attr)
            if value is not None and not callable(value):
                raise PipelineError(f"{where}: {attr} must be callable or None")
        est = _seconds(self.estimated_duration, f"{where}: estimated_duration", positive=False)
        val = _seconds(self.validation_duration, f"{where}: validation_duration", positive=False)
        object.__setattr__(self, "estimated_duration", est)
        object.__setattr__(self, "validation_duration", val)
        if not isinstance(self.safe_repeat, bool) and self.safe_repeat != SAME_JOB_ID:
            raise PipelineError(
                f"{where}: safe_repeat must be True, False or {SAME_JOB_ID!r}, got "
                f"{self.safe_repeat!r}"
            )
        if not isinstance(self.timeout_is_failure, bool):
            raise PipelineError(f"{where}: timeout_is_failure must be True or False")
        if self.intermediate is not None:
            _check_intermediate(self, where)
            object.__setattr__(self, "write", "replace")
        if self.write is not None:
            if self.write not in WRITE_MODES:
                raise PipelineError(
                    f"{where}: write must be one of {', '.join(WRITE_MODES)} or None, "
                    f"got {self.write!r}"
                )
            if not self.owns_output:
                raise PipelineError(
                    f"{where}: write={self.write!r} lands the returned output in the task's "
                    "destination; set destination= to a sqlite, duckdb, postgresql, parquet, "
                    f"spark, iceberg or delta destination (got {self.destination!r})"
                )
            if self.write == "upsert":
                _check_upsert(self.destination, where)
        limit = self.maximum_bytes_billed
        bad_limit = isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        if limit is not None and bad_limit:
            raise PipelineError(
                f"{where}: maximum_bytes_billed must be a positive integer (bytes), got {limit!r}"
            )
        if self.acceptance is not None:
            from twice.define.acceptance import AcceptanceCriteria

            if not isinstance(self.acceptance, AcceptanceCriteria):
                raise PipelineError(
                    f"{where}: acceptance must be a twice.AcceptanceCriteria or None, "
                    f"got {self.acceptance!r}"
                )
            if not self.destination:
                raise PipelineError(
                    f"{where}: acceptance criteria are checked against what the task's "
                    "destination holds; set destination=..."
                )
        if self.cost_estimate is not None and not callable(self.cost_estimate):
            raise PipelineError(f"{where}: cost_estimate must be callable(interval) or None")
        if self.snapshot is not None and not callable(self.snapshot):
            raise PipelineError(f"{where}: snapshot must be callable(interval) or None")
        if not isinstance(self.metadata, Mapping):
            raise PipelineError(f"{where}: metadata must be a mapping")
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        if not isinstance(self.description, str):
            raise PipelineError(f"{where}: description must be a string")

    @classmethod
    def create(
        cls,
        fn: TaskFunction,
        *,
        name: str | None = None,
        depends_on: Iterable[str] | str = (),
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        **options: Any,
    ) -> Task:
        """Build a task, accepting the friendly forms the decorator accepts.

        ``timeout`` (seconds or timedelta) overrides/fills ``retry.attempt_timeout`` so that one
        number drives the executor and the planner. ``depends_on`` may be one name.
        """
        task_name = name if name is not None else getattr(fn, "__name__", None)
        where = f"task {task_name!r}"
        unknown = sorted(set(options) - _OPTIONAL_FIELDS)
        if unknown:
            close = difflib.get_close_matches(unknown[0], [*_OPTIONAL_FIELDS, "timeout"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PipelineError(f"{where}: unknown option {unknown[0]!r}{hint}")
        policy = _default_retry() if retry is None else retry
        if not isinstance(policy, RetryPolicy):
            raise PipelineError(f"{where}: retry must be a twice.RetryPolicy, got {retry!r}")
        seconds = _seconds(timeout, f"{where}: timeout", positive=True)
        if seconds is not None:
            policy = replace(policy, attempt_timeout=seconds)
        deps = (depends_on,) if isinstance(depends_on, str) else tuple(depends_on)
        for key in ("estimated_duration", "validation_duration"):
            if key in options:
                options[key] = _seconds(options[key], f"{where}: {key}", positive=False)
        if options.get("validation_duration") is None:
            options.pop("validation_duration", None)
        if options.get("metadata") is None:
            options.pop("metadata", None)
        if not options.get("description"):
            doc = inspect.getdoc(fn) or ""
            options["description"] = doc.strip().splitlines()[0] if doc.strip() else ""
        return cls(name=_check_name(task_name, "task name"), fn=fn, depends_on=deps, retry=policy,
                   **options)

    @property
    def timeout(self) -> float | None:
        """Per-attempt timeout in seconds (``retry.attempt_timeout``), None if unbounded."""
        return self.retry.attempt_timeout

    @cached_property
    def owns_output(self) -> bool:
        """Whether twice can see this task's effect: it writes its destination through twice
        (returned output with ``write=``, or ``open_destination`` during the attempt), so an
        unknown outcome is settled from the destination's commit record. (Known once a task:
        its destination is frozen, and planning asks for every unit.)"""
        from twice.core.schemes import is_owned

        return is_owned(self.destination)

    @property
    def effects_unseen(self) -> bool:
        """twice cannot see this task's effects: no owned destination to read a commit record
        from, no ``reconcile=`` to ask, no receiver that deduplicates by job id. Such a task's
        unknown outcome waits for an operator, and a failed attempt of it is not repeated by a
        later run unless named."""
        return not (self.owns_output or self.reconcile is not None or self.repeats_under_job_id)

    @property
    def repeats_under_job_id(self) -> bool:
        """``safe_repeat="same-job-id"``: sending again under the same job id is safe."""
        return self.safe_repeat == SAME_JOB_ID

    @property
    def repeat_is_safe(self) -> bool:
        """Running the task again is asserted safe (``safe_repeat`` True or "same-job-id"):
        what the planner's ``safeRepeat`` means, and why a deliberate rerun is not held."""
        return self.safe_repeat is not False

    def partition_for(self, interval: Interval) -> str:
        """The input partition read for ``interval`` ("" if the task declares none)."""
        spec = self.input_partition
        if spec is None:
            return ""
        value = (
            spec.format(start=interval.start, end=interval.end, interval=interval)
            if isinstance(spec, str)
            else spec(interval)
        )
        if not isinstance(value, str):
            raise PipelineError(
                f"task {self.name!r}: input_partition returned {type(value).__name__}, not str"
            )
        return value

    def version_for(self, interval: Interval) -> str:
        """The input version (fingerprint) for ``interval`` ("" if the task declares none)."""
        if self.input_version is None:
            return ""
        value = self.input_version(interval)
        if not isinstance(value, str):
            raise PipelineError(
                f"task {self.name!r}: input_version returned {type(value).__name__}, not str"
            )
        return value

    def remote_state(self, job_id: str, ctx: TaskContext) -> RemoteState:
        """Ask the task's reconciler about ``job_id``; UNKNOWN if it has none (no evidence)."""
        if self.reconcile is None:
            return RemoteState.UNKNOWN
        result = self.reconcile(job_id, ctx)
        try:
            return RemoteState.parse(result)
        except ValueError as exc:
            raise PipelineError(
                f"task {self.name!r}: reconcile returned {result!r}; {exc}"
            ) from None


_OPTIONAL_FIELDS = frozenset(
    f.name for f in fields(Task) if f.name not in {"name", "fn", "depends_on", "retry"}
)


def _check_takes_context(fn: Callable[..., Any], where: str) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables: nothing to check
    try:
        signature.bind(None)
    except TypeError:
        raise PipelineError(
            f"{where}: the function must accept one argument, the TaskContext "
            f"(signature is {signature})"
        ) from None


def _check_intermediate(task: Task, where: str) -> None:
    """``intermediate=`` stores the returned output as the interval's slice of the task's
    destination, so it needs a twice.Intermediate, a destination whose slice the
    materialize-or-reuse logic can replace and fingerprint, and ``write`` unset or
    ``"replace"``: refused when the task is defined, naming the option."""
    from twice.core.schemes import query_option, scheme_of
    from twice.define.intermediate import INTERMEDIATE_SCHEMES, Intermediate

    declared = task.intermediate
    if not isinstance(declared, Intermediate):
        raise PipelineError(
            f"{where}: intermediate must be a twice.Intermediate(owner=..., retention=...) or "
            f"None, got {declared!r}"
        )
    if scheme_of(task.destination) not in INTERMEDIATE_SCHEMES:
        raise PipelineError(
            f"{where}: intermediate= stores the task's returned output in its destination; "
            f"set destination= to a {', '.join(INTERMEDIATE_SCHEMES)} table with "
            f"?partition_column=NAME (got {task.destination!r})"
        )
    if not query_option(task.destination, "partition_column"):
        raise PipelineError(
            f"{where}: intermediate= keeps one stored slice per interval; the destination "
            f"{task.destination!r} needs ?partition_column=NAME"
        )
    if task.write not in (None, "replace"):
        raise PipelineError(
            f"{where}: intermediate= replaces the interval's slice with the returned output "
            f"(write='replace'); write={task.write!r} cannot be combined with it"
        )


def _check_upsert(destination: str, where: str) -> None:
    """``write="upsert"`` needs a destination with row-level updates and its key, which holds
    the partition column when there is one: refused when the task is defined, not at its
    first attempt."""
    from twice.core.schemes import NO_UPSERT, query_option, scheme_of

    scheme = scheme_of(destination)
    if scheme in NO_UPSERT:
        raise PipelineError(f"{where}: write='upsert': {NO_UPSERT[scheme]} (got {destination!r})")
    keys = query_option(destination, "key_columns")
    if not keys:
        raise PipelineError(
            f"{where}: write='upsert' needs the key to upsert by: add key_columns to the "
            f"destination's query (e.g. ?key_columns=id), got {destination!r}"
        )
    partition = query_option(destination, "partition_column")
    if partition and partition not in [key.strip() for key in keys.split(",")]:
        raise PipelineError(
            f"{where}: write='upsert' into a destination partitioned by {partition!r} needs "
            f"{partition!r} among its key_columns (got key_columns={keys}): each interval owns "
            f"its slice of {partition!r}, and an upsert by key_columns={keys} alone would move "
            "a row with the same key out of another interval's slice, which twice has "
            f"verified. Use key_columns={keys},{partition}"
        )


def _check_partition(spec: object, where: str) -> None:
    if spec is None or callable(spec):
        return
    if not isinstance(spec, str):
        raise PipelineError(f"{where}: input_partition must be a str template or a callable")
    try:
        spec.format(start=_SAMPLE.start, end=_SAMPLE.end, interval=_SAMPLE)
    except (KeyError, IndexError, AttributeError, ValueError) as exc:
        raise PipelineError(
            f"{where}: input_partition template {spec!r} is invalid ({type(exc).__name__}: {exc}); "
            "it may use {start}, {end} and {interval}, e.g. 'positions/{start:%Y-%m-%d}'"
        ) from None


class UpstreamReader(Protocol):
    """Reads an upstream's slice for a task, pinned (``twice.engine.inputs.Expected``)."""

    def read(self, upstream: str, destination: str, interval: Interval) -> pa.Table: ...


@dataclass(frozen=True, eq=False)
class TaskContext:
    """Everything a task may know about the run it is part of, handed to it by the executor.

    There is intentionally no clock here: select inputs by ``interval`` only, so that a rerun or
    backfill of the same interval reads and writes the same data. ``upstream`` holds the results
    of this interval's dependencies that ran in this run (a subset rerun may omit some): prefer
    reading upstream output from its destination by interval.
    """

    unit: UnitOfWork
    attempt: int = 1
    generation: int = 1
    upstream: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    recorder: Recorder | None = None
    # The attempt's twice.destinations.commits.WriteStamp (set by the executor): writes made
    # during the attempt commit it with their rows.
    stamp: Any = field(default=None, compare=False)
    # The unit's input snapshot (twice.engine.snapshots.SnapshotView) when the task declares
    # ``snapshot=``: read it with ``ctx.snapshot.read()``.
    snapshot: Any = field(default=None, compare=False)
    # The task's upstreams -> each one's destination spec (None: it has none), for
    # ``read_upstream``; set by ``Pipeline.context``.
    sources: Mapping[str, str | None] = field(default_factory=dict, compare=False)
    # What the attempt expects its upstreams to hold (twice.engine.inputs.Expected, set by the
    # executor): the attempt body pins it before the task runs; ``read_upstream`` reads through it.
    inputs: UpstreamReader | None = field(default=None, compare=False)
    _collected: list[NonFatal] = field(default_factory=list, init=False, repr=False)
    _seen: list[NonFatal] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.unit, UnitOfWork):
            raise TypeError("unit must be a twice.core.unit.UnitOfWork")
        for attr in ("attempt", "generation"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{attr} must be an integer >= 1 (attempts count from 1)")
        object.__setattr__(self, "upstream", MappingProxyType(dict(self.upstream)))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __reduce__(self) -> tuple[Any, ...]:
        # Read-only mappings do not pickle; rebuild them so a context can cross to a child
        # process (twice.engine.timeouts.run_in_process spawns). Recorded non-fatals travel with
        # it, and so does the write stamp: the child's writes are owned (commit records,
        # fencing, acceptance before landing) as a thread's are.
        args = (self.unit, self.attempt, self.generation, dict(self.upstream), dict(self.params))
        return (_rebuild_context, (*args, self.recorder, list(self._collected), self.snapshot,
                                   self.stamp, dict(self.sources), self.inputs))

    @property
    def interval(self) -> Interval:
        return self.unit.interval

    @property
    def pipeline_name(self) -> str:
        return self.unit.pipeline

    @property
    def task_name(self) -> str:
        return self.unit.task

    @property
    def destination(self) -> str:
        return self.unit.destination

    @property
    def input_partition(self) -> str:
        return self.unit.input_partition

    @property
    def job_id(self) -> str:
        """Deterministic remote job id for this unit and generation: resubmitting it after a lost
        response finds the existing job instead of starting a second one."""
        return self.unit.job_id(self.generation)

    @property
    def nonfatals(self) -> tuple[NonFatal, ...]:
        """Non-fatal problems recorded so far (only when no ``recorder`` was injected)."""
        return tuple(self._collected)

    @property
    def nonfatal_count(self) -> int:
        """Non-fatal errors recorded so far through this context, whoever they went to: an
        owned write's acceptance is decided on them before it commits."""
        return sum(event.count for event in self._seen)

    def read_upstream(self, name: str) -> pa.Table:
        """Upstream ``name``'s slice for this interval, read from its destination and confirmed
        to be the version this unit was identified on. If the upstream was rewritten since the
        attempt began, ``InputsChangedError`` is raised instead and the unit is superseded by
        the one keyed by the new version (docs/architecture.md, "Inputs as read"), so an
        effect twice cannot see never acts on data another unit also acts on."""
        if name not in self.sources:
            known = ", ".join(sorted(self.sources)) or "none"
            raise InputError(f"read_upstream: {name!r} is not an upstream of task "
                             f"{self.task_name!r} (its upstreams: {known})")
        destination = self.sources[name]
        if destination is None:
            raise InputError(f"read_upstream: upstream {name!r} of task {self.task_name!r} has "
                             "no destination to read; ctx.upstream holds its result when it ran "
                             "in this run")
        if self.inputs is None:
            raise InputError(
                f"read_upstream: task {self.task_name!r} is not running under twice's executor "
                "(this context pins no inputs); run it with twice run or an Executor, or read "
                "the upstream's destination with open_destination")
        return self.inputs.read(name, destination, self.interval)

    def nonfatal(self, message: str, count: int = 1) -> None:
        """Record a tolerated problem (e.g. 3 rows skipped) so reports show it, not hide it."""
        if not isinstance(message, str) or not message.strip():
            raise ValueError("nonfatal message must be a non-empty string")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError("nonfatal count must be an integer >= 1")
        event = NonFatal(message, count)
        self._seen.append(event)
        if self.recorder is not None:
            self.recorder(event)
        else:
            self._collected.append(event)


def _rebuild_context(
    unit: UnitOfWork,
    attempt: int,
    generation: int,
    upstream: dict[str, Any],
    params: dict[str, Any],
    recorder: Recorder | None,
    collected: list[NonFatal],
    snapshot: Any = None,
    stamp: Any = None,
    sources: dict[str, str | None] | None = None,
    inputs: Any = None,
) -> TaskContext:
    ctx = TaskContext(unit, attempt, generation, upstream, params, recorder, stamp=stamp,
                      snapshot=snapshot, sources=sources or {}, inputs=inputs)
    ctx._collected.extend(collected)
    ctx._seen.extend(collected)
    return ctx


class Pipeline:
    """A named set of tasks over one schedule, with pools, timeouts, deadline and owners.

    ``workflow_timeout`` bounds a whole run of one interval; every task timeout must be smaller,
    so a hung attempt is detected while there is still time to react. ``deadline`` is when the
    interval's output is due: a ``timedelta`` after the interval end, a local ``time`` of day (the
    first one at or after the interval end, in the schedule's zone), or ``f(interval) -> datetime``.
    """

    def __init__(
        self,
        name: str,
        *,
        schedule: Schedule,
        workflow_timeout: Duration | None = None,
        deadline: DeadlineSpec | None = None,
        pools: Mapping[str, int] | None = None,
        owners: Mapping[str, str] | None = None,
        description: str = "",
    ) -> None:
        self.name = _check_name(name, "pipeline name")
        where = f"pipeline {name!r}"
        if not isinstance(schedule, Schedule):
            raise PipelineError(f"{where}: schedule must be a twice.Schedule")
        self.schedule = schedule
        self.workflow_timeout = _seconds(
            workflow_timeout, f"{where}: workflow_timeout", positive=True
        )
        self.deadline = _check_deadline(deadline, where)
        if owners is not None and not isinstance(owners, Mapping):
            raise PipelineError(f"{where}: owners must be a mapping such as {{'escalation': ...}}")
        self.owners: Mapping[str, str] = MappingProxyType(dict(owners or {}))
        if not isinstance(description, str):
            raise PipelineError(f"{where}: description must be a string")
        self.description = description
        self.source_file: Path | None = None  # set by twice.define.load.load_pipeline
        self._pools: dict[str, int] = {}
        self._tasks: dict[str, Task] = {}
        self._by_function: dict[object, str] = {}
        self._external: frozenset[str] = frozenset()
        for pool_name, capacity in (pools or {}).items():
            self.pool(pool_name, slots=capacity)

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, schedule={self.schedule}, tasks={list(self._tasks)})"

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    @property
    def tasks(self) -> Mapping[str, Task]:
        """Tasks by name, in definition order (read-only)."""
        return MappingProxyType(self._tasks)

    @property
    def pools(self) -> Mapping[str, int]:
        """Pool name -> capacity in slots (read-only)."""
        return MappingProxyType(self._pools)

    @property
    def external_dependencies(self) -> frozenset[str]:
        """Task names left out by ``subset``: dependencies on them are satisfied by earlier runs."""
        return self._external

    # -- definition -----------------------------------------------------------------------

    def pool(self, name: str, slots: int) -> str:
        """Declare a pool of ``slots`` capacity around a real dependency; returns its name."""
        _check_name(name, f"pipeline {self.name!r}: pool")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise PipelineError(f"pool {name!r}: slots must be an integer >= 1, got {slots!r}")
        if self._pools.get(name, slots) != slots:
            raise PipelineError(
                f"pool {name!r}: declared twice with different capacities "
                f"({self._pools[name]} and {slots})"
            )
        self._pools[name] = slots
        return name

    @overload
    def task(self, fn: F, /) -> F: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = ...,
        depends_on: Iterable[str | Callable[..., Any] | Task] | str | Callable[..., Any] = ...,
        retry: RetryPolicy | None = ...,
        timeout: Duration | None = ...,
        pool: str | None = ...,
        slots: int = ...,
        transform_version: str = ...,
        destination: str = ...,
        input_partition: PartitionSpec | None = ...,
        input_version: Callable[[Interval], str] | None = ...,
        estimated_duration: Duration | None = ...,
        validation_duration: Duration = ...,
        reconcile: Reconciler | None = ...,
        cancel: Canceller | None = ...,
        acceptance: Any = ...,
        safe_repeat: SafeRepeat = ...,
        timeout_is_failure: bool = ...,
        write: WriteMode | None = ...,
        maximum_bytes_billed: int | None = ...,
        cost_estimate: Callable[[Interval], Any] | None = ...,
        snapshot: Callable[[Interval], Any] | None = ...,
        intermediate: Intermediate | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        description: str = ...,
    ) -> Callable[[F], F]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Decorator registering a task; returns the function unchanged (callable in tests).

        Use bare (``@pipeline.task``) or with options (``@pipeline.task(timeout=60, ...)``); the
        task name defaults to the function name. ``depends_on`` accepts names or the decorated
        functions themselves.
        """
        if fn is not None and options:
            raise PipelineError("task: pass options as @pipeline.task(...), not with a function")

        def register(function: F) -> F:
            opts = dict(options)
            label = str(opts.get("name") or getattr(function, "__name__", "?"))
            opts["depends_on"] = self._dependency_names(opts.get("depends_on", ()), label)
            task = Task.create(function, **opts)
            self.add_task(task)
            try:
                self._by_function[function] = task.name
            except TypeError:  # unhashable callable: it can still be referenced by name
                pass
            return function

        if fn is not None:
            return register(fn)
        return register

    def add_task(self, task: Task) -> Task:
        """Register an already-built ``Task`` (for generated pipelines)."""
        if not isinstance(task, Task):
            raise PipelineError(f"pipeline {self.name!r}: add_task needs a Task, got {task!r}")
        if task.name in self._tasks:
            raise PipelineError(
                f"task {task.name!r}: defined twice in pipeline {self.name!r} "
                "(task names must be unique; pass name=... to rename one)"
            )
        self._check_own_table(task)
        self._tasks[task.name] = task
        return task

    def _check_own_table(self, task: Task) -> None:
        """One writer per table: each interval's slice of a table is the output of one task
        (its commit records, fingerprints and fencing are kept per slice), so a second task
        writing the same table would replace the first one's rows unseen."""
        from twice.core.schemes import table_of

        if not task.owns_output:
            return
        table = table_of(task.destination)
        for other in self._tasks.values():
            if other.owns_output and table_of(other.destination) == table:
                raise PipelineError(
                    f"task {task.name!r}: its destination {task.destination!r} is the table "
                    f"task {other.name!r} writes: each interval's slice of a table is one "
                    "task's output (twice records, fingerprints and fences it per slice), so "
                    f"one task's write would replace the other's rows. Give {task.name!r} a "
                    f"table of its own, or produce both tasks' rows in one task"
                )

    def _dependency_names(self, deps: object, task_name: str) -> tuple[str, ...]:
        single = isinstance(deps, str | Task) or callable(deps)
        items = (deps,) if single else deps
        if not isinstance(items, Iterable):
            raise PipelineError(f"task {task_name!r}: depends_on must list task names")
        names = []
        for item in items:
            if isinstance(item, str):
                names.append(item)
            elif isinstance(item, Task):
                names.append(item.name)
            elif callable(item) and (registered := self._registered_name(item)) is not None:
                names.append(registered)
            else:
                raise PipelineError(
                    f"task {task_name!r}: depends_on item {item!r} is not a task name or a "
                    f"function decorated with @{self.name}.task"
                )
        return tuple(names)

    def _registered_name(self, function: object) -> str | None:
        try:
            return self._by_function.get(function)
        except TypeError:  # an unhashable callable object was never registered
            return None

    def get_task(self, name: str) -> Task:
        """The task called ``name``; the error suggests close names."""
        try:
            return self._tasks[name]
        except (KeyError, TypeError):
            raise PipelineError(
                f"pipeline {self.name!r}: no task {name!r}{self._suggest(name)}"
            ) from None

    def _suggest(self, name: object) -> str:
        known = list(self._tasks)
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{hint} (tasks: {', '.join(known) or 'none'})"

    # -- validation -------------------------------------------------------------------------

    def validate(self) -> list[str]:
        """Check the whole definition; raise ``PipelineError`` listing every problem.

        Returns advisory warnings (e.g. a task without a timeout) that do not block a run.
        """
        problems = self._graph_problems()
        warnings: list[str] = []
        if not self._tasks:
            problems.append(f"pipeline {self.name!r}: has no tasks")
        workflow = self.workflow_timeout
        for task in self._tasks.values():
            where = f"task {task.name!r}"
            if task.pool is not None:
                capacity = self._pools.get(task.pool)
                if capacity is None:
                    problems.append(
                        f"{where}: pool {task.pool!r} is not declared; declare it with "
                        f"pipeline.pool({task.pool!r}, slots=N) or Pipeline(..., pools={{...}})"
                    )
                elif task.slots > capacity:
                    problems.append(
                        f"{where}: slots={task.slots} exceeds pool {task.pool!r} capacity "
                        f"{capacity}; it could never start"
                    )
            timeout = task.timeout
            if timeout is not None and workflow is not None and timeout >= workflow:
                problems.append(
                    f"{where}: timeout {_fmt(timeout)} must be smaller than the workflow_timeout "
                    f"{_fmt(workflow)}, so a hung attempt is caught while there is time to react"
                )
            if timeout is None:
                until = "the workflow timeout" if workflow is not None else "someone notices"
                warnings.append(
                    f"{where}: no timeout; a hung attempt holds its slots until {until}"
                )
                if task.estimated_duration is None and self.deadline is not None:
                    warnings.append(
                        f"{where}: neither estimated_duration nor timeout: the deadline planner "
                        "assumes an attempt takes 0 s until one has been measured"
                    )
            elif task.estimated_duration is not None and task.estimated_duration >= timeout:
                warnings.append(
                    f"{where}: estimated_duration {_fmt(task.estimated_duration)} is not below its "
                    f"timeout {_fmt(timeout)}; most attempts would time out"
                )
            elif task.estimated_duration is not None and timeout_far_above(
                timeout, task.estimated_duration
            ):
                estimate = task.estimated_duration
                warnings.append(
                    f"{where}: timeout {_fmt(timeout)} is {timeout / estimate:.0f}x its "
                    f"estimated_duration {_fmt(estimate)}: a hung attempt is detected only after "
                    f"{_fmt(timeout)}; a timeout near {_fmt(SUGGESTED_TIMEOUT_FACTOR * estimate)} "
                    "would detect it sooner"
                )
        if problems:
            raise PipelineError(problems)
        return warnings

    def unseen_effects(self) -> list[str]:
        """Warnings for definitions twice cannot fully protect: tasks whose effects twice
        cannot see (no owned destination and no ``reconcile=``: after a crash or timeout
        their outcome stays unknown until an operator records it with ``twice resolve``;
        ``safe_repeat`` does not settle an unknown outcome), and ``append`` tasks declared
        ``safe_repeat`` (a forced rerun or backfill appends their rows again)."""
        found = [
            f"task {task.name!r}: twice cannot see its effects (no owned destination, no "
            "reconcile=): after a crash or timeout its outcome stays unknown until an operator "
            "records it with `twice resolve`"
            for task in self._tasks.values() if task.effects_unseen
        ]
        found.extend(
            f"task {task.name!r}: write='append' with safe_repeat=True: each forced rerun or "
            "backfill of an interval (a new job generation) appends its rows again next to "
            "the earlier ones; leave safe_repeat off to have such reruns held, or write "
            "'replace' or 'upsert' to restate the interval"
            for task in self._tasks.values() if task.write == "append" and task.repeat_is_safe
        )
        return found

    def _graph_problems(self) -> list[str]:
        problems = []
        for task in self._tasks.values():
            for dep in task.depends_on:
                if dep not in self._tasks and dep not in self._external:
                    problems.append(
                        f"task {task.name!r}: depends_on {dep!r} is not a task of pipeline "
                        f"{self.name!r}{self._suggest(dep)}"
                    )
        cycle = self._find_cycle()
        if cycle:
            problems.append(
                f"dependency cycle (each task depends on the next): {' -> '.join(cycle)}"
            )
        return problems

    def _edges(self, name: str) -> list[str]:
        return [d for d in self._tasks[name].depends_on if d in self._tasks]

    def _find_cycle(self) -> list[str] | None:
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done
        for root in self._tasks:
            if root in state:
                continue
            path: list[str] = [root]
            stack: list[Iterator[str]] = [iter(self._edges(root))]
            state[root] = 1
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    state[path.pop()] = 2
                    stack.pop()
                elif state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]  # each depends on the next
                elif nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append(iter(self._edges(nxt)))
        return None

    # -- graph --------------------------------------------------------------------------------

    def topological_order(self) -> list[str]:
        """Task names with every task after its dependencies; ties keep definition order."""
        problems = self._graph_problems()
        if problems:
            raise PipelineError(problems)
        index = {name: i for i, name in enumerate(self._tasks)}
        waiting = {name: len(self._edges(name)) for name in self._tasks}
        downstream = self._downstream_map()
        ready = [index[n] for n, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        names = list(self._tasks)
        order: list[str] = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for child in downstream[name]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, index[child])
        return order

    def _downstream_map(self) -> dict[str, list[str]]:
        downstream: dict[str, list[str]] = {name: [] for name in self._tasks}
        for name in self._tasks:
            for dep in self._edges(name):
                downstream[dep].append(name)
        return downstream

    def _known(self, names: Iterable[str] | str) -> list[str]:
        items = [names] if isinstance(names, str) else list(names)
        for item in items:
            self.get_task(item)
        return items

    def _reach(self, names: Iterable[str] | str, step: Callable[[str], Iterable[str]]) -> set[str]:
        seen: set[str] = set()
        frontier = self._known(names)
        while frontier:
            current = frontier.pop()
            for nxt in step(current):
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        return seen

    def dependents_of(self, names: Iterable[str] | str) -> set[str]:
        """Every task downstream of any of ``names`` (transitively), which a backfill of
        ``names`` must rerun for the same intervals. A given name is included only if it is
        itself downstream of another given name."""
        downstream = self._downstream_map()
        return self._reach(names, downstream.__getitem__)

    def dependencies_of(self, names: Iterable[str] | str) -> set[str]:
        """Every task upstream of any of ``names`` (transitively)."""
        return self._reach(names, self._edges)

    def subset(self, names: Iterable[str] | str, with_dependents: bool = True) -> Pipeline:
        """A pipeline of only ``names`` (plus their dependents), same name and ids.

        The subset keeps the pipeline name, schedule and task definitions, so its units of work
        and job ids are those of the full pipeline. Dependencies on left-out tasks are listed in
        ``external_dependencies`` and count as satisfied by earlier runs.
        """
        chosen = set(self._known(names))
        if with_dependents:
            chosen |= self.dependents_of(chosen)
        part = Pipeline(
            self.name,
            schedule=self.schedule,
            workflow_timeout=self.workflow_timeout,
            deadline=self.deadline,
            pools=self._pools,
            owners=self.owners,
            description=self.description,
        )
        part.source_file = self.source_file
        for task_name, task in self._tasks.items():
            if task_name in chosen:
                part._tasks[task_name] = task
        part._by_function = {f: n for f, n in self._by_function.items() if n in chosen}
        part._external = self._external | (frozenset(self._tasks) - chosen)
        return part

    def with_deadline(self, deadline: DeadlineSpec | None) -> Pipeline:
        """The same pipeline (tasks, ids, units of work) with another delivery deadline.

        A backfill reprocesses past intervals: their own deadlines are history, so it plans
        against one of its own (or none) without touching the user's pipeline object.
        """
        copy = self.subset(list(self._tasks), with_dependents=False)
        copy.deadline = _check_deadline(deadline, f"pipeline {self.name!r}")
        return copy

    # -- units of work and contexts -----------------------------------------------------------

    def unit_of_work(
        self, task_name: str, interval: Interval, *, input_version: str | None = None
    ) -> UnitOfWork:
        """The unit of work of ``task_name`` for one schedule interval.

        The interval is normalised to the schedule's spelling first, so equal instants always
        give the same ``uow_id`` and job ids. ``input_version`` overrides the task's function
        (pass it when the executor already fingerprinted the input).
        """
        task = self.get_task(task_name)
        canonical = self.schedule.canonical(interval)
        version = task.version_for(canonical) if input_version is None else input_version
        if not isinstance(version, str):
            raise PipelineError(f"task {task_name!r}: input_version must be a string")
        return UnitOfWork(
            pipeline=self.name,
            task=task.name,
            interval=canonical,
            destination=task.destination,
            transform_version=task.transform_version,
            input_partition=task.partition_for(canonical),
            input_version=version,
        )

    def context(
        self,
        task_name: str,
        interval: Interval,
        *,
        attempt: int = 1,
        generation: int = 1,
        upstream: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        recorder: Recorder | None = None,
        unit: UnitOfWork | None = None,
        stamp: Any = None,
        snapshot: Any = None,
        inputs: UpstreamReader | None = None,
    ) -> TaskContext:
        """The ``TaskContext`` for one attempt (``unit`` reuses an already-built unit of work)."""
        if unit is None:
            unit = self.unit_of_work(task_name, interval)
        elif unit.task != task_name or unit.pipeline != self.name:
            raise PipelineError(f"task {task_name!r}: unit belongs to {unit.pipeline}.{unit.task}")
        return TaskContext(
            unit=unit,
            attempt=attempt,
            generation=generation,
            upstream=upstream or _EMPTY,
            params=params or _EMPTY,
            recorder=recorder,
            stamp=stamp,
            snapshot=snapshot,
            sources=self._sources(task_name),
            inputs=inputs,
        )

    def _sources(self, task_name: str) -> dict[str, str | None]:
        """``task_name``'s upstreams -> each one's destination (None: it owns none)."""
        out: dict[str, str | None] = {}
        for dep in self.get_task(task_name).depends_on:
            task = self._tasks.get(dep)
            out[dep] = task.destination if task is not None and task.owns_output else None
        return out

    def deadline_for(self, interval: Interval) -> datetime | None:
        """When the interval's output is due (aware), or None if the pipeline has no deadline."""
        spec = self.deadline
        if spec is None:
            return None
        end = interval.end
        if isinstance(spec, timedelta):
            due = end + spec
        elif isinstance(spec, time):
            local_end = end.astimezone(self.schedule.zone)
            day = local_end.date()
            due = self.schedule.at_local(datetime.combine(day, spec))
            if due < end:
                due = self.schedule.at_local(datetime.combine(day + timedelta(days=1), spec))
        else:
            due = spec(interval)
            if not isinstance(due, datetime) or due.utcoffset() is None:
                raise PipelineError(
                    f"pipeline {self.name!r}: deadline function returned {due!r}; "
                    "expected a timezone-aware datetime"
                )
        if due < end:
            raise PipelineError(
                f"pipeline {self.name!r}: deadline {due.isoformat()} for {interval} is before the "
                "interval ends; its data cannot be complete by then"
            )
        return due


def _check_deadline(deadline: object, where: str) -> DeadlineSpec | None:
    if deadline is None:
        return None
    if isinstance(deadline, timedelta):
        if deadline < timedelta(0):
            raise PipelineError(f"{where}: deadline must be >= 0 after the interval end")
        return deadline
    if isinstance(deadline, time):
        if deadline.tzinfo is not None:
            raise PipelineError(
                f"{where}: deadline time must be naive; it is read in the schedule's time zone"
            )
        return deadline
    if callable(deadline):
        return deadline
    raise PipelineError(
        f"{where}: deadline must be a timedelta after the interval end, a local time of day, "
        f"or a function interval -> datetime; got {deadline!r}"
    )
