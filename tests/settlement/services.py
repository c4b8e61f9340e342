"""A remote service for the settlement tests, with the semantics twice relies on."""

from __future__ import annotations

from collections import Counter
from typing import Any

from twice.define.pipeline import RemoteState


class JobService:
    """Runs each client-chosen job id once: submitting an id it knows adopts the existing job
    (as BigQuery's jobs.insert with a job id does). ``executions`` counts the real runs."""

    def __init__(self) -> None:
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.executions: Counter[str] = Counter()

    def submit(self, job_id: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if job_id not in self.results:
            self.executions[job_id] += 1
            self.results[job_id] = rows
        return self.results[job_id]

    def state(self, job_id: str) -> RemoteState:
        return RemoteState.SUCCEEDED if job_id in self.results else RemoteState.NOT_FOUND
