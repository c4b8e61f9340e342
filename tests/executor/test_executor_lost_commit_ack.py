"""A destination commit whose acknowledgement is lost (the server committed, the answer never
came) leaves the attempt's outcome unknown, settled from the commit record the write made in
the same transaction: found, so the attempt succeeded and nothing runs again. Found by a
probe: it was recorded ``failed-permanent`` ("a retry would fail the same way"), and the rerun
it advised appended the rows a second time."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
import pyarrow as pa
from tests.executor.helpers import day, outcomes
from tests.executor.lost_ack_proxy import LostAckProxy

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger


def test_a_lost_commit_acknowledgement_is_settled_from_the_commit_record(
    postgres_url: str, ledger_url: str
) -> None:
    parts = urlsplit(postgres_url)
    proxy = LostAckProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    through = urlunsplit(parts._replace(netloc=parts.netloc.replace(
        f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}"))) + "?sslmode=disable"
    executed: list[int] = []
    pipeline = Pipeline("acks", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=f"{through}&partition_column=day#events", write="append",
                   retry=RetryPolicy(max_attempts=3, transient=(ConnectionError,)))
    def events(ctx: TaskContext) -> pa.Table:  # not safe_repeat: it must not run twice
        executed.append(ctx.attempt)
        return pa.table({"day": [ctx.interval.start.date()] * 3, "n": [1, 2, 3]})

    try:
        with Ledger.open(ledger_url) as ledger:
            Executor(pipeline, ledger).run(day(-1))  # creates the tables, unharmed
            proxy.armed = True
            unit = Executor(pipeline, ledger).run(day()).unit("events")
            assert proxy.dropped == 1
            assert unit.outcome == "succeeded", unit.reason
            assert outcomes(ledger, unit.uow_id)[0] in ("unknown", "succeeded")
            assert outcomes(ledger, unit.uow_id)[-1] == "succeeded"
            assert executed == [1, 1]  # one attempt per day: settled, never run again
            again = Executor(pipeline, ledger).run(day()).unit("events")
            assert again.outcome == "succeeded" and executed == [1, 1]
    finally:
        proxy.close()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT day, count(*) FROM events GROUP BY day ORDER BY day").fetchall()
    assert [count for _, count in rows] == [3, 3]


def test_a_read_whose_commit_answer_is_lost_is_read_again(postgres_url: str) -> None:
    """Found by a probe: a read-only ledger transaction whose COMMIT answer was lost was
    reported "it may or may not have been recorded, so it was not run again", aborting the
    run; a read records nothing, so it is simply read again. A plain read sends no COMMIT on
    PostgreSQL (it runs in autocommit: ``Session._start``); a read of one snapshot (REPEATABLE
    READ, several statements) does, and is read again."""
    from datetime import UTC, datetime

    from tests.ledger.ledger_helpers import make_uow

    from twice.ledger.ranges import range_facts

    parts = urlsplit(postgres_url)
    proxy = LostAckProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    through = urlunsplit(parts._replace(netloc=parts.netloc.replace(
        f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}"))) + "?sslmode=disable"
    try:
        with Ledger.open(through) as ledger:
            unit = make_uow(1)
            uow = ledger.record_unit(unit).uow_id
            proxy.any_commit = proxy.armed = True
            assert [unit.uow_id for unit in ledger.units()] == [uow]
            assert proxy.dropped == 0  # no COMMIT to lose
            start = datetime(2026, 11, 1, tzinfo=UTC)
            facts = range_facts(ledger, unit.pipeline, start, datetime(2026, 11, 30, tzinfo=UTC),
                                [], [unit.task])
            assert [found.uow_id for found in facts.units] == [uow]
            assert proxy.dropped == 1
    finally:
        proxy.close()


def test_the_lost_commit_message_names_a_driver_error_without_text() -> None:
    """A driver error with no message still gives a message (the embedded engines' first
    version indexed the first line of an empty text), with its password masked."""
    from twice.destinations.errors import DestinationCommitUnknownError

    empty = DestinationCommitUnknownError.of("sqlite:///w.db#t", "committing failed", OSError())
    assert "(OSError)" in str(empty) and empty.outcome == "unknown"
    said = DestinationCommitUnknownError.of(
        "p#t", "lost", OSError("server at postgresql://u:pw@h/db closed\nmore"))
    assert "pw@" not in str(said) and "more" not in str(said)
