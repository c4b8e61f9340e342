"""The source documents' own examples, run with twice's API.

- Indonesian chapter, retry decorator: ``ambil_data_api`` fails twice with ConnectionError then
  succeeds, ``baca_konfigurasi`` raises ValueError and is never retried; the waits are the
  chapter's ``jeda + uniform(0, jeda * 0.25)`` (twice's additive jitter), 0.2 s then 0.4 s.
- Indonesian chapter, timeout: ``muat_tabel`` takes 1.0 s against a 0.3 s limit. twice records
  the timeout as an UNKNOWN outcome (the work may still finish), never as a plain failure.
- The lab's boundary exercises through the Python API (``twice.decide``): a future observation,
  a finish time after the observation, a finish time while unconfirmed, attempts from 1.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import twice
from twice.core.backoff import jitter_bounds
from twice.core.decision import DecisionWindow, EvidenceError, TaskEvidence, TaskState
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.errors import InputError
from twice.ledger import Ledger

# retry(maks_percobaan=3, jeda_awal=0.2, faktor=2.0, galat_transien=(ConnectionError,))
CHAPTER = RetryPolicy(max_attempts=3, initial_delay=0.2, multiplier=2.0, max_delay=60,
                      jitter="additive", transient=(ConnectionError,))


def test_retry_decorator_scenario_with_additive_jitter() -> None:
    sleeps: list[float] = []
    calls = {"n": 0}

    @twice.retry(CHAPTER, sleep=sleeps.append, rng=random.Random(42))
    def ambil_data_api(sumber: str) -> str:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError(f"koneksi ke {sumber} terputus")
        return f"data dari {sumber}"

    assert ambil_data_api("api.example.com") == "data dari api.example.com"
    assert calls["n"] == 3  # attempts counted including the first
    assert len(sleeps) == 2
    assert 0.2 <= sleeps[0] <= 0.25 and 0.4 <= sleeps[1] <= 0.5  # never shorter than the plan
    assert jitter_bounds(CHAPTER, 1) == (0.2, 0.25)

    @twice.retry(CHAPTER, sleep=sleeps.append)
    def baca_konfigurasi(berkas: str) -> None:
        calls["n"] += 1
        raise ValueError(f"kolom wajib hilang di {berkas}")

    with pytest.raises(ValueError, match=r"kolom wajib hilang di config\.yaml"):
        baca_konfigurasi("config.yaml")
    assert calls["n"] == 4 and len(sleeps) == 2  # one call, no retry, no wait


def test_timeout_scenario_is_an_unknown_outcome(tmp_path: Path) -> None:
    pipeline = Pipeline("bab", schedule=Schedule.daily("UTC"))

    @pipeline.task(timeout=0.3)
    def muat_tabel(ctx: TaskContext) -> str:
        time.sleep(1.0)  # simulasi query berat
        return "pesanan: selesai dimuat"

    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        started = time.monotonic()
        day = Schedule.daily("UTC").interval_for(__import__("datetime").date(2026, 11, 30))
        unit = Executor(pipeline, ledger).run(day).unit("muat_tabel")
        assert time.monotonic() - started < 0.9  # the caller stopped waiting at 0.3 s
        assert unit.outcome == "unknown-needs-reconcile"  # not failed: it may still finish
        assert [a.outcome for a in ledger.attempts(unit.uow_id or "")] == ["unknown"]
        assert "AttemptTimeout" in (unit.error or "")


def _window(as_of: int = 100) -> DecisionWindow:
    return DecisionWindow(as_of=as_of, deadline=1000, max_observation_age=60,
                          policy=RetryPolicy(max_attempts=3, initial_delay=10, max_delay=40,
                                             jitter="none"))


def _task(**fields: object) -> TaskEvidence:
    base: dict[str, object] = dict(id="load", state=TaskState.RETRYABLE, safe_repeat=True,
                                   attempts=1, observed_at=95, last_finished_at=90,
                                   duration=30, validation=5)
    base.update(fields)
    return TaskEvidence(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "message"), [
    ({"observed_at": 101}, r"tasks\[0\]\.observedAt \(101\) is after asOf \(100\)"),
    ({"last_finished_at": 96}, r"tasks\[0\]\.lastFinishedAt \(96\) is after observedAt \(95\)"),
    ({"state": TaskState.UNKNOWN}, r"tasks\[0\]\.lastFinishedAt must be None while state is"),
    ({"attempts": 0}, r"tasks\[0\]\.attempts must be an integer >= 1"),
    ({"duration": 0}, r"tasks\[0\]: duration must be > 0"),
])
def test_the_python_api_validates_like_the_lab_boundary(fields: dict[str, object],
                                                        message: str) -> None:
    with pytest.raises(EvidenceError, match=message) as caught:
        twice.decide(_window(), [_task(**fields)])
    assert isinstance(caught.value, InputError)


def test_the_python_api_decides_valid_evidence_like_the_lab() -> None:
    report = twice.decide(_window(), [_task()])
    [result] = report.tasks
    # finished at 90, backoff 10: eligible from 100 (= asOf), finishing 100 + 30 + 5
    assert result.decision.value == "retry-eligible" and result.backoff == 10
    assert (result.earliest_start, result.estimated_finish) == (100, 135)
    assert not (report.jobs_executed or report.idempotency_proven)
