"""Job generations: the deterministic remote job ids of a unit of work, taken in order.

A new generation is taken only once every earlier one is confirmed failed, so a second remote
job never duplicates the effects of a first that may still run; see ``Ledger`` for the rules.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from twice.ledger import inserted, units
from twice.ledger.checks import count, text
from twice.ledger.errors import LedgerError
from twice.ledger.journal import event_row, insert_after_event, unit_entries, update_after_event
from twice.ledger.prepared import prepare, rows_where, run
from twice.ledger.records import (
    GENERATION_STATES,
    GenerationState,
    JobGenerationRecord,
    UnitRecord,
)
from twice.ledger.rows import GENERATION, first
from twice.ledger.schema import job_generations
from twice.ledger.session import Session

# Which generation states may follow which: late evidence may show a job confirmed failed
# (e.g. after jobs.cancel) did finish, never the other way round.
_GENERATION_TRANSITIONS: dict[str, frozenset[str]] = {
    "active": frozenset({"active", "confirmed-failed", "succeeded"}),
    "confirmed-failed": frozenset({"confirmed-failed", "succeeded"}),
    "succeeded": frozenset({"succeeded"}),
}


_JOB_OWNER = prepare(select(job_generations.c.uow_id).where(
    job_generations.c.job_id == bindparam("job_id")))


class GenerationStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self, uow_id: str, generation: int | None, *, job_id: str | None, supersede: bool
    ) -> JobGenerationRecord:
        with self._session.write() as conn:
            unit = units.require(conn, uow_id, lock=True)
            return self._take(conn, unit, _generations(conn, uow_id), generation,
                              job_id=job_id, supersede=supersede)

    def for_attempt(self, uow_id: str, *, supersede: bool) -> JobGenerationRecord:
        """The generation an attempt uses: the current one until it is confirmed failed (a
        resubmission finds the existing job); a new one when there is none yet, the current
        one is confirmed failed, or ``supersede`` (a deliberate rerun). One read of the
        unit's generations, in the caller's transaction."""
        with self._session.write() as conn:
            unit = units.require(conn, uow_id, lock=True)
            existing = _generations(conn, uow_id)
            if existing and existing[-1].state != "confirmed-failed" and not supersede:
                return existing[-1]
            return self._take(conn, unit, existing, None, job_id=None, supersede=supersede)

    def _take(
        self, conn: Connection, unit: UnitRecord, existing: list[JobGenerationRecord],
        generation: int | None, *, job_id: str | None, supersede: bool,
    ) -> JobGenerationRecord:
        """``record`` once the unit's generations (``existing``) are read."""
        uow_id = unit.uow_id
        now = self._session.now()
        following = (existing[-1].generation if existing else 0) + 1
        number = (
            following if generation is None else count(generation, "generation", minimum=1)
        )
        by_number = {record.generation: record for record in existing}
        if number in by_number:
            found = by_number[number]
            if job_id is not None and job_id != found.job_id:
                raise LedgerError(
                    f"generation {number} of {uow_id} has job id {found.job_id}, not {job_id}"
                )
            return found
        if number != following:
            raise LedgerError(
                f"generations of {uow_id} are taken in order: the next is {following}, "
                f"not {number}"
            )
        settled = ("confirmed-failed", "succeeded") if supersede else ("confirmed-failed",)
        blocking = [record for record in existing if record.state not in settled]
        if blocking:
            last = blocking[-1]
            raise LedgerError(
                f"cannot take generation {number} of {uow_id}: generation {last.generation} "
                f"({last.job_id}) is {last.state}; a new generation is taken only after "
                "the earlier ones are confirmed failed"
            )
        if job_id is None:
            # derived from the unit's id, unique per unit; the UNIQUE constraint on job_id
            # still stands behind it
            job_id = unit.to_unit_of_work().job_id(number)
        else:
            job_id = text(job_id, "job_id")
            clash = run(conn, _JOB_OWNER, {"job_id": job_id}).scalar()
            if clash is not None:
                raise LedgerError(f"job id {job_id} is already used by unit of work {clash}")
        event = event_row(
            kind="job-generation",
            recorded_at=now,
            summary=f"job generation {number}: {job_id}"
            + (" (a deliberate rerun: supersedes the succeeded one)" if supersede else ""),
            uow_id=uow_id,
            data={"generation": number, "job_id": job_id, "state": "active",
                  "supersede": supersede},
        )
        row = {"uow_id": uow_id, "generation": number, "job_id": job_id, "state": "active",
               "created_at": now, "updated_at": now}
        try:
            insert_after_event(conn, event, job_generations, row)
            inserted.wrote(conn, job_generations.name, uow_id)
        except IntegrityError:  # the number is free (checked above): the job id is taken
            raise LedgerError(
                f"job id {job_id} is already used by another unit of work (taken there as "
                "an explicit job id)"
            ) from None
        return GENERATION(row)

    def mark(self, uow_id: str, generation: int, state: GenerationState) -> JobGenerationRecord:
        if state not in GENERATION_STATES:
            raise LedgerError(f"state must be one of {', '.join(GENERATION_STATES)}, got {state!r}")
        with self._session.write() as conn:
            now = self._session.now()
            units.require(conn, uow_id, lock=True)
            current = first(conn, rows_where(job_generations, "uow_id", "generation"),
                            GENERATION, params={"uow_id": uow_id, "generation": generation})
            if current is None:
                raise LedgerError(f"unit of work {uow_id} has no job generation {generation}")
            if current.state == state:
                return current
            if state not in _GENERATION_TRANSITIONS[current.state]:
                raise LedgerError(
                    f"job generation {generation} of {uow_id} is {current.state}; "
                    f"it cannot become {state}"
                )
            event = event_row(
                kind="generation-marked",
                recorded_at=now,
                summary=f"job generation {generation} ({current.job_id}) marked {state}",
                uow_id=uow_id,
                data={"generation": generation, "state": state, "previous_state": current.state},
            )
            update_after_event(conn, event, job_generations,
                               {"uow_id": uow_id, "generation": generation},
                               {"state": state, "updated_at": now})
        return replace(current, state=state, updated_at=now)

    def all(self, uow_id: str) -> list[JobGenerationRecord]:
        with self._session.read() as conn:
            return _generations(conn, uow_id)


def _generations(conn: Connection, uow_id: str) -> list[JobGenerationRecord]:
    return unit_entries(conn, job_generations, GENERATION, uow_id, job_generations.c.generation)
