"""Leases on units of work and slots of pools, safe across processes and machines.

A lease says which worker may run a unit of work now; it expires so that a crashed worker
does not block the unit forever. Taking over an expired lease is recorded as an observation
because the previous holder may still be running (or may have finished without telling us):
its running attempts become ``unknown``, which the planner must reconcile before retrying.

A pool is a named capacity around a real dependency. The sum of unexpired, unreleased
holdings never exceeds the capacity, whatever the number of free workers. Holdings are kept
after release (``released_at``) as evidence of who held which slots when; a holding that
expired without release is what a crashed or cancelled run leaves behind.

A holding can be handed over to a remote job (``hand_pool_slots_to_job``) when the attempt that
took the slots ends while its job may still run (a timeout, a lost acknowledgement, a job still
RUNNING): the dependency is still loaded by that job, so the slots stay held under a holder keyed
by the unit and attempt (``job_holder``), with no expiry, whatever happens to the process that
took them. Such a holding ends only on a confirmed end: ``release_job_pool_slots`` when a
reconcile observes the job succeeded, failed or not found, or, at any later acquisition of the
pool, once the ledger shows the attempt closed (settled by reconcile or resolved by an operator
with ``twice resolve``).

A lease's ``token`` is a fencing token. Units of work that write the same destination slot
(a rerun, a backfill with a new transform version) compare tokens, so they come from one
ledger-wide sequence (``next_fencing_token``): every acquisition that is not a renewal by the
active holder (a fresh lease, one released or expired, a takeover, the same holder coming back
after its own release or expiry) takes the next value; a renewal keeps its token. An
acquisition that starts after another committed always gets a larger token. On PostgreSQL the
value is taken only once the lease row is locked, so two acquisitions of one unit are ordered
by that lock; acquisitions of different units that run concurrently may commit out of token
order, which fencing does not care about (neither is "later" than the other). A rolled-back
acquisition leaves a gap: tokens are increasing, not dense.

These functions run inside a write transaction supplied by the ``Ledger``: on SQLite it began
with ``BEGIN IMMEDIATE`` (one writer at a time), on PostgreSQL they lock the rows they decide on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Label,
    bindparam,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from twice.ledger import inserted, lease_holders, units
from twice.ledger.claims import BATCH as CLAIM_BATCH
from twice.ledger.claims import ClaimState, claim_states
from twice.ledger.engine import insert_ignore, is_postgres, lock_key
from twice.ledger.errors import LedgerError
from twice.ledger.journal import insert_observation
from twice.ledger.prepared import prepare, rows_where, run, updated_where
from twice.ledger.records import (
    LEASE_SOURCE,
    LEASE_TAKEOVER_STATE,
    LeaseRecord,
    LeaseResult,
    PoolHolding,
)
from twice.ledger.rows import HOLDING, LEASE, first
from twice.ledger.schema import (
    LEASE_TOKEN_COUNTER,
    LEASE_TOKEN_SEQUENCE,
    attempts,
    counters,
    leases,
    pool_holdings,
)
from twice.ledger.session import Session, transaction_memo

Clock = Callable[[], datetime]
T = TypeVar("T")


#: The longest lease or pool-slot TTL: a dead holder blocks its unit for at most this long
#: (the CLI's ``--lease-ttl`` and ``--pool-ttl`` range); more would overflow the clock.
MAX_TTL_SECONDS = 86_400.0


def _ttl(ttl_seconds: float) -> timedelta:
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float):
        raise LedgerError(f"ttl_seconds must be a number of seconds, got {ttl_seconds!r}")
    if not 0 < ttl_seconds <= MAX_TTL_SECONDS:  # NaN fails too
        raise LedgerError(f"ttl_seconds must be > 0 and at most {MAX_TTL_SECONDS:g} (a day), "
                          f"got {ttl_seconds!r}")
    return timedelta(seconds=ttl_seconds)


def _holder(holder: str) -> str:
    if not isinstance(holder, str) or not holder:
        raise LedgerError("holder must be a non-empty string naming the worker")
    return holder


def get_lease(conn: Connection, uow_id: str, *, for_update: bool = False) -> LeaseRecord | None:
    if inserted.known_empty(conn, leases.name, uow_id):
        return None
    return first(conn, rows_where(leases, "uow_id", lock=for_update), LEASE,
                 params={"uow_id": uow_id})


_NEXT_SEQUENCE_TOKEN = prepare(text(f"SELECT nextval('{LEASE_TOKEN_SEQUENCE}')"))
#: The next fencing token as an expression another statement returns (PostgreSQL): an
#: attempt's INSERT takes its token with it (``AttemptStore.begin_fenced``).
NEXT_TOKEN_VALUE: Label[Any] = literal_column(
    f"nextval('{LEASE_TOKEN_SEQUENCE}')").label("fencing_token")
_NEXT_TOKEN = prepare(
    update(counters)
    .where(counters.c.name == LEASE_TOKEN_COUNTER)
    .values(value=counters.c.value + 1)
    .returning(counters.c.value)
)


#: PostgreSQL: ``INSERT`` a unit's first lease row with the next token of the sequence, unless
#: the row exists; returns the token when it inserted the row.
_INSERT_NEW_LEASE = prepare(
    pg_insert(leases)
    .values({**{name: bindparam(name, type_=leases.c[name].type)
                for name in ("uow_id", "holder", "acquired_at", "renewed_at", "expires_at",
                             "released_at")},
             "token": literal_column(f"nextval('{LEASE_TOKEN_SEQUENCE}')")})
    .on_conflict_do_nothing()
    .returning(leases.c.token)
)


def next_fencing_token(conn: Connection) -> int:
    """The next value of the ledger-wide lease token sequence (1 in a new ledger).

    PostgreSQL: ``nextval`` of a ``CACHE 1`` sequence, atomic across sessions and never handing
    out a value twice, without a row lock held until commit. SQLite: the counter row, updated
    inside the ``BEGIN IMMEDIATE`` write transaction that already excludes every other writer.
    """
    if is_postgres(conn):
        return int(run(conn, _NEXT_SEQUENCE_TOKEN).scalar())
    value = run(conn, _NEXT_TOKEN).scalar()
    if value is None:
        raise LedgerError(
            f"the ledger has no {LEASE_TOKEN_COUNTER!r} counter: its schema is incomplete"
        )
    return int(value)


def fencing_token_above(conn: Connection, floor: int) -> int:
    """The next value of the lease token sequence, moved past ``floor`` first when it is not
    already (a sequence only moves forward: tokens already handed out stay below)."""
    if is_postgres(conn):
        conn.execute(text(
            f"SELECT setval('{LEASE_TOKEN_SEQUENCE}', GREATEST(:floor, "
            f"(SELECT last_value FROM {LEASE_TOKEN_SEQUENCE})))"), {"floor": floor})
    else:
        conn.execute(update(counters).where(counters.c.name == LEASE_TOKEN_COUNTER)
                     .values(value=func.max(counters.c.value, floor)))
    return next_fencing_token(conn)


def acquire_lease(
    conn: Connection, *, uow_id: str, holder: str, ttl_seconds: float, clock: Clock
) -> LeaseResult:
    """Take the lease if it is free, released, expired, or already ours (then it is extended).

    A new holding (anything but extending our own active lease) takes the next fencing token.
    The row stays locked to the end of the transaction, which remembers who holds it
    (``holder_in_transaction``).
    """
    result = _acquire(conn, uow_id=uow_id, holder=holder, ttl_seconds=ttl_seconds, clock=clock)
    held: dict[str, str] = transaction_memo(conn, "twice_lease_holders", dict)
    if result.acquired:
        held[uow_id] = result.holder
    else:
        held.pop(uow_id, None)
    return result


def holder_in_transaction(conn: Connection, uow_id: str) -> str | None:
    """Who took the unit's lease earlier in this transaction (None: it was not taken here).
    Nobody else can change the row before the transaction ends: SQLite's writers are
    serialised, and PostgreSQL's row stays locked ``FOR NO KEY UPDATE``."""
    held: dict[str, str] = transaction_memo(conn, "twice_lease_holders", dict)
    return held.get(uow_id)


def _locked(conn: Connection, uow_id: str, holder: str, ttl_seconds: float
            ) -> tuple[str, timedelta, LeaseRecord | None]:
    """The holder and ttl checked, and the unit's lease row (if any) locked until the
    transaction ends: what taking and renewing a lease start from."""
    return _holder(holder), _ttl(ttl_seconds), get_lease(conn, uow_id, for_update=True)


def _acquire(
    conn: Connection, *, uow_id: str, holder: str, ttl_seconds: float, clock: Clock
) -> LeaseResult:
    holder, ttl, current = _locked(conn, uow_id, holder, ttl_seconds)
    if current is None:
        now = clock()
        expires_at = now + ttl
        fresh = {
            "uow_id": uow_id,
            "holder": holder,
            "acquired_at": now,
            "renewed_at": now,
            "expires_at": expires_at,
            "released_at": None,
        }
        if is_postgres(conn):  # the token drawn in the INSERT itself: one round trip
            token = run(conn, _INSERT_NEW_LEASE, fresh).scalar()
            taken = token is not None
        else:
            token = next_fencing_token(conn)
            taken = insert_ignore(conn, leases, {**fresh, "token": token})
        inserted.wrote(conn, leases.name, uow_id)
        if taken:
            return LeaseResult(acquired=True, holder=holder, expires_at=expires_at,
                               token=int(token))
        # PostgreSQL: another transaction inserted the row first and we waited for its commit.
        # The token taken above is dropped (a gap): one taken before the row was locked could
        # be lower than the winner's.
        current = get_lease(conn, uow_id, for_update=True)
    if current is None:  # rows are never deleted, so the insert above conflicted with a row
        raise LedgerError(f"lease row of {uow_id} vanished during acquisition")
    # Judge expiry when the row is locked: we may have waited for another holder's commit.
    now = clock()
    expires_at = now + ttl

    if in_force(current, now):
        if current.holder != holder:
            return LeaseResult(
                acquired=False,
                holder=current.holder,
                expires_at=current.expires_at,
                token=current.token,
            )
        return _extend(conn, current, now=now, expires_at=expires_at)

    taken_over_from = None
    if current.released_at is None and current.holder != holder:
        taken_over_from = current.holder
        _record_takeover(conn, current, new_holder=holder, now=now,
                         exited=current.active(now))
    token = next_fencing_token(conn)
    conn.execute(
        update(leases)
        .where(leases.c.uow_id == uow_id)
        .values(holder=holder, token=token, acquired_at=now, renewed_at=now,
                expires_at=expires_at, released_at=None)
    )
    return LeaseResult(
        acquired=True,
        holder=holder,
        expires_at=expires_at,
        token=token,
        taken_over_from=taken_over_from,
    )


def in_force(lease: LeaseRecord, now: datetime) -> bool:
    """Whether ``lease`` still holds its unit: active, and its holder not a process of this
    host that has exited (:mod:`twice.ledger.lease_holders`)."""
    return lease.active(now) and not lease_holders.exited(lease.holder)


def _record_takeover(
    conn: Connection, previous: LeaseRecord, *, new_holder: str, now: datetime,
    exited: bool = False,
) -> None:
    """The previous holder's running attempts now have an unknown outcome; say so and why."""
    running = [
        row.number
        for row in conn.execute(
            select(attempts.c.number)
            .where(
                attempts.c.uow_id == previous.uow_id,
                attempts.c.holder == previous.holder,
                attempts.c.outcome == "running",
            )
            .order_by(attempts.c.number)
        )
    ]
    if running:
        from twice.ledger.attempts import changed  # attempts imports this module

        conn.execute(
            update(attempts)
            .where(attempts.c.uow_id == previous.uow_id, attempts.c.number.in_(running))
            .values(outcome="unknown")
        )
        changed(conn, previous.uow_id)
    why = ("its process on this host has exited" if exited
           else f"expired {previous.expires_at.isoformat()}")
    summary = f"lease taken over by {new_holder} from {previous.holder} ({why})"
    if running:
        summary += "; outcome of attempt " + ", ".join(map(str, running)) + " is now unknown"
    insert_observation(
        conn,
        uow_id=previous.uow_id,
        state=LEASE_TAKEOVER_STATE,
        source=LEASE_SOURCE,
        observed_at=now,
        recorded_at=now,
        attempt=running[-1] if running else None,
        detail={
            "previous_holder": previous.holder,
            "previous_token": previous.token,
            "expired_at": previous.expires_at,
            "holder_exited": exited,
            "new_holder": new_holder,
            "attempts_now_unknown": running,
        },
        kind="lease-takeover",
        summary=summary,
    )


def renew_lease(
    conn: Connection, *, uow_id: str, holder: str, ttl_seconds: float, clock: Clock
) -> LeaseResult:
    """Extend our unexpired lease; an expired one must be re-acquired (someone may have it)."""
    holder, ttl, current = _locked(conn, uow_id, holder, ttl_seconds)
    now = clock()
    expires_at = now + ttl
    if current is None:
        return LeaseResult(acquired=False, holder="", expires_at=now)
    if current.holder == holder and current.active(now):
        return _extend(conn, current, now=now, expires_at=expires_at)
    return LeaseResult(
        acquired=False,
        holder=current.holder if current.active(now) else "",
        expires_at=current.expires_at,
        token=current.token,
    )


def _extend(
    conn: Connection, current: LeaseRecord, *, now: datetime, expires_at: datetime
) -> LeaseResult:
    """Extend the holder's own active lease until ``expires_at``: a renewal keeps the token."""
    conn.execute(
        update(leases)
        .where(leases.c.uow_id == current.uow_id)
        .values(renewed_at=now, expires_at=expires_at)
    )
    return LeaseResult(acquired=True, holder=current.holder, expires_at=expires_at,
                       token=current.token)


def release_lease(conn: Connection, *, uow_id: str, holder: str, clock: Clock) -> bool:
    """Give the lease back; False if ``holder`` did not hold it (nothing is changed then)."""
    return run(conn, *releasing(uow_id, holder, clock())).rowcount == 1


def releasing(uow_id: str, holder: str, now: datetime) -> tuple[Any, dict[str, Any]]:
    """:func:`release_lease`'s statement and parameters, to run with others
    (``prepared.run_together``)."""
    return updated_where(leases, {"uow_id": uow_id, "holder": _holder(holder)},
                         {"released_at": now}, null=("released_at",))


def _active(pool: str, now: datetime) -> tuple[ColumnElement[bool], ...]:
    return (
        pool_holdings.c.pool == pool,
        pool_holdings.c.released_at.is_(None),
        pool_holdings.c.expires_at > now,
    )


#: Holders of slots kept for a remote job start with this; see ``job_holder``.
JOB_HOLDER_PREFIX = "job:"
#: A job's holding never expires by time: it ends on a confirmed end of the job (or an operator's
#: resolution of its attempt), never because nobody renewed it.
JOB_HOLDING_EXPIRES = datetime(9999, 1, 1, tzinfo=UTC)
_JOB_ATTEMPT_SEPARATOR = "#attempt-"
#: Attempt outcomes under which a job may still be running: its holding stays.
_JOB_MAY_RUN = ("running", "unknown")


def job_holder(uow_id: str, attempt: int) -> str:
    """The holder key of slots kept for the job of ``uow_id``'s attempt ``attempt``."""
    return f"{JOB_HOLDER_PREFIX}{uow_id}{_JOB_ATTEMPT_SEPARATOR}{attempt}"


def job_of_holder(holder: str) -> tuple[str, int] | None:
    """``(uow_id, attempt)`` of a holder made by ``job_holder``; None for any other holder."""
    if not holder.startswith(JOB_HOLDER_PREFIX):
        return None
    uow_id, separator, number = holder[len(JOB_HOLDER_PREFIX):].rpartition(
        _JOB_ATTEMPT_SEPARATOR
    )
    if not separator or not uow_id or not number.isdigit():
        return None
    return uow_id, int(number)


def _release_ended_jobs(conn: Connection, pool: str, now: datetime) -> None:
    """Release job holdings of ``pool`` whose attempt the ledger shows closed (reconciled, or
    resolved by an operator): the job is no longer running, by evidence or assertion."""
    rows = conn.execute(
        select(pool_holdings.c.id, pool_holdings.c.holder).where(
            *_active(pool, now), pool_holdings.c.holder.startswith(JOB_HOLDER_PREFIX)
        )
    ).all()
    ended = []
    for row in rows:
        job = job_of_holder(row.holder)
        if job is None:
            continue
        outcome = conn.execute(
            select(attempts.c.outcome).where(
                attempts.c.uow_id == job[0], attempts.c.number == job[1]
            )
        ).scalar_one_or_none()
        if outcome is not None and outcome not in _JOB_MAY_RUN:
            ended.append(row.id)
    if ended:
        conn.execute(
            update(pool_holdings).where(pool_holdings.c.id.in_(ended)).values(released_at=now)
        )


def hand_pool_slots_to_job(
    conn: Connection, *, pool: str, holder: str, job: str, clock: Clock
) -> int:
    """Give ``holder``'s unexpired holding of ``pool`` to ``job`` (a ``job_holder`` key), with
    no expiry; returns the slots handed over (0 if the holding had expired or was released)."""
    if job_of_holder(_holder(job)) is None:
        raise LedgerError(f"{job!r} is not a job holder (see job_holder)")
    return _pass_holding(conn, pool, holder, job, lambda _now: JOB_HOLDING_EXPIRES, clock)


def take_pool_slots_from_job(
    conn: Connection, *, pool: str, job: str, holder: str, ttl_seconds: float, clock: Clock
) -> int:
    """The reverse of :func:`hand_pool_slots_to_job`: ``job``'s holding of ``pool`` becomes
    ``holder``'s again, expiring ``ttl_seconds`` from now unless renewed (the job is confirmed
    ended, but the attempt's work still runs in the process behind ``holder``). Returns the
    slots taken back (0: nothing was kept for the job)."""
    return _pass_holding(conn, pool, job, holder,
                         lambda now: now + timedelta(seconds=ttl_seconds), clock)


def _pass_holding(conn: Connection, pool: str, giver: str, taker: str,
                  expires: Callable[[datetime], datetime], clock: Clock) -> int:
    """Re-key ``giver``'s unexpired holding of ``pool`` to ``taker``, expiring at
    ``expires(now)``, under the pool's lock; returns the slots passed on."""
    giver, taker = _holder(giver), _holder(taker)
    lock_key(conn, "pool", pool)
    now = clock()
    held = conn.execute(
        select(pool_holdings.c.id, pool_holdings.c.slots).where(
            *_active(pool, now), pool_holdings.c.holder == giver
        )
    ).all()
    if not held:
        return 0
    conn.execute(
        update(pool_holdings)
        .where(pool_holdings.c.id.in_([row.id for row in held]))
        .values(holder=taker, expires_at=expires(now))
    )
    return int(sum(row.slots for row in held))


def release_job_pool_slots(
    conn: Connection, *, uow_id: str, clock: Clock, attempt: int | None = None
) -> list[PoolHolding]:
    """Release the holdings kept for the jobs of ``uow_id`` (of ``attempt`` only, if given),
    in every pool: the job is confirmed ended. Returns the holdings released."""
    now = clock()
    query = select(pool_holdings).where(
        pool_holdings.c.released_at.is_(None),
        pool_holdings.c.holder.startswith(f"{JOB_HOLDER_PREFIX}{uow_id}{_JOB_ATTEMPT_SEPARATOR}"),
    )
    candidates = [HOLDING(row) for row in conn.execute(query).mappings().all()]
    held = [
        holding for holding in candidates
        if (job := job_of_holder(holding.holder)) is not None and job[0] == uow_id
        and attempt in (None, job[1])
    ]
    for pool in sorted({holding.pool for holding in held}):
        lock_key(conn, "pool", pool)
    if held:
        conn.execute(
            update(pool_holdings)
            .where(pool_holdings.c.id.in_([holding.id for holding in held]))
            .values(released_at=now)
        )
    return held


def list_job_pool_holdings(conn: Connection, *, uow_id: str, now: datetime) -> list[PoolHolding]:
    """Unreleased holdings kept for the jobs of ``uow_id`` (any pool, any attempt)."""
    query = select(pool_holdings).where(
        pool_holdings.c.released_at.is_(None), pool_holdings.c.expires_at > now,
        pool_holdings.c.holder.startswith(f"{JOB_HOLDER_PREFIX}{uow_id}{_JOB_ATTEMPT_SEPARATOR}"),
    )
    rows = conn.execute(query.order_by(pool_holdings.c.id)).mappings().all()
    found = [HOLDING(row) for row in rows]
    return [h for h in found if (job := job_of_holder(h.holder)) and job[0] == uow_id]


def acquire_pool_slots(
    conn: Connection,
    *,
    pool: str,
    capacity: int,
    slots: int,
    holder: str,
    ttl_seconds: float,
    clock: Clock,
) -> bool:
    """Hold ``slots`` of ``pool`` if they fit beside everyone else's unexpired holdings.

    A holder that already holds slots of the pool has its holding resized and extended. Job
    holdings whose attempt the ledger shows closed are released first (``_release_ended_jobs``).
    """
    holder = _holder(holder)
    if not isinstance(pool, str) or not pool:
        raise LedgerError("pool must be a non-empty string")
    for name, value in (("capacity", capacity), ("slots", slots)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LedgerError(f"pool {pool!r}: {name} must be an integer >= 1, got {value!r}")
    if slots > capacity:
        raise LedgerError(f"pool {pool!r}: {slots} slots can never fit in a capacity of {capacity}")
    ttl = _ttl(ttl_seconds)
    lock_key(conn, "pool", pool)
    now = clock()  # after the lock: expiry is judged when no other acquirer can interleave
    expires_at = now + ttl
    _release_ended_jobs(conn, pool, now)
    rows = conn.execute(select(pool_holdings).where(*_active(pool, now))).mappings().all()
    active = _without_exited([HOLDING(row) for row in rows], conn, now)
    capacities = {holding.capacity for holding in active}
    if capacities - {capacity}:
        raise LedgerError(
            f"pool {pool!r} is held with capacity {sorted(capacities)[0]}, this request says "
            f"{capacity}: every user of a pool must declare the same capacity"
        )
    mine = [holding for holding in active if holding.holder == holder]
    others = sum(holding.slots for holding in active if holding.holder != holder)
    if others + slots > capacity:
        return False
    if mine:
        conn.execute(
            update(pool_holdings)
            .where(pool_holdings.c.id == mine[0].id)
            .values(slots=slots, expires_at=expires_at)
        )
    else:
        conn.execute(
            pool_holdings.insert().values(pool=pool, holder=holder, slots=slots,
                                          capacity=capacity, acquired_at=now,
                                          expires_at=expires_at, released_at=None)
        )
    return True


def _without_exited(active: list[PoolHolding], conn: Connection, now: datetime
                    ) -> list[PoolHolding]:
    """``active`` without the holdings of processes of this host that no longer run (a
    killed worker): released now, as a unit's lease is taken over at once, instead of
    blocking the pool until their expiry. A remote job's holding (``job:``) is the job's and
    stays; a holder another host or a person named is never judged."""
    gone = [h for h in active
            if not h.holder.startswith(JOB_HOLDER_PREFIX) and lease_holders.exited(h.holder)]
    if gone:
        conn.execute(update(pool_holdings)
                     .where(pool_holdings.c.id.in_([h.id for h in gone]))
                     .values(released_at=now))
    return [h for h in active if h not in gone]


def release_pool_slots(conn: Connection, *, pool: str, holder: str, clock: Clock) -> int:
    """Release ``holder``'s holdings of ``pool``; returns the unexpired slots given back."""
    holder = _holder(holder)
    lock_key(conn, "pool", pool)
    now = clock()
    freed = conn.execute(
        select(func.coalesce(func.sum(pool_holdings.c.slots), 0)).where(
            *_active(pool, now), pool_holdings.c.holder == holder
        )
    ).scalar_one()
    conn.execute(
        update(pool_holdings)
        .where(
            pool_holdings.c.pool == pool,
            pool_holdings.c.holder == holder,
            pool_holdings.c.released_at.is_(None),
        )
        .values(released_at=now)
    )
    return int(freed)


def list_pool_holdings(
    conn: Connection, *, pool: str, now: datetime, active_only: bool
) -> list[PoolHolding]:
    query = select(pool_holdings).where(pool_holdings.c.pool == pool)
    if active_only:
        query = query.where(*_active(pool, now))
    rows = conn.execute(query.order_by(pool_holdings.c.id)).mappings().all()
    return [HOLDING(row) for row in rows]


class LeaseStore:
    """Leases and pool slots, each call in its own write transaction (or the caller's)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def acquire(self, uow_id: str, holder: str, ttl_seconds: float) -> LeaseResult:
        return self._of_unit(acquire_lease, uow_id, holder=holder, ttl_seconds=ttl_seconds)

    def renew(self, uow_id: str, holder: str, ttl_seconds: float) -> LeaseResult:
        return self._of_unit(renew_lease, uow_id, holder=holder, ttl_seconds=ttl_seconds)

    def release(self, uow_id: str, holder: str) -> bool:
        return self._clocked(release_lease, uow_id=uow_id, holder=holder)

    def next_token(self) -> int:
        with self._session.write() as conn:
            return next_fencing_token(conn)

    def token_above(self, floor: int) -> int:
        with self._session.write() as conn:
            return fencing_token_above(conn, floor)

    def get(self, uow_id: str) -> LeaseRecord | None:
        with self._session.read() as conn:
            return get_lease(conn, uow_id)

    def claim_states(self, uow_ids: Sequence[str],
                     slots: Mapping[str, tuple[str, str]] | None = None
                     ) -> dict[str, ClaimState]:
        """``twice.ledger.claims.claim_states`` in one snapshot (on PostgreSQL, up to ``BATCH``
        units are one statement, its own snapshot: no transaction, no BEGIN and COMMIT)."""
        if self._session.dialect == "postgresql" and len(set(uow_ids)) <= CLAIM_BATCH:
            with self._session.read() as conn:
                return claim_states(conn, uow_ids, slots)
        with self._session.snapshot(), self._session.read() as conn:
            return claim_states(conn, uow_ids, slots)

    def acquire_slots(
        self, pool: str, capacity: int, slots: int, holder: str, ttl_seconds: float
    ) -> bool:
        return self._clocked(acquire_pool_slots, pool=pool, capacity=capacity, slots=slots,
                             holder=holder, ttl_seconds=ttl_seconds)

    def release_slots(self, pool: str, holder: str) -> int:
        return self._clocked(release_pool_slots, pool=pool, holder=holder)

    def hand_slots_to_job(self, pool: str, holder: str, job: str) -> int:
        return self._clocked(hand_pool_slots_to_job, pool=pool, holder=holder, job=job)

    def take_slots_from_job(self, pool: str, job: str, holder: str, ttl_seconds: float
                            ) -> int:
        return self._clocked(take_pool_slots_from_job, pool=pool, job=job, holder=holder,
                             ttl_seconds=ttl_seconds)

    def release_job_slots(self, uow_id: str, attempt: int | None = None) -> list[PoolHolding]:
        return self._clocked(release_job_pool_slots, uow_id=uow_id, attempt=attempt)

    def job_holdings(self, uow_id: str) -> list[PoolHolding]:
        with self._session.read() as conn:
            return list_job_pool_holdings(conn, uow_id=uow_id, now=self._session.now())

    def holdings(self, pool: str, *, active_only: bool) -> list[PoolHolding]:
        with self._session.read() as conn:
            return list_pool_holdings(
                conn, pool=pool, now=self._session.now(), active_only=active_only
            )

    def _of_unit(self, fn: Callable[..., T], uow_id: str, **arguments: Any) -> T:
        """``fn`` on the lease of an existing unit of work."""
        with self._session.write() as conn:
            units.require(conn, uow_id)
            return fn(conn, uow_id=uow_id, clock=self._session.now, **arguments)

    def _clocked(self, fn: Callable[..., T], **arguments: Any) -> T:
        with self._session.write() as conn:
            return fn(conn, clock=self._session.now, **arguments)
