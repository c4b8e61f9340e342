"""A write the PostgreSQL server rolls back on its own, as the victim of a deadlock, landed
nothing and can run again: it fails as the destination being unavailable (a transient
ending), not as the task's own error (which the executor records failed-permanent, "a retry
would fail the same way").

Found by the workers benchmark: before ``test_postgres_late_creator.py``'s fix, a deadlock
between two first writers ended one unit failed-permanent. Any other session's locks can
deadlock with a write in the same way (an operator's ``LOCK TABLE``, a migration), so the
ending must not depend on that fix."""

from __future__ import annotations

from datetime import date

import psycopg
import pytest
from tests.destinations.pg_writes import DAILY, rows, stamp, wait_until_waiting, write_in_thread

from twice.core.policy import RetryPolicy
from twice.destinations import open_destination
from twice.destinations.errors import DestinationUnavailableError
from twice.engine.attempt import classify


def test_a_write_chosen_as_a_deadlock_victim_is_unavailable_and_lands_nothing(
        postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#public.victim"
    first, second = date(2026, 11, 1), date(2026, 11, 2)
    with open_destination(spec) as dest:
        dest.replace_partition(rows(first), DAILY.interval_for(first), stamp=stamp(first, 1))
    with open_destination(spec) as writer, psycopg.connect(postgres_url) as other:
        writer.schema()
        pid = writer.connection.info.backend_pid
        # the other session holds SHARE on twice_commits (the write's commit record waits),
        # and will ask for the write's fence lock: a deadlock the write is chosen to lose
        other.execute("SET LOCAL deadlock_timeout = '60s'")
        other.execute("LOCK TABLE public.twice_commits IN SHARE MODE")

        thread, errors = write_in_thread(writer, second, 2)
        wait_until_waiting(postgres_url, pid, "relation")  # for its commit record's lock
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                      [f"twice_commits|public.victim|f/{second}"])
        other.rollback()
        thread.join(60)
    assert len(errors) == 1, errors
    error = errors[0]
    assert isinstance(error, DestinationUnavailableError), repr(error)
    assert "deadlock detected" in str(error) and "nothing landed" in str(error)
    assert isinstance(error.__cause__, psycopg.errors.DeadlockDetected)
    assert classify(error, RetryPolicy()) == "transient"
    with psycopg.connect(postgres_url) as check:
        assert check.execute("SELECT count(*) FROM twice_commits").fetchone() == (1,)
        assert check.execute("SELECT count(*) FROM public.victim WHERE day = %s",
                             [second]).fetchone() == (0,)


@pytest.mark.parametrize("state", ["40001", "40P01"])
def test_the_servers_rollbacks_are_the_ones_mapped(state: str) -> None:
    """Serialization failures and deadlocks only: the rest of SQLSTATE class 40 is not a
    retry (40002, a deferred constraint that failed at commit) or is unknown (40003)."""
    from twice.destinations.postgres import ROLLED_BACK

    assert psycopg.errors.lookup(state) in ROLLED_BACK
    assert psycopg.errors.lookup("40002") not in ROLLED_BACK
    assert psycopg.errors.lookup("40003") not in ROLLED_BACK
