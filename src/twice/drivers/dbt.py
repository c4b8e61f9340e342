"""dbt projects as twice units of work: the materialization decides each node's unit.

:func:`resolve` asks dbt which nodes a selection names (``dbt ls --output json``, every
model, seed and snapshot without ``--select``; it also writes the project's
``manifest.json``). :func:`plan_stages` orders them one node at a time, and
:func:`build_stage` turns a stage into a twice :class:`~twice.define.pipeline.Pipeline` that the
backfill driver runs (``twice dbt backfill``: ``twice.cli.dbt_backfill``):

- **Units.** :func:`scope_of`: an incremental model with ``event_time`` (microbatch ones have
  it) has one unit per model x day, its destination the model's relation in the project's DuckDB
  file with ``partition_column=<event_time>``, so twice fingerprints the day's slice. Tables,
  views, seeds, snapshots and incremental models without ``event_time`` have one unit per build
  of the whole relation, recorded under the fixed :data:`WHOLE_RELATION` interval and
  fingerprinted whole. An ephemeral model is no unit: its SQL is part of its readers'.
- **Attempts.** Each attempt is one dbt subprocess (``dbt run``/``seed``/``snapshot
  --select NODE``): a microbatch model's day gets ``--event-time-start/--event-time-end``; a
  day's unit gets the variables ``twice_start``/``twice_end``/``twice_job_id`` (an incremental
  model that is not microbatch must replace the slice they name itself), every unit its job
  id in ``$TWICE_JOB_ID``. Its
  ``run_results.json``, JSON log, output and pid stay in
  ``STATE/runs/<job id>/attempt-<n>/``, and the node's result (status, message,
  ``adapter_response``, ``batch_results``, its dbt tests) is recorded in the ledger as an
  observation with source ``dbt``. With ``DbtProject(tests=True)`` (``--tests``) or the node's
  ``meta: {twice: {tests: true}}``, its dbt tests then run: a failing one rejects the output
  (:class:`DbtTestsFailedError`).
- **Errors.** A node that did not succeed raises, with dbt's first real error line
  (:func:`failure_text`), :class:`DbtTransientError` when it matches the
  :class:`ErrorTable`'s transient patterns (retried by the task's policy), else
  :class:`DbtModelError` (permanent). The default table is :data:`DEFAULT_TRANSIENT`; extend it
  in Python (``ErrorTable().extended(...)``) or with a TOML file (:meth:`ErrorTable.from_file`).
- **Versions.** The transform version is a hash of the node's manifest checksum, the config
  that decides what it writes and its ephemeral models' checksums, so a changed model is a new
  unit of work. The input version covers what the unit reads, fingerprinted when it is
  identified (after its upstreams ran): a day's slice of a relation declaring ``event_time``
  (for a day's unit), else the whole relation, whether that relation was selected or not; so a
  changed upstream day reruns the downstream models for that day only.
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
    "DEFAULT_TRANSIENT", "INTERVAL", "WHOLE", "WHOLE_RELATION", "DbtError", "DbtManifest",
    "DbtModelError", "DbtNotFoundError", "DbtProject", "DbtTestsFailedError",
    "DbtTransientError", "ErrorTable", "Stage", "build_pipeline", "build_stage", "find_dbt",
    "first_error", "plan_stages", "reconciler", "resolve", "scope_of",
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
ENV_DBT = "TWICE_DBT"
ENV_JOB = "TWICE_JOB_ID"
ENV_BYTES = "TWICE_DBT_MAXIMUM_BYTES_BILLED"
EVIDENCE_SOURCE = "dbt"


class DbtError(TwiceError):
    """dbt could not be run or its project could not be read."""


class DbtProjectError(DbtError, InputError):
    """The dbt project or the selection cannot be run under twice (named in the message)."""


class DbtNotFoundError(DbtError, InputError):
    """No dbt executable: not given with ``--dbt``, not in ``$TWICE_DBT``, not on PATH."""


class DbtModelError(DbtError):
    """A model's run did not succeed: permanent unless it is a :class:`DbtTransientError`."""

    def __init__(self, message: str, *, model: str = "", status: str = "",
                 pattern: str | None = None) -> None:
        super().__init__(message)
        self.model, self.status, self.pattern = model, status, pattern


class DbtTransientError(DbtModelError):
    """A model's run failed with an error the :class:`ErrorTable` lists as transient."""


class DbtTestsFailedError(DbtModelError):
    """The model built, but a dbt test on it failed: its output is rejected (permanent), and
    the unit is not verified, so the next backfill builds it again."""


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


def find_dbt(given: str | None = None) -> str:
    """The dbt executable: ``given`` (``--dbt PATH``), else ``$TWICE_DBT``, else ``dbt`` on
    PATH, as an absolute path. :class:`DbtNotFoundError` names all three when none is found."""
    for where, value in (("--dbt", given), (ENV_DBT, os.environ.get(ENV_DBT))):
        if not value:
            continue
        found = shutil.which(value)
        if found is None:
            raise DbtNotFoundError(f"{where}: {value} is not an executable dbt")
        return str(Path(found).absolute())
    found = shutil.which("dbt")
    if found is None:
        raise DbtNotFoundError(f"dbt not found: pass --dbt PATH, set {ENV_DBT} to the dbt "
                               "executable, or put dbt on PATH (pip install dbt-core dbt-duckdb)")
    return str(Path(found).absolute())


@dataclass(frozen=True)
class DbtProject:
    """A dbt project on DuckDB and how twice runs it.

    ``database`` is the DuckDB file the profile writes (it is passed to dbt as
    ``$TWICE_DBT_DUCKDB``: point the profile's ``path`` at it). ``state_dir`` (default
    ``PROJECT/target/twice``) holds the manifest and each attempt's evidence.
    ``maximum_bytes_billed`` is passed to dbt as ``$TWICE_DBT_MAXIMUM_BYTES_BILLED`` and the
    variable ``twice_maximum_bytes_billed`` for profiles and models that use it (BigQuery's
    ``maximum_bytes_billed`` profile field); DuckDB has no such limit. ``dbt`` is the
    executable (default: :func:`find_dbt`). ``tests``: every unit runs its model's dbt tests
    as its acceptance criteria (a model opts in alone with ``meta: {twice: {tests: true}}``).
    """

    project_dir: Path
    database: Path
    profiles_dir: Path | None = None
    dbt: str | None = None
    target: str | None = None
    state_dir: Path | None = None
    vars: Mapping[str, Any] = field(default_factory=dict)
    maximum_bytes_billed: int | None = None
    errors: ErrorTable = field(default_factory=ErrorTable)
    max_attempts: int = 3
    timeout: float | None = None
    tests: bool = False

    def __post_init__(self) -> None:
        project = Path(self.project_dir).expanduser().absolute()
        if not (project / "dbt_project.yml").is_file():
            raise DbtProjectError(f"--project-dir: no dbt_project.yml in {project}")
        object.__setattr__(self, "project_dir", project)
        object.__setattr__(self, "dbt", find_dbt(self.dbt))
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
        """``dbt ARGS`` on this project, its artifacts and its JSON log (``dbt.log``, read
        for errors) in ``target_path``; no colour codes in its output."""
        assert self.dbt is not None
        cmd = [self.dbt, *args, "--project-dir", str(self.project_dir),
               "--target-path", str(target_path), "--log-path", str(target_path),
               "--no-use-colors", "--log-format-file", "json"]
        if self.profiles_dir is not None:
            cmd += ["--profiles-dir", str(self.profiles_dir)]
        if self.target is not None:
            cmd += ["--target", self.target]
        return cmd

    def base_vars(self) -> dict[str, Any]:
        """The variables every dbt command gets (``dbt ls`` too: the same variables let dbt
        reuse its parse, which a change of variables discards)."""
        found = dict(self.vars)
        if self.maximum_bytes_billed is not None:
            found["twice_maximum_bytes_billed"] = self.maximum_bytes_billed
        return found

    def environment(self) -> dict[str, str]:
        env = {**os.environ, ENV_DATABASE: str(self.database),
               "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DBT_VERSION_CHECK": "false"}
        if self.maximum_bytes_billed is not None:
            env[ENV_BYTES] = str(self.maximum_bytes_billed)
        return env


@dataclass(frozen=True)
class DbtManifest:
    """The parsed manifest and the nodes a selection named (unique ids, dbt's order): models,
    seeds and snapshots."""

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

    def parents(self, unique_id: str) -> list[str]:
        """The nodes ``unique_id`` reads (models, seeds, snapshots, sources), in order."""
        node = self.node(unique_id)
        return [str(p) for p in (node.get("depends_on") or {}).get("nodes", [])
                if not str(p).startswith(("macro.", "metric.", "semantic_model."))]

    def units(self) -> list[str]:
        """The selected nodes that are units of work (an ephemeral model has no relation:
        its SQL is part of each model that reads it)."""
        return [uid for uid in self.selected if scope_of(self.node(uid)) != INLINE]


def _run(cmd: list[str], env: Mapping[str, str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, env=dict(env), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise DbtNotFoundError(f"{what}: dbt executable {cmd[0]!r} not found (--dbt PATH, "
                               f"{ENV_DBT}, or dbt on PATH)") from None


#: What ``dbt ls`` selects as units: what ``dbt build`` runs, less its tests.
RESOURCE_TYPES = ("model", "seed", "snapshot")


def resolve(project: DbtProject, select: str | None = None, exclude: str | None = None
            ) -> DbtManifest:
    """Parse the project and resolve ``select`` (None: every model, seed and snapshot, as
    ``dbt build`` would) with ``dbt ls`` (one subprocess, which also writes ``manifest.json``
    under the state folder)."""
    target = project.state / "manifest"
    target.mkdir(parents=True, exist_ok=True)
    args = ["ls", "--output", "json", "--output-keys", "unique_id", "--quiet"]
    for kind in RESOURCE_TYPES:
        args += ["--resource-type", kind]
    if project.base_vars():
        args += ["--vars", json.dumps(project.base_vars())]
    if select:
        args += ["--select", select]
    if exclude:
        args += ["--exclude", exclude]
    done = _run(project.command(*args, target_path=target), project.environment(), "dbt ls")
    if done.returncode != 0:
        what = f"dbt ls --select {select}" if select else "dbt ls"
        said = (first_error(_log_errors(target / LOG_FILE))
                or first_error(done.stderr) or _tail(done.stdout))
        raise DbtProjectError(f"{what} failed (exit {done.returncode}): {said}")
    selected = []
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            selected.append(str(json.loads(line)["unique_id"]))
    if not selected:
        raise DbtProjectError(f"--select: {select!r} names no model, seed or snapshot of "
                              f"{project.project_dir}")
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    return DbtManifest(project, manifest, tuple(selected))


# ------------------------------------------------------------------------ units of work

#: A node's unit of work: one per interval (its slice), or one per run over the whole relation.
INTERVAL, WHOLE, INLINE = "interval", "whole", "inline"

#: The interval every whole-relation unit is recorded under. A whole relation has no time
#: range: its units differ only by their input and transform versions, so one fixed, long-
#: ended interval keys them (the ledger's partition for it is the whole relation).
WHOLE_RELATION = Interval(datetime(1970, 1, 1, tzinfo=UTC), datetime(2000, 1, 1, tzinfo=UTC))
WHOLE_SCHEDULE = Schedule.every(WHOLE_RELATION.end - WHOLE_RELATION.start,
                                WHOLE_RELATION.start)


def scope_of(node: Mapping[str, Any]) -> str:
    """What one unit of ``node`` covers, decided by its materialization: an incremental model
    with ``event_time`` (microbatch ones have it) owns each interval's slice (``interval``);
    tables, views, seeds, snapshots and incremental models without ``event_time`` are built
    over the whole relation in one run (``whole``); an ephemeral model is ``inline``."""
    config = node.get("config") or {}
    materialized = config.get("materialized")
    if node.get("resource_type") != "model":
        return WHOLE
    if materialized == "ephemeral":
        return INLINE
    if materialized == "incremental" and (_event_time(node)
                                          or config.get("incremental_strategy") == "microbatch"):
        return INTERVAL
    return WHOLE


def is_whole(interval: Interval) -> bool:
    return interval == WHOLE_RELATION


@dataclass(frozen=True)
class Stage:
    """Units of one scope that run as one twice pipeline: every unit a stage's unit reads is in
    an earlier stage or in the same one (then twice orders them). :func:`plan_stages` makes
    stages of one node each."""

    scope: str
    units: tuple[str, ...]  # unique ids, dbt's order


def upstream_units(resolved: DbtManifest, uid: str, units: set[str]) -> set[str]:
    """The nearest units ``uid`` reads, through nodes that are not units (ephemeral models,
    models not selected)."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = list(resolved.parents(uid))
    while todo:
        parent = todo.pop()
        if parent in seen:
            continue
        seen.add(parent)
        if parent in units:
            found.add(parent)
        elif parent.startswith(("model.", "snapshot.", "seed.")):
            try:
                todo.extend(resolved.parents(parent))
            except DbtProjectError:
                continue
    return found


def plan_stages(resolved: DbtManifest) -> list[Stage]:
    """The selected units one node at a time, in dependency order (dbt's order among nodes
    that do not depend on each other): a whole-relation model runs once, after every interval
    of the units it reads (a table over an incremental model), and an incremental model's
    intervals after the whole relations it reads.

    One node per stage keeps a unit's identity independent of the selection: its input version
    is always the fingerprints of what it reads, taken when it is identified (after its
    upstreams ran), whichever of them were selected with it."""
    units = resolved.units()
    chosen = set(units)
    order: list[str] = []
    placed: set[str] = set()

    def place(uid: str, path: tuple[str, ...] = ()) -> None:
        if uid in placed:
            return
        if uid in path:
            raise DbtProjectError(f"dbt manifest: a cycle through {uid}")
        for parent in sorted(upstream_units(resolved, uid, chosen), key=units.index):
            place(parent, (*path, uid))
        placed.add(uid)
        order.append(uid)

    for uid in units:
        place(uid)
    return [Stage(scope_of(resolved.node(uid)), (uid,)) for uid in order]


# ------------------------------------------------------------------------------ the pipeline


Evidence = Callable[[TaskContext, str, Mapping[str, Any]], None]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:64] or "dbt"


def pipeline_name(resolved: DbtManifest) -> str:
    """One name for every stage's pipeline: the project's units share one ledger history."""
    return _slug(f"dbt_{resolved.name}")


def destination_of(project: DbtProject, node: Mapping[str, Any], column: str | None) -> str:
    """The node's relation in the DuckDB file; ``column``: its slice column (an interval
    unit's), else the whole relation."""
    schema = node.get("schema") or "main"
    table = node.get("alias") or node.get("identifier") or node["name"]
    shown = table if schema == "main" else f"{schema}.{table}"
    query = f"?partition_column={column}" if column else ""
    return f"duckdb://{project.database}{query}#{shown}"


def _event_time(node: Mapping[str, Any]) -> str | None:
    value = (node.get("config") or {}).get("event_time")
    return str(value) if value else None


def transform_version(node: Mapping[str, Any],
                      inline: Sequence[Mapping[str, Any]] = ()) -> str:
    """A hash of the node's checksum (a seed's: its file's), the config that decides what it
    writes, and the checksums of the ephemeral models it inlines."""
    config = node.get("config") or {}
    decisive = {key: config.get(key) for key in (
        "materialized", "incremental_strategy", "event_time", "batch_size", "lookback",
        "unique_key", "pre-hook", "post-hook", "incremental_predicates", "strategy",
        "check_cols", "updated_at")}
    text = json.dumps({"checksum": (node.get("checksum") or {}).get("checksum"),
                       "config": decisive,
                       "inline": [(n.get("checksum") or {}).get("checksum") for n in inline]},
                      sort_keys=True, default=str)
    return "dbt:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _inlined(resolved: DbtManifest, uid: str) -> list[Mapping[str, Any]]:
    """The ephemeral models ``uid`` reads, directly or through other ephemeral models."""
    found: list[Mapping[str, Any]] = []
    todo = list(resolved.parents(uid))
    while todo:
        parent = todo.pop(0)
        if not parent.startswith("model."):
            continue
        node = resolved.node(parent)
        if scope_of(node) == INLINE and node not in found:
            found.append(node)
            todo.extend(resolved.parents(parent))
    return found


def _repeat_is_safe(node: Mapping[str, Any]) -> bool:
    """Whether a second run with the same inputs writes the same relation: a rebuild (table,
    view, seed), a snapshot (it records changes only), an incremental model over its interval
    or keyed by ``unique_key``; not an incremental append without either."""
    config = node.get("config") or {}
    if node.get("resource_type") != "model" or config.get("materialized") != "incremental":
        return True
    return scope_of(node) == INTERVAL or bool(config.get("unique_key"))


def build_stage(resolved: DbtManifest, stage: Stage, *,
                evidence: Evidence | None = None) -> Pipeline:
    """The twice pipeline of one stage: one task per unit, named after the node, depending
    on the stage's units it reads; daily intervals (UTC) for an interval stage, the one
    :data:`WHOLE_RELATION` interval for a whole-relation stage."""
    project = resolved.project
    problems = []
    for uid in stage.units:
        node = resolved.node(uid)
        config = node.get("config") or {}
        if config.get("incremental_strategy") == "microbatch" and config.get(
                "batch_size") not in (None, "day"):
            problems.append(f"model {node['name']}: batch_size {config.get('batch_size')!r}; "
                            "twice dbt runs daily intervals (batch_size='day')")
    if problems:
        raise DbtProjectError("; ".join(problems))
    whole = stage.scope == WHOLE
    pipeline = Pipeline(pipeline_name(resolved),
                        schedule=WHOLE_SCHEDULE if whole else Schedule.daily("UTC"),
                        description=f"dbt project {project.project_dir}")
    policy = RetryPolicy(max_attempts=project.max_attempts, initial_delay=1.0, max_delay=30.0,
                         transient=(DbtTransientError,))
    members = set(stage.units)
    for uid in sorted(stage.units):  # stable; the pipeline orders by dependencies itself
        node = resolved.node(uid)
        depends = upstream_units(resolved, uid, members)
        outside = [p for p in resolved.parents(uid) if p not in members]
        column = None if whole else _event_time(node)
        pipeline.add_task(Task.create(
            _Runner(project, dict(node), evidence, whole), name=str(node["name"]),
            depends_on=tuple(str(resolved.node(p)["name"]) for p in sorted(depends)),
            retry=policy, timeout=project.timeout,
            destination=destination_of(project, node, column),
            transform_version=transform_version(node, _inlined(resolved, uid)),
            input_version=_InputVersion(resolved, tuple(outside), whole) if outside else None,
            reconcile=reconciler(project), safe_repeat=_repeat_is_safe(node),
            metadata={"dbt_unique_id": uid, "scope": stage.scope,
                      "materialized": (node.get("config") or {}).get("materialized"),
                      "strategy": (node.get("config") or {}).get("incremental_strategy"),
                      INPUTS_METADATA: lineage_inputs(resolved, outside)},
            description=f"dbt {node.get('resource_type')} {uid}",
        ))
    pipeline.validate()
    return pipeline


def lineage_inputs(resolved: DbtManifest, parents: Sequence[str]) -> tuple[str, ...]:
    """The relations a model reads that are no twice task of its stage (sources, seeds, models
    of another stage), as specs of its OpenLineage input datasets (``twice.engine.lineage``):
    its parent models in the stage are its inputs already, as upstream tasks."""
    found = []
    for uid in parents:
        node = resolved.manifest.get("nodes", {}).get(uid) or resolved.manifest.get(
            "sources", {}).get(uid)
        if node:
            table = node.get("alias") or node.get("identifier") or node["name"]
            found.append(f"duckdb://{resolved.project.database}#{node.get('schema') or 'main'}"
                         f".{table}")
    return tuple(found)


def build_pipeline(resolved: DbtManifest, *, evidence: Evidence | None = None) -> Pipeline:
    """The pipeline of a selection that is one stage (:func:`plan_stages`), e.g. incremental
    models only; a selection of several stages is run by
    ``twice.cli.dbt_backfill.backfill_project``."""
    stages = plan_stages(resolved)
    if len(stages) != 1:
        raise DbtProjectError("the selection has units of several scopes (whole relations and "
                              "intervals): run it with backfill_project")
    return build_stage(resolved, stages[0], evidence=evidence)


@dataclass(frozen=True)
class _InputVersion:
    """What a unit reads from outside its stage's pipeline, as fingerprints taken now: the
    interval's slice of a relation that declares ``event_time`` (for an interval unit), else
    the whole relation; through an ephemeral model to what it reads. (Upstream units of the
    same stage are covered by twice itself, from their recorded fingerprints.)"""

    resolved: DbtManifest
    parents: tuple[str, ...]
    whole: bool

    def __call__(self, interval: Interval) -> str:
        from twice.engine.verification import current_fingerprint

        parts: dict[str, str] = {}
        todo, seen = list(self.parents), set()
        while todo:
            uid = todo.pop(0)
            if uid in seen:
                continue
            seen.add(uid)
            node = self.resolved.node(uid)
            if node.get("resource_type") == "model" and scope_of(node) == INLINE:
                todo.extend(self.resolved.parents(uid))
                continue
            column = None if self.whole else _event_time(node)
            spec = destination_of(self.resolved.project, node, column)
            try:
                found = current_fingerprint(spec, interval)
            except TwiceError as exc:  # a view over a dropped table: it reads nothing now
                parts[uid] = f"unreadable:{type(exc).__name__}"
                continue
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


#: The dbt command that builds a node of each resource type.
COMMANDS = {"model": "run", "seed": "seed", "snapshot": "snapshot"}


def runs_tests(project: DbtProject, node: Mapping[str, Any]) -> bool:
    """Whether a unit of ``node`` takes its dbt tests as acceptance criteria: ``--tests``
    for every unit, or the node's ``meta: {twice: {tests: true}}``."""
    meta = (node.get("config") or {}).get("meta") or node.get("meta") or {}
    twice = meta.get("twice") if isinstance(meta, Mapping) else None
    return project.tests or (isinstance(twice, Mapping) and twice.get("tests") is True)


@dataclass(frozen=True)
class _Runner:
    """The task function: one dbt run of one node, for the context's interval or over the
    whole relation; then its tests, when they are its acceptance criteria."""

    project: DbtProject
    node: Mapping[str, Any]
    evidence: Evidence | None = None
    whole: bool = False

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
        # A whole-relation unit gets the variables `dbt ls` had, so dbt reuses its parse (new
        # variables make dbt parse the project again); its job id is in $TWICE_JOB_ID.
        variables = project.base_vars()
        start, end = _utc(ctx.interval.start), _utc(ctx.interval.end)
        if not self.whole:
            variables.update({VAR_START: start, VAR_END: end, VAR_JOB: ctx.job_id})
        verb = COMMANDS.get(str(self.node.get("resource_type")), "run")
        args = [verb, "--select", name]
        if variables:
            args += ["--vars", json.dumps(variables)]
        microbatch = (self.node.get("config") or {}).get("incremental_strategy") == "microbatch"
        if microbatch and not self.whole:
            args += ["--event-time-start", start, "--event-time-end", end]
        cmd = project.command(*args, target_path=folder)
        code = _wait(cmd, project, folder, ctx.job_id)
        result = model_result(folder, str(self.node["unique_id"]))
        status = "" if result is None else str(result.get("status") or "")
        message = "" if result is None else str(result.get("message") or "")
        detail = {"model": self.node["unique_id"], "exit_code": code, "status": status or None,
                  "message": message or None, "microbatch": microbatch,
                  "scope": WHOLE if self.whole else INTERVAL,
                  "adapter_response": None if result is None else result.get("adapter_response"),
                  "batch_results": None if result is None else result.get("batch_results"),
                  "execution_time": None if result is None else result.get("execution_time"),
                  "run_results": str(folder / "run_results.json") if result else None,
                  "command": shlex.join(cmd)}
        if code == 0 and status == "success" and runs_tests(project, self.node):
            detail["tests"] = self._tests(ctx, folder, name)
        if self.evidence is not None:
            self.evidence(ctx, f"dbt-{status or 'no-result'}", detail)
        if code == 0 and status == "success":
            failed = [t for t in detail.get("tests") or [] if t["status"] in ("fail", "error")]
            if failed:
                shown = "; ".join(f"{t['name']} {t['status']}: {t['message']}" for t in failed)
                raise DbtTestsFailedError(f"dbt tests rejected the output of {name}: {shown}",
                                          model=name, status="fail")
            return detail
        why = failure_text(message, folder / LOG_FILE, folder / "dbt.out")
        kind, pattern = project.errors.classify(why)
        error = DbtTransientError if kind == "transient" else DbtModelError
        raise error(f"dbt {name} {status or 'ended without a result'} (exit {code}): {why}",
                    model=name, status=status, pattern=pattern)

    def _tests(self, ctx: TaskContext, folder: Path, name: str) -> list[dict[str, Any]]:
        """``dbt test --select NAME`` in ``folder/tests``: each test's name, status, failing
        rows and first error line."""
        tests = folder / "tests"
        tests.mkdir()
        parsed = folder / "partial_parse.msgpack"
        if parsed.is_file():
            shutil.copy2(parsed, tests / "partial_parse.msgpack")
        variables = self.project.base_vars()
        more = ["--vars", json.dumps(variables)] if variables else []
        cmd = self.project.command("test", "--select", name, *more, target_path=tests)
        _wait(cmd, self.project, tests, ctx.job_id)
        found = []
        for result in _run_results(tests):
            node = str(result.get("unique_id") or "")
            found.append({"name": node.split(".")[2] if node.count(".") >= 2 else node,
                          "status": str(result.get("status") or ""),
                          "failures": result.get("failures"),
                          "message": first_error(str(result.get("message") or ""))})
        if not found and not (tests / "run_results.json").is_file():
            found.append({"name": "dbt test", "status": "error", "failures": None,
                          "message": first_error(_log_errors(tests / LOG_FILE))
                          or "dbt test wrote no run results"})
        return found


def _wait(cmd: list[str], project: DbtProject, folder: Path, job_id: str) -> int:
    """Run ``cmd`` with its output in ``folder/dbt.out`` and its pid in ``folder/pid``; the
    unit's job id in ``$TWICE_JOB_ID``."""
    env = {**project.environment(), ENV_JOB: job_id}
    with open(folder / "dbt.out", "w", encoding="utf-8") as out:
        try:
            process = subprocess.Popen(cmd, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, text=True)
        except FileNotFoundError:
            raise DbtNotFoundError(f"dbt executable {project.dbt!r} not found") from None
        (folder / "pid").write_text(f"{process.pid}\n", encoding="utf-8")
        return process.wait()


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


#: dbt's structured log in an attempt's folder (``--log-format-file json``).
LOG_FILE = "dbt.log"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: dbt's heading above an error (``Runtime Error in model orders (models/orders.sql)``), and
#: its summary lines: what failed, not why.
_HEADING = re.compile(r"^(\w+ )*(Error|Failure|Warning) in (model|seed|snapshot|test|source|"
                      r"sql operation|macro|operation)\b|^Failure in |^Completed with \d+ error"
                      r"|^Done\. PASS=|^\d+ of \d+ ERROR", re.IGNORECASE)
#: Log events that only summarize a failure told elsewhere.
_SUMMARY_EVENTS = ("LogModelResult", "LogSeedResult", "LogSnapshotResult", "LogTestResult",
                   "RunResultFailure", "EndOfRunSummary", "StatsLine", "LogBatchResult",
                   "DeprecationsSummary")


def first_error(text: str) -> str:
    """dbt's first line that says what went wrong (the database's or the compiler's), with
    no colour codes and no heading (``Runtime Error in model ...``): one line, for the CLI and
    the ledger."""
    for line in _ANSI.sub("", text).splitlines():
        line = line.strip()
        if line and not _HEADING.search(line):
            return line[:500]
    return ""


def _log_errors(path: Path) -> str:
    """The error events of a dbt JSON log, in order (``RunResultError`` first: the result's
    own error), as text."""
    found: list[tuple[int, str]] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in lines:
        try:
            info = json.loads(line).get("info") or {}
        except (ValueError, AttributeError):
            continue
        if info.get("level") != "error" or info.get("name") in _SUMMARY_EVENTS:
            continue
        found.append((0 if info.get("name") == "RunResultError" else 1, str(info.get("msg"))))
    return "\n".join(msg for _, msg in sorted(found, key=lambda f: f[0]))


def failure_text(message: str, log: Path, output: Path | None = None) -> str:
    """What a failed node said, in one line, to classify and record: the first real line of
    ``run_results.json``'s message, unless it says nothing more than its status (a microbatch
    model's is only ``ERROR``): then the first real error of dbt's JSON log, else of its
    output."""
    said = "" if message.strip().upper() in ("ERROR", "FAIL", "ERROR.") else first_error(message)
    if not said:
        said = first_error(_log_errors(log))
    if not said and output is not None:
        try:
            said = first_error("\n".join(reversed(output.read_text(
                encoding="utf-8", errors="replace").splitlines()[-8:])))
        except OSError:
            said = ""
    return said or message.strip() or "dbt said nothing more"


def _tail(text: str, lines: int = 8) -> str:
    kept = [line.strip() for line in _ANSI.sub("", text).strip().splitlines() if line.strip()]
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
