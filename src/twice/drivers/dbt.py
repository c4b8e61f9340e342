"""dbt models as twice units of work: one task per model, one unit per model x interval.

:func:`resolve` asks dbt which models a selection names (``dbt ls --select ... --output json``,
which also writes the project's ``manifest.json``), and :func:`build_pipeline` turns the
manifest into a twice :class:`~twice.define.pipeline.Pipeline` that every driver runs the usual
way (``twice dbt backfill`` hands it to ``twice.drivers.backfill``):

- **Tasks.** One per model that declares ``event_time`` (its slice column), named after the
  model, depending on its parent models. The destination is the model's relation in the
  project's DuckDB file, ``duckdb://FILE?partition_column=<event_time>#<schema>.<alias>``, so
  twice fingerprints the interval's slice after each run, records it in the ledger as the
  partition's next version, and compares versions.
- **Attempts.** Each attempt is one ``dbt run --select MODEL`` subprocess: a microbatch model
  gets ``--event-time-start/--event-time-end`` (the interval); every model gets the variables
  ``twice_start``/``twice_end``/``twice_job_id`` (an incremental model that is not microbatch
  must replace the slice they name itself). Its ``run_results.json``, output and pid stay in
  ``STATE/runs/<job id>/attempt-<n>/``, and the model's result (status, message,
  ``adapter_response``: rows affected, the adapter's job ids where the adapter reports them,
  ``batch_results``) is recorded in the ledger as an observation with source ``dbt``.
- **Errors.** A model that did not succeed raises :class:`DbtTransientError` when its message
  matches the :class:`ErrorTable`'s transient patterns (retried by the task's policy), else
  :class:`DbtModelError` (permanent). The default table is :data:`DEFAULT_TRANSIENT`; extend it
  in Python (``ErrorTable().extended(...)``) or with a TOML file (:meth:`ErrorTable.from_file`).
- **Versions.** The transform version is a hash of the model's manifest checksum and the config
  that decides what it writes, so a changed model is a new unit of work. The input version of a
  model covers the fingerprints of the slices it reads from seeds and sources that declare
  ``event_time``; upstream models are covered by twice itself (a dependent's input version
  includes the fingerprints of its upstream tasks' recorded slices), so a changed upstream day
  reruns the downstream models for that day only.
- **Unknown outcomes.** A killed or timed-out attempt is settled by :func:`reconciler` from the
  attempt's own folder: dbt still running (its pid alive) is ``running``; ``run_results.json``
  saying success is ``succeeded`` (then the slice is fingerprinted); an error result, or a dbt
  process that ended without writing one, is ``failed`` (a new job generation reruns the slice);
  no folder is ``not-found``.

What this rests on (and what it does not give): dbt writes the table, not twice, so there is
no twice commit record in the write's transaction and no fencing token on it. twice records
the slice's fingerprint right after dbt reports success; a rerun is safe because the model
replaces the interval's slice in one transaction (dbt-duckdb's microbatch strategy is a delete
plus insert of the batch; a non-microbatch model must do the same with ``twice_start``/
``twice_end``), which is why the tasks are declared ``safe_repeat``. A dbt process paused past
its lease (not killed) could still write after another run took the unit over: twice cannot
refuse that write, only see it as drift at the next backfill.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twice.core import processes
from twice.core.interval import Interval
from twice.core.outcomes import RemoteState
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, Task, TaskContext
from twice.define.schedule import Schedule
from twice.engine.lineage import INPUTS_METADATA
from twice.errors import InputError, TwiceError

__all__ = [
    "DEFAULT_TRANSIENT", "DbtError", "DbtManifest", "DbtModelError", "DbtProject",
    "DbtTransientError", "ErrorTable", "build_pipeline", "reconciler", "resolve",
]

DEFAULT_TRANSIENT: tuple[str, ...] = (
    r"could not set lock",  # DuckDB: another process holds the file
    r"database is locked",  # SQLite
    r"conflicting lock",
    r"lock (wait )?timeout",
    r"deadlock",
    r"serializ(ation|able) failure|could not serialize",
    r"transaction conflict|write-write conflict|conflict on (tuple|update)",
    r"connection (was )?(reset|refused|aborted|closed)|connection timed out",
    r"broken pipe",
    r"timed out|timeout",
    r"temporar(y|ily) (unavailable|failure)|service unavailable|try again",
    r"too many requests|rate ?limit|quota exceeded.*per (second|minute)",
    r"\b(429|500|502|503|504)\b",
    r"backenderror|internalerror|rateLimitExceeded",
)
"""Default transient patterns (case-insensitive regular expressions searched in the model's
error message): lock contention, serialization failures, dropped connections, timeouts,
throttling and 5xx answers. Everything else is permanent."""

VAR_START, VAR_END, VAR_JOB = "twice_start", "twice_end", "twice_job_id"
ENV_DATABASE = "TWICE_DBT_DUCKDB"
ENV_BYTES = "TWICE_DBT_MAXIMUM_BYTES_BILLED"
EVIDENCE_SOURCE = "dbt"


class DbtError(TwiceError):
    """dbt could not be run or its project could not be read."""


class DbtProjectError(DbtError, InputError):
    """The dbt project or the selection cannot be run under twice (named in the message)."""


class DbtModelError(DbtError):
    """A model's run did not succeed: permanent unless it is a :class:`DbtTransientError`."""

    def __init__(self, message: str, *, model: str = "", status: str = "",
                 pattern: str | None = None) -> None:
        super().__init__(message)
        self.model, self.status, self.pattern = model, status, pattern


class DbtTransientError(DbtModelError):
    """A model's run failed with an error the :class:`ErrorTable` lists as transient."""


@dataclass(frozen=True)
class ErrorTable:
    """How a model's error message is classified: ``permanent`` patterns first (exceptions to
    the transient list), then ``transient``; no match is permanent."""

    transient: tuple[str, ...] = DEFAULT_TRANSIENT
    permanent: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for pattern in (*self.transient, *self.permanent):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"dbt error table: {pattern!r} is not a regular expression: "
                                 f"{exc}") from None

    def extended(self, transient: Sequence[str] = (), permanent: Sequence[str] = ()
                 ) -> ErrorTable:
        """This table with more patterns."""
        return ErrorTable((*self.transient, *transient), (*self.permanent, *permanent))

    def classify(self, message: str) -> tuple[str, str | None]:
        """``("transient" | "permanent", the pattern that decided, or None)``."""
        for pattern in self.permanent:
            if re.search(pattern, message, re.IGNORECASE):
                return "permanent", pattern
        for pattern in self.transient:
            if re.search(pattern, message, re.IGNORECASE):
                return "transient", pattern
        return "permanent", None

    @classmethod
    def from_file(cls, path: str | Path) -> ErrorTable:
        """A TOML file: ``transient = [...]`` and ``permanent = [...]`` (under ``[errors]`` or
        at the top), added to the defaults unless ``replace_defaults = true``."""
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InputError(f"dbt error table {path}: {exc}") from None
        table = data.get("errors", data)
        lists = {}
        for key in ("transient", "permanent"):
            value = table.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(f"dbt error table {path}: {key} must be a list of strings")
            lists[key] = tuple(value)
        base = cls((), ()) if table.get("replace_defaults") is True else cls()
        return base.extended(lists["transient"], lists["permanent"])


@dataclass(frozen=True)
class DbtProject:
    """A dbt project on DuckDB and how twice runs it.

    ``database`` is the DuckDB file the profile writes (it is passed to dbt as
    ``$TWICE_DBT_DUCKDB``: point the profile's ``path`` at it). ``state_dir`` (default
    ``PROJECT/target/twice``) holds the manifest and each attempt's evidence.
    ``maximum_bytes_billed`` is passed to dbt as ``$TWICE_DBT_MAXIMUM_BYTES_BILLED`` and the
    variable ``twice_maximum_bytes_billed`` for profiles and models that use it (BigQuery's
    ``maximum_bytes_billed`` profile field); DuckDB has no such limit.
    """

    project_dir: Path
    database: Path
    profiles_dir: Path | None = None
    dbt: str = "dbt"
    target: str | None = None
    state_dir: Path | None = None
    vars: Mapping[str, Any] = field(default_factory=dict)
    maximum_bytes_billed: int | None = None
    errors: ErrorTable = field(default_factory=ErrorTable)
    max_attempts: int = 3
    timeout: float | None = None

    def __post_init__(self) -> None:
        project = Path(self.project_dir).expanduser().absolute()
        if not (project / "dbt_project.yml").is_file():
            raise DbtProjectError(f"--project-dir: no dbt_project.yml in {project}")
        object.__setattr__(self, "project_dir", project)
        object.__setattr__(self, "database", Path(self.database).expanduser().absolute())
        if self.profiles_dir is None and (project / "profiles.yml").is_file():
            object.__setattr__(self, "profiles_dir", project)
        if self.state_dir is None:
            object.__setattr__(self, "state_dir", project / "target" / "twice")
        limit = self.maximum_bytes_billed
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise DbtProjectError(f"--maximum-bytes-billed: must be a positive integer, got "
                                  f"{limit!r}")

    @property
    def state(self) -> Path:
        assert self.state_dir is not None
        return Path(self.state_dir)

    def command(self, *args: str, target_path: Path) -> list[str]:
        cmd = [self.dbt, *args, "--project-dir", str(self.project_dir),
               "--target-path", str(target_path), "--log-path", str(target_path)]
        if self.profiles_dir is not None:
            cmd += ["--profiles-dir", str(self.profiles_dir)]
        if self.target is not None:
            cmd += ["--target", self.target]
        return cmd

    def environment(self) -> dict[str, str]:
        env = {**os.environ, ENV_DATABASE: str(self.database),
               "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DBT_VERSION_CHECK": "false"}
        if self.maximum_bytes_billed is not None:
            env[ENV_BYTES] = str(self.maximum_bytes_billed)
        return env


@dataclass(frozen=True)
class DbtManifest:
    """The parsed manifest and the models a selection named (unique ids, dbt's order)."""

    project: DbtProject
    manifest: Mapping[str, Any]
    selected: tuple[str, ...]

    @property
    def name(self) -> str:
        return str(self.manifest.get("metadata", {}).get("project_name") or "project")

    def node(self, unique_id: str) -> Mapping[str, Any]:
        nodes = self.manifest.get("nodes", {})
        found = nodes.get(unique_id) or self.manifest.get("sources", {}).get(unique_id)
        if found is None:
            raise DbtProjectError(f"dbt manifest: no node {unique_id}")
        return found  # type: ignore[no-any-return]

    def models(self) -> list[Mapping[str, Any]]:
        return [n for n in self.manifest.get("nodes", {}).values()
                if n.get("resource_type") == "model"]


def _run(cmd: list[str], env: Mapping[str, str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, env=dict(env), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise DbtError(f"{what}: dbt executable {cmd[0]!r} not found (--dbt PATH, or install "
                       "dbt-core and dbt-duckdb: see docs/guides/dbt.md)") from None


def resolve(project: DbtProject, select: str, exclude: str | None = None) -> DbtManifest:
    """Parse the project and resolve ``select`` to its models with ``dbt ls`` (one subprocess,
    which also writes ``manifest.json`` under the state folder)."""
    target = project.state / "manifest"
    target.mkdir(parents=True, exist_ok=True)
    args = ["ls", "--select", select, "--resource-type", "model", "--output", "json",
            "--output-keys", "unique_id", "--quiet"]
    if exclude:
        args += ["--exclude", exclude]
    done = _run(project.command(*args, target_path=target), project.environment(), "dbt ls")
    if done.returncode != 0:
        raise DbtProjectError(f"dbt ls --select {select} failed (exit {done.returncode}): "
                              + _tail(done.stdout + done.stderr))
    selected = []
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            selected.append(str(json.loads(line)["unique_id"]))
    if not selected:
        raise DbtProjectError(f"--select: {select!r} names no model of {project.project_dir}")
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    return DbtManifest(project, manifest, tuple(selected))


# ------------------------------------------------------------------------------ the pipeline


Evidence = Callable[[TaskContext, str, Mapping[str, Any]], None]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:64] or "dbt"


def destination_of(project: DbtProject, node: Mapping[str, Any], column: str) -> str:
    schema = node.get("schema") or "main"
    table = node.get("alias") or node.get("identifier") or node["name"]
    shown = table if schema == "main" else f"{schema}.{table}"
    return f"duckdb://{project.database}?partition_column={column}#{shown}"


def _event_time(node: Mapping[str, Any]) -> str | None:
    value = (node.get("config") or {}).get("event_time")
    return str(value) if value else None


def transform_version(node: Mapping[str, Any]) -> str:
    """A hash of the model's checksum and the config that decides what it writes."""
    config = node.get("config") or {}
    decisive = {key: config.get(key) for key in (
        "materialized", "incremental_strategy", "event_time", "batch_size", "lookback",
        "unique_key", "pre-hook", "post-hook", "incremental_predicates")}
    text = json.dumps({"checksum": (node.get("checksum") or {}).get("checksum"),
                       "config": decisive}, sort_keys=True, default=str)
    return "dbt:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def build_pipeline(resolved: DbtManifest, *, evidence: Evidence | None = None) -> Pipeline:
    """One task per model with ``event_time`` (see the module docstring); every selected
    model must have one. Daily intervals in UTC (the models' ``batch_size`` must be ``day``
    when they are microbatch)."""
    project = resolved.project
    runnable = {str(n["unique_id"]): n for n in resolved.models() if _event_time(n)}
    problems = []
    for uid in resolved.selected:
        node = resolved.node(uid)
        if uid not in runnable:
            problems.append(f"model {node['name']}: no event_time config, so twice cannot "
                            "tell which rows an interval owns; add config(event_time=...)")
    for node in runnable.values():
        config = node.get("config") or {}
        if config.get("incremental_strategy") == "microbatch" and config.get(
                "batch_size") not in (None, "day"):
            problems.append(f"model {node['name']}: batch_size {config.get('batch_size')!r}; "
                            "twice dbt runs daily intervals (batch_size='day')")
    if problems:
        raise DbtProjectError("; ".join(problems))
    pipeline = Pipeline(_slug(f"dbt_{resolved.name}"), schedule=Schedule.daily("UTC"),
                        description=f"dbt project {project.project_dir}")
    policy = RetryPolicy(max_attempts=project.max_attempts, initial_delay=1.0, max_delay=30.0,
                         transient=(DbtTransientError,))
    order = sorted(runnable)  # stable; the pipeline orders by dependencies itself
    for uid in order:
        node = runnable[uid]
        parents = [str(p) for p in (node.get("depends_on") or {}).get("nodes", [])]
        depends = tuple(runnable[p]["name"] for p in parents if p in runnable)
        inputs = [p for p in parents if p not in runnable]
        pipeline.add_task(Task.create(
            _Runner(project, dict(node), evidence), name=str(node["name"]), depends_on=depends,
            retry=policy, timeout=project.timeout,
            destination=destination_of(project, node, str(_event_time(node))),
            transform_version=transform_version(node),
            input_version=_InputVersion(resolved, tuple(inputs)) if inputs else None,
            reconcile=reconciler(project), safe_repeat=True,
            metadata={"dbt_unique_id": uid,
                      "strategy": (node.get("config") or {}).get("incremental_strategy"),
                      INPUTS_METADATA: lineage_inputs(resolved, inputs)},
            description=f"dbt model {uid}",
        ))
    pipeline.validate()
    return pipeline


def lineage_inputs(resolved: DbtManifest, parents: Sequence[str]) -> tuple[str, ...]:
    """The relations a model reads that are no twice task (sources, seeds, models without
    event_time), as specs of its OpenLineage input datasets (``twice.engine.lineage``): its
    parent models twice runs are its inputs already, as upstream tasks."""
    found = []
    for uid in parents:
        node = resolved.manifest.get("nodes", {}).get(uid) or resolved.manifest.get(
            "sources", {}).get(uid)
        if node:
            table = node.get("alias") or node.get("identifier") or node["name"]
            found.append(f"duckdb://{resolved.project.database}#{node.get('schema') or 'main'}"
                         f".{table}")
    return tuple(found)


@dataclass(frozen=True)
class _InputVersion:
    """The fingerprints of the slices a model reads from seeds and sources with event_time
    (what an interval of it reads); a seed without one counts by its file checksum."""

    resolved: DbtManifest
    parents: tuple[str, ...]

    def __call__(self, interval: Interval) -> str:
        from twice.engine.verification import current_fingerprint

        parts: dict[str, str] = {}
        for uid in self.parents:
            node = self.resolved.node(uid)
            column = _event_time(node)
            if node.get("resource_type") == "model" or column is None:
                checksum = (node.get("checksum") or {}).get("checksum")
                if checksum:
                    parts[uid] = f"checksum:{checksum}"
                continue
            spec = destination_of(self.resolved.project, node, column)
            found = current_fingerprint(spec, interval)
            parts[uid] = "none" if found is None else f"{found.row_count}:{found.checksum}"
        if not parts:
            return ""
        digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
        return f"dbt-in:{digest}"


def attempt_dir(project: DbtProject, job_id: str, attempt: int) -> Path:
    return project.state / "runs" / job_id / f"attempt-{attempt}"


#: The file naming the attempt a folder belongs to (``_attempt_mark``), written first.
ATTEMPT_FILE = "attempt"


def _attempt_mark(ctx: TaskContext) -> str:
    """The attempt as the ledger knows it: unit, number and when it began. A folder of the
    same job id and number left by another attempt (an earlier ledger over the same project,
    or an attempt killed before it cleared the folder) has another mark, so its results are
    never taken for this attempt's."""
    began = getattr(ctx.stamp, "began_at", "") or ""
    return f"{ctx.unit.uow_id} {ctx.attempt} {began}\n"


@dataclass(frozen=True)
class _Runner:
    """The task function: one ``dbt run`` of one model for the context's interval."""

    project: DbtProject
    node: Mapping[str, Any]
    evidence: Evidence | None = None

    def __call__(self, ctx: TaskContext) -> dict[str, Any]:
        project, name = self.project, str(self.node["name"])
        folder = attempt_dir(project, ctx.job_id, ctx.attempt)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / ATTEMPT_FILE).write_text(_attempt_mark(ctx), encoding="utf-8")
        parsed = project.state / "manifest" / "partial_parse.msgpack"
        if parsed.is_file():  # dbt reparses only what changed since `dbt ls`
            shutil.copy2(parsed, folder / "partial_parse.msgpack")
        start, end = _utc(ctx.interval.start), _utc(ctx.interval.end)
        variables = {**project.vars, VAR_START: start, VAR_END: end, VAR_JOB: ctx.job_id}
        if project.maximum_bytes_billed is not None:
            variables["twice_maximum_bytes_billed"] = project.maximum_bytes_billed
        args = ["run", "--select", name, "--vars", json.dumps(variables)]
        microbatch = (self.node.get("config") or {}).get("incremental_strategy") == "microbatch"
        if microbatch:
            args += ["--event-time-start", start, "--event-time-end", end]
        cmd = project.command(*args, target_path=folder)
        with open(folder / "dbt.out", "w", encoding="utf-8") as out:
            try:
                process = subprocess.Popen(cmd, env=project.environment(), stdout=out,
                                           stderr=subprocess.STDOUT, text=True)
            except FileNotFoundError:
                raise DbtError(f"dbt executable {project.dbt!r} not found") from None
            (folder / "pid").write_text(f"{process.pid}\n", encoding="utf-8")
            code = process.wait()
        result = model_result(folder, str(self.node["unique_id"]))
        status = "" if result is None else str(result.get("status") or "")
        message = "" if result is None else str(result.get("message") or "")
        detail = {"model": self.node["unique_id"], "exit_code": code, "status": status or None,
                  "message": message or None, "microbatch": microbatch,
                  "adapter_response": None if result is None else result.get("adapter_response"),
                  "batch_results": None if result is None else result.get("batch_results"),
                  "execution_time": None if result is None else result.get("execution_time"),
                  "run_results": str(folder / "run_results.json") if result else None,
                  "command": shlex.join(cmd)}
        if self.evidence is not None:
            self.evidence(ctx, f"dbt-{status or 'no-result'}", detail)
        if code == 0 and status == "success":
            return detail
        why = failure_text(message, folder / "dbt.out")
        kind, pattern = project.errors.classify(why)
        error = DbtTransientError if kind == "transient" else DbtModelError
        raise error(f"dbt model {name} {status or 'ended without a result'} (exit {code}): "
                    f"{why}", model=name, status=status, pattern=pattern)


def _run_results(folder: Path) -> list[dict[str, Any]]:
    """The ``results`` of the attempt's ``run_results.json`` (empty: none written, or not
    readable: a killed dbt may leave it half written)."""
    path = folder / "run_results.json"
    if not path.is_file():
        return []
    try:
        results = json.loads(path.read_text(encoding="utf-8")).get("results", [])
    except (OSError, ValueError):
        return []
    return list(results)


def model_result(folder: Path, unique_id: str) -> dict[str, Any] | None:
    """The model's entry in the attempt's ``run_results.json`` (None: none written)."""
    for result in _run_results(folder):
        if result.get("unique_id") == unique_id:
            return dict(result)
    return None


def _utc(instant: datetime) -> str:
    """An instant as dbt's --event-time-start takes it: UTC, no offset."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def failure_text(message: str, output: Path) -> str:
    """What a failed model said, to classify and record: ``run_results.json``'s message,
    unless it says nothing more than its status (a microbatch model's is only ``ERROR``),
    then the end of dbt's own output, where the database's error is."""
    if message.strip() and message.strip().upper() not in ("ERROR", "FAIL", "ERROR."):
        return message
    try:
        said = _tail(output.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        said = ""
    return said or message


def _tail(text: str, lines: int = 8) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-2000:]


def _alive(pid: int, folder: Path) -> bool:
    """Whether ``pid`` is still this attempt's dbt (its command line names the folder)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    mentions = processes.command_mentions(pid, str(folder))
    return mentions is not False  # None: cannot tell, alive is all we know


def reconciler(project: DbtProject) -> Callable[[str, TaskContext], RemoteState]:
    """``reconcile=`` for dbt tasks: what became of attempt ``ctx.attempt`` of ``job_id``."""

    def reconcile(job_id: str, ctx: TaskContext) -> RemoteState:
        folder = attempt_dir(project, job_id, ctx.attempt)
        if not folder.is_dir():
            return RemoteState.NOT_FOUND
        try:
            mark = (folder / ATTEMPT_FILE).read_text(encoding="utf-8")
        except OSError:
            mark = None
        if mark != _attempt_mark(ctx):  # an earlier attempt's folder (another ledger's, or
            return RemoteState.NOT_FOUND  # one killed before it cleared it): not this one's
        pid_file = folder / "pid"
        if not pid_file.is_file():
            return RemoteState.NOT_FOUND  # the folder was made, dbt never started
        pid = int(pid_file.read_text(encoding="utf-8").strip() or 0)
        if pid and _alive(pid, folder):
            return RemoteState.RUNNING
        uid = _unique_id(folder) or ""
        result = model_result(folder, uid) if uid else None
        if result is not None and result.get("status") == "success":
            return RemoteState.SUCCEEDED
        return RemoteState.FAILED  # an error result, or dbt ended without writing one

    return reconcile


def _unique_id(folder: Path) -> str | None:
    results = _run_results(folder)
    return str(results[0]["unique_id"]) if results else None
