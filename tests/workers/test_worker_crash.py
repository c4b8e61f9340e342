"""A worker killed with SIGKILL mid-attempt, then another worker on the same PostgreSQL ledger.

Three crashes run side by side (one interval each), then one survivor per crash:

- ``load`` killed AFTER its destination write: the survivor takes the expired lease over, the
  ledger records the attempt ``unknown`` with the takeover evidence, reconcile finds the rows
  of that job id with the expected fingerprint, and nothing is executed again;
- ``load`` killed BEFORE its write: reconcile finds no rows of that job id (not-found), so the
  same job id is submitted again, once, and the destination holds the rows once;
- ``notify`` (no reconcile, not safe to repeat) killed after its effect: left ``unknown``,
  reported, never retried.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import pytest
from click.testing import CliRunner

from tests.workers.pipelines.twice_w_side import amounts
from tests.workers.worker_procs import PIPELINES, fresh_database, rows, start, wait_until
from twice.cli import cli
from twice.define.load import load_pipeline
from twice.define.schedule import Schedule
from twice.ledger import LEASE_TAKEOVER_STATE, Ledger

pytestmark = pytest.mark.postgres

TTL = "2"
CASES = {
    # name: (task, day, pause variable, phase reached when killed)
    "after-write": ("load", date(2026, 11, 10), "TWICE_W_PAUSE_AFTER", "written"),
    "before-write": ("load", date(2026, 11, 11), "TWICE_W_PAUSE_BEFORE", "started"),
    "no-reconcile": ("notify", date(2026, 11, 12), "TWICE_W_PAUSE_AFTER", "written"),
}


@dataclass(frozen=True)
class Crash:
    url: str
    uow_id: str
    task: str
    day: date
    victim: str
    code: int
    report: dict[str, Any]

    def unit(self) -> dict[str, Any]:
        [unit] = self.report["units"]
        return unit  # type: ignore[no-any-return]

    def executions(self) -> list[tuple[Any, ...]]:
        return rows(self.url, "SELECT pid, attempt, job_id, phase FROM w_executions "
                    "WHERE task = %s AND day = %s ORDER BY id", (self.task, self.day))

    def explain(self) -> str:
        result = CliRunner().invoke(cli, ["explain", self.uow_id, "--ledger", self.url])
        assert result.exit_code == 0, result.output
        return result.output


@pytest.fixture(scope="module")
def crashes() -> Iterator[dict[str, Crash]]:
    with fresh_database() as url:
        pipeline = load_pipeline(PIPELINES / "w_crash.py")
        schedule = Schedule.daily("UTC")
        victims = {}
        for case, (task, day, pause, _) in CASES.items():
            victims[case] = start(
                "w_crash.py", url, url, f"victim-{case}", "--tasks", task, "--interval",
                day.isoformat(), "--lease-ttl", TTL, env={pause: "120"},
            )
        uow_ids = {
            case: pipeline.unit_of_work(task, schedule.interval_for(day)).uow_id
            for case, (task, day, _, _) in CASES.items()
        }
        with Ledger.open(url) as ledger:
            for case, (task, day, _, phase) in CASES.items():
                def reached(case: str = case, task: str = task, day: date = day,
                            phase: str = phase) -> bool:
                    if ledger.unit(uow_ids[case]) is None:
                        return False
                    latest = ledger.latest_attempt(uow_ids[case])
                    done = rows(url, "SELECT 1 FROM w_executions WHERE task = %s AND day = %s "
                                "AND phase = %s", (task, day, phase))
                    return latest is not None and latest.outcome == "running" and bool(done)

                wait_until(reached, 60, f"{case}: attempt running and phase {phase}")
                victims[case].proc.kill()  # SIGKILL: no cleanup, the lease is left behind
                victims[case].proc.wait(10)
            for uow_id in uow_ids.values():
                lease = ledger.lease(uow_id)
                assert lease is not None and lease.released_at is None  # died holding it
                assert [a.outcome for a in ledger.attempts(uow_id)] == ["running"]
        survivors = {
            case: start("w_crash.py", url, url, f"survivor-{case}", "--tasks", task,
                        "--interval", day.isoformat(), "--lease-ttl", TTL, "--poll", "0.2")
            for case, (task, day, _, _) in CASES.items()
        }
        results = {}
        for case, proc in survivors.items():
            code, report = proc.finish()
            task, day, _, _ = CASES[case]
            results[case] = Crash(url, uow_ids[case], task, day, f"victim-{case}", code, report)
        yield results


def _takeover(ledger: Ledger, crash: Crash) -> dict[str, Any]:
    [seen] = [o for o in ledger.observations(crash.uow_id) if o.state == LEASE_TAKEOVER_STATE]
    assert seen.detail["previous_holder"] == crash.victim
    assert seen.detail["new_holder"] == f"survivor-{crash.victim.removeprefix('victim-')}"
    assert seen.detail["attempts_now_unknown"] == [1]
    return dict(seen.detail)


def test_killed_after_write_is_reconciled_not_rerun(crashes: dict[str, Crash]) -> None:
    crash = crashes["after-write"]
    assert crash.code == 0, crash.report
    unit = crash.unit()
    assert unit["settlement"] == "ran" and unit["outcome"] == "succeeded"
    assert unit["result"]["attempts"] == 0  # the survivor started no attempt of its own
    assert any("took over the expired lease of victim-after-write" in note
               for note in unit["result"]["notes"])
    [(_pid, attempt, job_id, phase)] = crash.executions()  # executed once: by the victim
    assert attempt == 1 and phase == "written"
    written = rows(crash.url, "SELECT day, account, amount, job_id FROM w_positions "
                   "WHERE day = %s", (crash.day,))
    expected = [(r["day"], r["account"], r["amount"], job_id) for r in amounts(crash.day)]
    assert Counter(written) == Counter(expected)
    with Ledger.open(crash.url) as ledger:
        _takeover(ledger, crash)
        [attempt_1] = ledger.attempts(crash.uow_id)
        assert attempt_1.holder == crash.victim and attempt_1.outcome == "succeeded"
        assert attempt_1.job_id == job_id
        states = [(o.source, o.state) for o in ledger.observations(crash.uow_id)]
        assert ("reconcile", "succeeded") in states
    text = crash.explain()
    assert "taken over by survivor-after-write from victim-after-write" in text
    assert "is now unknown" in text


def test_killed_before_write_resubmits_the_same_job_once(crashes: dict[str, Crash]) -> None:
    crash = crashes["before-write"]
    assert crash.code == 0, crash.report
    unit = crash.unit()
    assert unit["outcome"] == "succeeded" and unit["result"]["attempts"] == 1
    first, second = crash.executions()
    assert first[3] == "started" and second[3] == "ended"
    assert first[2] == second[2]  # the same client-selected job id, not a new job
    written = rows(crash.url, "SELECT day, account, amount, job_id FROM w_positions "
                   "WHERE day = %s", (crash.day,))
    expected = [(r["day"], r["account"], r["amount"], first[2]) for r in amounts(crash.day)]
    assert Counter(written) == Counter(expected)
    with Ledger.open(crash.url) as ledger:
        _takeover(ledger, crash)
        assert [(a.holder, a.outcome) for a in ledger.attempts(crash.uow_id)] == [
            (crash.victim, "failed-transient"), ("survivor-before-write", "succeeded"),
        ]
        states = [(o.source, o.state) for o in ledger.observations(crash.uow_id)]
        # reconciled (not-found) BEFORE the second attempt began
        assert ("reconcile", "not-found") in states
        reconciled = next(o for o in ledger.observations(crash.uow_id)
                          if o.source == "reconcile")
        assert reconciled.observed_at <= ledger.attempts(crash.uow_id)[1].started_at
        errors = [e.error_class for e in ledger.errors(crash.uow_id)]
        assert "twice.engine.reconcile.RequestNeverArrived" in errors


def test_killed_without_reconcile_is_left_unknown(crashes: dict[str, Crash]) -> None:
    crash = crashes["no-reconcile"]
    assert crash.code == 1, crash.report
    unit = crash.unit()
    assert unit["outcome"] == "unknown-needs-reconcile"
    assert unit["result"]["attempts"] == 0
    assert "not retried" in unit["reason"]
    assert any("recorded unknown and left for reconciliation" in note
               for note in unit["result"]["notes"])
    assert len(crash.executions()) == 1  # never executed again
    with Ledger.open(crash.url) as ledger:
        _takeover(ledger, crash)
        assert [a.outcome for a in ledger.attempts(crash.uow_id)] == ["unknown"]
    text = crash.explain()
    assert "taken over by survivor-no-reconcile" in text
    status = CliRunner().invoke(cli, ["status", "--ledger", crash.url, "--json"])
    assert status.exit_code == 0, status.output
    [row] = [u for u in json.loads(status.stdout)["units"] if u["task"] == "notify"]
    assert row["decision"] != "retry-eligible", row
