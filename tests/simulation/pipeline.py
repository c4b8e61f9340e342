"""The simulated pipeline, shaped by the seed (see tests/simulation/world.py).

- ``extract`` (root): the day's source rows, ``write="replace"`` or ``"upsert"``; its input
  version is the day's source version.
- ``clean`` (after extract): reads extract's slice, keeps some rows, reports non-fatal errors,
  ``write="replace"`` under ``AcceptanceCriteria(min_rows=2, max_nonfatal_errors=1)``.
- ``audit`` (after extract): one row per version, ``write="append"`` (exactly once).
- ``remote`` (after extract): submits a job to the remote service under ``ctx.job_id`` and
  polls it; ``reconcile=`` asks the service by job id. With the feature
  ``reconcile_with_owned_write`` it also returns rows that twice writes (``replace``).
- ``notify`` (after clean): a delivery to the receiver, an effect twice cannot see.
- ``keyed`` (after clean, feature ``same_job_id``): a delivery to a receiver that deduplicates
  by job id, declared ``safe_repeat="same-job-id"``.

``clean`` and ``audit`` read ``extract`` on their own (their owned writes are admitted only
while their pinned inputs hold); ``remote``, ``notify`` and ``keyed`` act where twice cannot
see, so they read their upstream through ``ctx.read_upstream`` (``twice.engine.inputs``).
Every row carries the source version ``v`` it was computed from, so the reference model can
tell which version a slice holds. Task code passes the world's crash points.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from tests.simulation.world import World
from twice import AcceptanceCriteria, RemoteState
from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

TRANSIENT = RetryPolicy(max_attempts=2, transient=(ConnectionError,))


def day_of(interval: Interval) -> date:
    return interval.start.date()


def specs(world: World) -> dict[str, str]:
    """Each owned task's destination, on an engine the seed picks."""
    files = {"sqlite": f"sqlite://{world.root / 'wh.db'}",
             "duckdb": f"duckdb://{world.root / 'wh.duckdb'}"}
    out = {}
    for task in ("extract", "clean", "audit", "remote"):
        engine = world.rng.choice(sorted(files))
        keys = "&key_columns=id,day" if task == "extract" else ""
        out[task] = f"{files[engine]}?partition_column=day{keys}#{task}"
    return out


def build(world: World) -> tuple[Pipeline, dict[str, str]]:
    import pyarrow as pa

    from twice.destinations import open_destination

    dest = specs(world)
    extract_mode = world.rng.choice(["replace", "upsert"])
    pipeline = Pipeline("sim", schedule=Schedule.daily("UTC"))
    truth = world.truth

    def version(interval: Interval) -> str:
        return f"v{world.version[day_of(interval)]}"

    def upstream_version(spec: str, interval: Interval) -> int:
        """The version an upstream's slice holds, read by the task on its own (its owned
        writes are still admitted only while its pinned inputs hold)."""
        with open_destination(spec) as source:
            return version_of(spec, source.read_partition(interval))

    def version_of(what: str, table: pa.Table) -> int:
        versions = set(table.column("v").to_pylist())
        if len(versions) != 1:
            raise ValueError(f"{what}: slice holds versions {sorted(versions)}")
        return int(versions.pop())

    def read(ctx: TaskContext, upstream: str) -> int:
        """The version an upstream's slice holds, read through twice (pinned: the version the
        unit was identified on, or ``InputsChangedError``)."""
        return version_of(upstream, ctx.read_upstream(upstream))

    def table(rows: list[tuple[Any, ...]], names: list[str]) -> pa.Table:
        types = {"day": pa.date32(), "id": pa.int64(), "amount": pa.int64(), "v": pa.int64()}
        return pa.table({n: pa.array([r[i] for r in rows], types.get(n, pa.string()))
                         for i, n in enumerate(names)})

    @pipeline.task(destination=dest["extract"], write=extract_mode, safe_repeat=True,
                   input_version=version, retry=TRANSIENT)
    def extract(ctx: TaskContext) -> Any:
        world.point("task.start")
        day = day_of(ctx.interval)
        rows = truth.extract_rows(day, world.version[day])
        world.point("task.before_output")
        return table(rows, ["day", "id", "amount", "v"])

    @pipeline.task(depends_on=extract, destination=dest["clean"], write="replace",
                   safe_repeat=True, retry=TRANSIENT,
                   acceptance=AcceptanceCriteria(min_rows=2, max_nonfatal_errors=1))
    def clean(ctx: TaskContext) -> Any:
        world.point("task.start")
        day = day_of(ctx.interval)
        v = upstream_version(dest["extract"], ctx.interval)
        errors = truth.clean_nonfatal(day, v)
        if errors:
            ctx.nonfatal("rows skipped", errors)
        world.point("task.before_output")
        return table(truth.clean_rows(day, v), ["day", "id", "amount", "v"])

    @pipeline.task(depends_on=extract, destination=dest["audit"], write="append",
                   safe_repeat=True, retry=TRANSIENT)
    def audit(ctx: TaskContext) -> Any:
        world.point("task.start")
        v = upstream_version(dest["extract"], ctx.interval)
        world.point("task.before_output")
        return table([(day_of(ctx.interval), v)], ["day", "v"])

    def reconcile(job_id: str, ctx: TaskContext) -> RemoteState:
        answer = world.remote.status(job_id)
        return {"DONE": RemoteState.SUCCEEDED, "RUNNING": RemoteState.RUNNING,
                "NOT_FOUND": RemoteState.NOT_FOUND}[answer]

    owned_remote = "reconcile_with_owned_write" in world.features
    remote_options: dict[str, Any] = (
        {"destination": dest["remote"], "write": "replace"} if owned_remote else {}
    )

    @pipeline.task(depends_on=extract, reconcile=reconcile, retry=TRANSIENT, safe_repeat=True,
                   **remote_options)
    def remote(ctx: TaskContext) -> Any:
        world.point("task.start")
        day = day_of(ctx.interval)
        v = read(ctx, "extract")
        world.remote.submit(ctx.job_id, day, v, seconds=world.rng.choice([0, 5, 30]))
        world.point("remote.after_submit")
        while world.remote.status(ctx.job_id) == "RUNNING":
            world.clock.advance(5)
        world.point("task.before_output")
        return table([(day, v)], ["day", "v"]) if owned_remote else None

    @pipeline.task(depends_on=clean)
    def notify(ctx: TaskContext) -> None:
        world.point("task.start")
        day = day_of(ctx.interval)
        v = read(ctx, "clean")
        world.point("effect.before_send")
        world.receiver.deliver("notify", day, v, ctx.job_id)
        world.point("effect.after_send")

    if "same_job_id" in world.features:
        def keyed(ctx: TaskContext) -> None:
            world.point("task.start")
            day = day_of(ctx.interval)
            v = read(ctx, "clean")
            world.point("effect.before_send")
            world.receiver.deliver_keyed("keyed", day, v, ctx.job_id)
            world.point("effect.after_send")

        pipeline.task(depends_on=clean, safe_repeat="same-job-id")(keyed)  # type: ignore[arg-type]
    return pipeline, dest
